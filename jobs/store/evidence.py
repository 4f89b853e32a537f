"""The evidence behind the published docs, shipped with the repo so a fresh clone can check them.

`export_evidence` copies out of a results store exactly what docs/STATUS.md and
docs/BENCHMARKS.md rest on: the runs they cite (v_roadmap_board, v_latest_figures),
those runs' metrics and series, each roadmap row's newest gate evaluation, the
roadmap rows, and the runs' per-request Parquet. It writes JSON Lines, one file per
table, and appends only records not already there: a published figure's evidence is
never rewritten. `import_evidence` loads such a folder into an empty store, where
`roadgate docs --check` then reads exactly what the docs were written from.
"""
from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

from sqlalchemy import DateTime, Table, insert, select, text

from jobs.store.db import Store
from jobs.store.models import Base

REQUESTS = "requests"
# Export order is import order: a row after the rows it references.
TABLES = ("roadmap_rows", "runs", "series", "metrics", "gate_evaluations")
# What identifies a record already in a folder. A metric's id is only its store's number, and
# an entry's folder gathers runs from several GPU-host stores that all count from 1: within
# its run it is unique.
KEYS = {"roadmap_rows": ("id", "synced_at"), "runs": ("id",), "series": ("key",), "metrics": ("run_id", "id"),
        "gate_evaluations": ("id",)}
CITED_RUNS = text("SELECT run_id FROM v_roadmap_board WHERE run_id IS NOT NULL "
                  "UNION SELECT run_id FROM v_latest_figures")
NEWEST_EVALUATIONS = text("SELECT MAX(id) FROM gate_evaluations GROUP BY roadmap_row_id")


def export_evidence(store: Store, out_dir: str | Path, run_ids: list[str] | None = None) -> dict[str, int]:
    """Appends to `out_dir` what the docs cite (or, given `run_ids`, those runs: the evidence of a
    performance-log entry) and it does not hold yet; returns how many records, per table."""
    out = Path(out_dir)
    (out / REQUESTS).mkdir(parents=True, exist_ok=True)
    with store.engine.connect() as conn:
        runs = sorted(conn.execute(CITED_RUNS).scalars() if run_ids is None else run_ids)
        evaluations = list(conn.execute(NEWEST_EVALUATIONS).scalars())
        rows = {
            "roadmap_rows": _select(conn, "roadmap_rows"),
            "runs": _select(conn, "runs", "id", runs),
            "metrics": _select(conn, "metrics", "run_id", runs),
            "gate_evaluations": _select(conn, "gate_evaluations", "id", evaluations),
        }
        series = sorted({m["series"] for m in rows["metrics"] if m["series"]})
        rows["series"] = _select(conn, "series", "key", series)
    for run in rows["runs"]:
        if run["parquet_uri"]:   # shipped beside the records; the copy is what the record names
            shipped = out / REQUESTS / f"{run['id']}.parquet"
            if not shipped.exists():
                shutil.copyfile(_requests_file(store, run), shipped)
            run["parquet_uri"] = f"{REQUESTS}/{shipped.name}"
    return {name: _append_new(out / f"{name}.jsonl", rows[name], KEYS[name]) for name in TABLES}


def _requests_file(store: Store, run: dict) -> Path:
    """A run's Parquet file: where its record says, or under this store's root (a store copied
    from another host, as the GPU host's is, records that host's paths)."""
    recorded = Path(run["parquet_uri"].removeprefix("file://"))
    if recorded.is_file():
        return recorded
    found = sorted(Path(store.parquet_root).glob(f"date=*/run_id={run['id']}/requests.parquet"))
    if not found:
        raise FileNotFoundError(f"run {run['id']}: its request rows are neither at {recorded} "
                                f"nor under {store.parquet_root}")
    return found[0]


def import_evidence(evidence_dir: str | Path, store: Store) -> None:
    """Loads an evidence folder into `store` (migrated, empty), keeping every id as exported."""
    folder = Path(evidence_dir).resolve()
    with store.engine.begin() as conn:
        for name in TABLES:
            records = _records(folder, name)
            if name == "roadmap_rows":   # a mirror of the roadmap file: its newest export stands
                records = list({r["id"]: r for r in records}.values())
            if records:
                conn.execute(insert(Base.metadata.tables[name]), records)


def add_exported_runs(evidence_dir: str | Path, store: Store) -> list[str]:
    """Adds the runs of a folder that export_evidence wrote from another store (a GPU host's)
    to `store`, beside the runs it holds: the runs it does not hold yet (a folder published
    before and added to again has some), the series it does not have yet, and those runs'
    metrics under `store`'s own metric ids (the two stores numbered theirs apart).
    Returns the ids of the runs added; gates and docs are then evaluated on `store`."""
    folder = Path(evidence_dir).resolve()
    with store.engine.begin() as conn:
        tables = Base.metadata.tables
        have_series = set(conn.execute(select(tables["series"].c.key)).scalars())
        have_runs = set(conn.execute(select(tables["runs"].c.id)).scalars())
        runs = [r for r in _records(folder, "runs") if r["id"] not in have_runs]
        added = {r["id"] for r in runs}
        new_series = [r for r in _records(folder, "series") if r["key"] not in have_series]
        metrics = [{k: v for k, v in r.items() if k != "id"} for r in _records(folder, "metrics")
                   if r["run_id"] in added]
        for name, records in (("runs", runs), ("series", new_series), ("metrics", metrics)):
            if records:
                conn.execute(insert(Base.metadata.tables[name]), records)
    return [r["id"] for r in runs]


def _records(folder: Path, name: str) -> list[dict]:
    """The records of one table's JSON Lines in an evidence folder, as the store takes them
    (dates parsed; a run's Parquet path made absolute)."""
    table = Base.metadata.tables[name]
    records = [_decoded(table, r) for r in _read(folder / f"{name}.jsonl")]
    if name == "runs":
        for record in records:
            if record["parquet_uri"]:
                record["parquet_uri"] = str(folder / record["parquet_uri"])
    return records


def _select(conn, name: str, column: str | None = None, values: list | None = None) -> list[dict]:
    table = Base.metadata.tables[name]
    query = select(table) if column is None else select(table).where(table.c[column].in_(values))
    return [dict(r._mapping) for r in conn.execute(query.order_by(*table.primary_key.columns))]


def _append_new(path: Path, rows: list[dict], key: tuple[str, ...]) -> int:
    have = {tuple(str(r[k]) for k in key) for r in _read(path)}
    new = [r for r in rows if tuple(str(_encoded(r[k])) for k in key) not in have]
    if new:
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps({k: _encoded(v) for k, v in r.items()}, sort_keys=True) + "\n" for r in new)
    return len(new)


def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _encoded(value):
    return value.isoformat() if isinstance(value, datetime) else value


def _decoded(table: Table, record: dict) -> dict:
    return {name: datetime.fromisoformat(value) if isinstance(table.c[name].type, DateTime) and value else value
            for name, value in record.items()}
