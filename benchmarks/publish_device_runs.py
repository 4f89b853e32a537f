"""A GPU host's runs into the published docs.

    python3 benchmarks/publish_device_runs.py DEVICE_DB EVIDENCE_DIR [WORK_DIR]

DEVICE_DB is the SQLite store a device run wrote (ROADGATE_DATA_DIR=$OUT/data, brought back
with its `requests/` Parquet beside it). Its runs are exported into EVIDENCE_DIR, the
performance-log entry's folder that ships with the repo. A local store in WORK_DIR (default: a
temporary folder) is rebuilt from docs/evidence, what the published docs stand on, and the
device's runs are added beside those; then the gates are evaluated and the docs written from
that store (`roadgate gates evaluate`, `roadgate docs`), which appends to docs/evidence what
the docs now cite. Run from the repository root.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sqlalchemy import select

from jobs.cli import main as roadgate
from jobs.store.evidence import add_exported_runs, export_evidence, import_evidence
from jobs.store.models import Base
from jobs.store.ready import open_ready_store


def publish(device_db: Path, evidence_dir: Path, work_dir: Path) -> list[str]:
    device = open_ready_store(f"sqlite:///{device_db}", str(device_db.parent / "requests"), existing=True)
    with device.engine.connect() as conn:
        run_ids = list(conn.execute(select(Base.metadata.tables["runs"].c.id)).scalars())
    export_evidence(device, evidence_dir, run_ids)
    url = f"sqlite:///{work_dir / 'roadgate.db'}"
    local = open_ready_store(url, str(work_dir / "requests"))
    import_evidence(Path("docs/evidence"), local)
    added = add_exported_runs(evidence_dir, local)
    for command in (["gates", "evaluate", "--db-url", url], ["docs", "--db-url", url, "--out", "docs"]):
        if roadgate(command):
            raise SystemExit(f"roadgate {' '.join(command)} failed")
    return added


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    device_db, evidence = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    if not device_db.is_file():
        print(f"publish_device_runs: {device_db}: no such store", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(sys.argv[3]) if len(sys.argv) == 4 else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        print("runs published:", ", ".join(publish(device_db, evidence, work)))
