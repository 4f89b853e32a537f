"""Results-store benchmark: ingest speed and gate-evaluation speed, on SQLite and PostgreSQL.

1. ingest: 1,000,000 per-request rows to Parquet plus their run summaries to SQL,
   through the public record_run API (target: <= 10 s).
2. evaluate: 50 roadmap rows over 5 years of nightly history (target: <= 2 s).
   The history is loaded with bulk inserts (not timed); only evaluate_gates is.

Run from the repo root: python -m benchmarks.store_bench [--runs N --rows-per-run M] [--pg-server URL]
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import yaml
from sqlalchemy import insert

from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.registry import METRICS
from jobs.store import MetricRecord, RunRecord, fingerprint, open_store, record_run, upgrade
from jobs.store.models import Metric, Run

ENGINES = ["roadgate", "hf-transformers"]
WORKLOADS = ["nano-bench", "fixed-256x128x128", "fixed-64x512x256", "latency-b1", "chat-real"]
HARDWARE = ["H200", "A100"]
ROW_METRICS = ["output_tok_s", "ttft_p50_s", "tpot_p50_s", "e2e_p50_s", "syncs_per_step"]
NIGHTS = 5 * 365
START = datetime(2021, 1, 1, 2, 0)


def request_rows(n: int, rng: np.random.Generator) -> pa.Table:
    return pa.table({
        "request_id": np.arange(n, dtype=np.int64),
        "engine": pa.array(["roadgate"] * n).dictionary_encode(),
        "prompt_tokens": rng.integers(100, 1024, n, dtype=np.int32),
        "output_tokens": rng.integers(100, 1024, n, dtype=np.int32),
        "ttft_s": rng.gamma(2.0, 0.01, n),
        "tpot_s": rng.gamma(2.0, 0.002, n),
        "e2e_s": rng.gamma(2.0, 1.0, n),
        "finish_reason": pa.array(["length"] * n).dictionary_encode(),
    })


def summary(rng: np.random.Generator) -> list[MetricRecord]:
    return [MetricRecord(e, m, float(rng.random()), count=256) for e in ENGINES for m in METRICS]


def bench_ingest(url: str, root: str, runs: int, rows_per_run: int) -> float:
    store = open_store(url, root)
    upgrade(store.engine)
    rng = np.random.default_rng(0)
    tables = [request_rows(rows_per_run, rng) for _ in range(4)]  # made up front: not what is timed
    summaries = [summary(rng) for _ in range(4)]
    started = time.perf_counter()
    for i in range(runs):
        at = START + timedelta(minutes=i)
        record_run(store, RunRecord(kind="bench", workload="nano-bench", hardware_class="H200", started_at=at,
                                    finished_at=at + timedelta(minutes=5)), summaries[i % 4], tables[i % 4])
    elapsed = time.perf_counter() - started
    store.engine.dispose()
    return elapsed


def roadmap_rows() -> list[dict]:
    rows = []
    for w in WORKLOADS:
        for h in HARDWARE:
            for m in ROW_METRICS:
                peer = m == "output_tok_s"
                rows.append(dict(
                    id=f"ROAD-BENCH-{w}-{h}-{m}".upper().replace("_", "-"), title=f"{m} on {w}/{h}", metric=m,
                    engine="roadgate", comparison=">=" if METRICS[m].better == "higher" else "<=",
                    threshold={"ratio": 1.0, "peer": "hf-transformers"} if peer else 0.5, workload=w, hardware=h,
                    max_age_days=3, validity={"min_samples": 100, "min_duration_s": 60}))
    return rows


def load_history(store, with_distributions: bool = False) -> int:
    """Five years of nightly runs for every workload x hardware, both engines, every metric.

    with_distributions: also the summary (count, p50, p90, p99, mean, std) bench stores with each metric.
    """
    rng = np.random.default_rng(1)
    runs, metrics = [], []
    for night in range(NIGHTS):
        at = START + timedelta(days=night)
        for w in WORKLOADS:
            for h in HARDWARE:
                run_id = str(uuid.uuid4())
                runs.append(dict(id=run_id, kind="bench", status="ok", workload=w, hardware_class=h, started_at=at,
                                 finished_at=at + timedelta(minutes=10), config={}, preflight_status="quiet",
                                 preflight={}, fingerprint=fingerprint(w, h, None, {}), recorded_at=at))
                values = rng.random(len(METRICS) * len(ENGINES))
                metrics += [dict(run_id=run_id, engine=e, metric=m, unit=spec.unit, better=spec.better,
                                 value=float(v), count=256, recorded_at=at,
                                 **(dict(p50=float(v), p90=1.5 * v, p99=3 * v, mean=1.2 * v, std=v / 2)
                                    if with_distributions else {}))
                            for v, (e, (m, spec)) in zip(values, ((e, ms) for e in ENGINES for ms in METRICS.items()))]
    with store.engine.begin() as conn:
        for start in range(0, len(runs), 5000):
            conn.execute(insert(Run), runs[start:start + 5000])
        for start in range(0, len(metrics), 20000):
            conn.execute(insert(Metric), metrics[start:start + 20000])
    return len(metrics)


def bench_evaluate(url: str) -> tuple[int, float, float]:
    store = open_store(url, "unused")
    upgrade(store.engine)
    sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": roadmap_rows()})))
    loaded = time.perf_counter()
    n_metrics = load_history(store)
    load_s = time.perf_counter() - loaded
    now = START + timedelta(days=NIGHTS)
    evaluate_gates(store, now)  # warm the connection and caches: the nightly job's steady state
    started = time.perf_counter()
    evaluations = evaluate_gates(store, now)
    elapsed = time.perf_counter() - started
    assert len(evaluations) == 50
    store.engine.dispose()
    return n_metrics, load_s, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-server", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rows-per-run", type=int, default=5000)
    args = parser.parse_args()
    name = f"roadgate_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{args.pg_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            targets = {"sqlite": f"sqlite:///{tmp}/bench.db", "postgresql": f"{args.pg_server}/{name}"}
            rows = args.runs * args.rows_per_run
            for dialect, url in targets.items():
                s = bench_ingest(url, str(Path(tmp) / f"requests-{dialect}"), args.runs, args.rows_per_run)
                print(f"ingest   {dialect:10s} {rows:,} request rows in {args.runs} runs "
                      f"(+{args.runs * len(ENGINES) * len(METRICS):,} metric rows): {s:.2f} s")
            with psycopg.connect(f"{args.pg_server}/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
                conn.execute(f"CREATE DATABASE {name}")
            targets["sqlite"] = f"sqlite:///{tmp}/evaluate.db"
            for dialect, url in targets.items():
                n_metrics, load_s, s = bench_evaluate(url)
                print(f"evaluate {dialect:10s} 50 rows over {NIGHTS} nights ({n_metrics:,} metric rows, "
                      f"loaded in {load_s:.1f} s): {s:.3f} s")
    finally:
        with psycopg.connect(f"{args.pg_server}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
