"""Session 23: this session's device runs into the published store. A local store is rebuilt
from docs/evidence (what the docs stand on), the runs of call 8's store are exported into
this folder (export_evidence: runs, metrics, series, Parquet) and loaded beside them (the
metrics under the local store's own ids); then
`roadgate gates evaluate` and `roadgate docs` run against that store.
    python3 docs/performance-evidence/2026-12-04-s23-issue20-prefill-wgmma/publish.py DEVICE_DB LOCAL_DB
"""
import sys
from pathlib import Path

from sqlalchemy import insert, select

from jobs.store.evidence import _decoded, _read, export_evidence, import_evidence
from jobs.store.models import Base
from jobs.store.ready import open_ready_store

device_db, local_db = sys.argv[1], sys.argv[2]
here = Path(__file__).resolve().parent
device = open_ready_store(f"sqlite:///{device_db}", existing=True)
with device.engine.connect() as conn:
    run_ids = list(conn.execute(select(Base.metadata.tables["runs"].c.id)).scalars())
export_evidence(device, here / "store", run_ids)

local = open_ready_store(f"sqlite:///{local_db}", str(Path(local_db).parent / "parquet"))
import_evidence(Path("docs/evidence"), local)
new = here / "store"
with local.engine.begin() as conn:   # the new runs beside what is published: runs, series, metrics
    have_series = set(conn.execute(select(Base.metadata.tables["series"].c.key)).scalars())
    for name in ("runs", "series", "metrics"):
        table = Base.metadata.tables[name]
        records = [_decoded(table, r) for r in _read(new / f"{name}.jsonl")]
        if name == "series":
            records = [r for r in records if r["key"] not in have_series]
        for r in records:
            if name == "metrics":
                del r["id"]   # the local store numbers its metrics itself
            if name == "runs" and r["parquet_uri"]:
                r["parquet_uri"] = str(new / r["parquet_uri"])
        if records:
            conn.execute(insert(table), records)
print("published store:", local_db, "runs added:", run_ids)
