"""8 `roadgate bench` processes into one fresh store at once record 8 runs, whole."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from jobs.cli import main
from jobs.store import open_store
from tests.store_support import TINY_WORKLOAD

BENCHES = 8


@pytest.mark.slow
def test_concurrent_benches_into_one_fresh_store_record_every_run(db_url, tmp_path, monkeypatch):
    (tmp_path / "workloads.yaml").write_text(TINY_WORKLOAD)
    root = tmp_path / "requests"
    env = {**os.environ, "ROADGATE_WORKLOADS_FILE": str(tmp_path / "workloads.yaml"), "ROADGATE_DB_URL": db_url,
           "ROADGATE_DATA_DIR": str(tmp_path / "data"), "ROADGATE_PARQUET_ROOT": str(root),
           "OMP_NUM_THREADS": "1"}   # 8 processes share the host's cores
    env.pop("ROADGATE_DB_MIGRATE_URL", None)
    roadgate = Path(sys.executable).parent / "roadgate"
    started = time.perf_counter()
    benches = [subprocess.Popen([roadgate, "bench", "--workload", "tiny", "--engine", "ours", "--backend", "torch"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for _ in range(BENCHES)]
    errors = [bench.communicate(timeout=300)[1] for bench in benches]
    print(f"{BENCHES} concurrent benches: {time.perf_counter() - started:.1f} s")
    assert [b.returncode for b in benches] == [0] * BENCHES, "\n".join(errors)

    store = open_store(db_url)
    with store.engine.connect() as conn:
        runs = dict(conn.execute(text("SELECT id, parquet_uri FROM runs WHERE workload = 'tiny'")).all())
        per_run = conn.execute(text("SELECT COUNT(*) FROM metrics GROUP BY run_id")).scalars().all()
    store.engine.dispose()
    assert len(runs) == BENCHES
    assert len(per_run) == BENCHES and len(set(per_run)) == 1 and per_run[0] > 0
    files = sorted(str(p) for p in root.rglob("requests.parquet"))
    assert files == sorted(runs.values())
    assert [pq.read_table(f).num_rows for f in files] == [2] * BENCHES
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ROADGATE_PARQUET_ROOT", str(root))
    assert main(["db", "check", "--db-url", db_url, "--older-than", "0"]) == 0   # no orphan, no temporary file
