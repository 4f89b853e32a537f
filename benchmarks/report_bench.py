"""Dashboard benchmark: render_dashboard over 5 years of nightly history for 50 roadmap rows (target: <= 5 s).

The history is the one benchmarks/store_bench.py evaluates the gates over (18,250
runs, 547,500 metrics, here with their latency summaries), bulk-inserted, plus two
change points per roadmap row's series and one gate evaluation (then ANALYZE on
PostgreSQL, as autovacuum would); none of that is timed. Timed: render_dashboard, queries and HTML together, cold (first call on a
fresh connection pool) and warm; and write_docs.

Run from the repo root: python -m benchmarks.report_bench [--postgresql] [--pg-server URL]
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import yaml
from sqlalchemy import insert, text

from benchmarks.store_bench import NIGHTS, START, load_history, roadmap_rows
from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.report import render_dashboard, write_docs
from jobs.store import open_store, upgrade
from jobs.store.models import ChangePoint


def plant_change_points(store) -> int:
    """Two change points in each roadmap row's series, between real runs of it (a third and two thirds in)."""
    with store.engine.begin() as conn:
        series = conn.execute(text(
            "SELECT DISTINCT m.fingerprint, m.engine, m.metric FROM v_metric_history m "
            "JOIN roadmap_rows rr ON rr.workload = m.workload AND rr.hardware_class = m.hardware_class "
            "AND rr.engine = m.engine AND rr.metric = m.metric")).all()
        rows = []
        for fp, engine, metric in series:
            runs = conn.execute(text(
                "SELECT run_id FROM v_metric_history WHERE fingerprint = :fp AND engine = :e AND metric = :m "
                "ORDER BY started_at"), {"fp": fp, "e": engine, "m": metric}).scalars().all()
            for at, worse in ((len(runs) // 3, True), (2 * len(runs) // 3, False)):
                rows.append(dict(fingerprint=fp, engine=engine, metric=metric, last_run_before_id=runs[at - 1],
                                 first_run_after_id=runs[at], mean_before=0.5, mean_after=0.6 if worse else 0.4,
                                 change_percent=20.0 if worse else -20.0, pvalue=1e-6, is_regression=worse,
                                 detected_at=START + timedelta(days=NIGHTS)))
        conn.execute(insert(ChangePoint), rows)
    return len(rows)


def bench(url: str, tmp: Path) -> None:
    store = open_store(url, str(tmp / "requests"))
    upgrade(store.engine)
    sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": roadmap_rows()})))
    loaded = time.perf_counter()
    n_metrics = load_history(store, with_distributions=True)
    n_changes = plant_change_points(store)
    now = START + timedelta(days=NIGHTS)
    evaluate_gates(store, now)
    if store.engine.dialect.name == "postgresql":
        # What autovacuum does soon after a bulk load; before it, the planner has no statistics
        # for 620,000 fresh rows and picks plans that take minutes.
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
    print(f"  loaded {NIGHTS} nights, {n_metrics:,} metric rows, {n_changes} change points, 50 evaluations "
          f"in {time.perf_counter() - loaded:.1f} s (not timed)")
    store.engine.dispose()
    for attempt in ("cold", "warm"):
        started = time.perf_counter()
        path = render_dashboard(store, tmp / "site", now=now)
        elapsed = time.perf_counter() - started
        print(f"  render_dashboard ({attempt}): {elapsed:.2f} s -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    started = time.perf_counter()
    write_docs(store, tmp / "docs")
    print(f"  write_docs: {time.perf_counter() - started:.2f} s")
    store.engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgresql", action="store_true", help="also on PostgreSQL (a throwaway database)")
    parser.add_argument("--pg-server", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("sqlite")
        bench(f"sqlite:///{tmp}/report.db", Path(tmp) / "sqlite")
        if args.postgresql:
            name = f"roadgate_report_bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(f"{args.pg_server}/postgres", autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            try:
                print("postgresql")
                bench(f"{args.pg_server}/{name}", Path(tmp) / "postgresql")
            finally:
                with psycopg.connect(f"{args.pg_server}/postgres", autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
