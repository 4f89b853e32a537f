"""8 processes ingesting into one PostgreSQL database at once lose nothing and duplicate nothing."""
import multiprocessing

import pyarrow as pa
from sqlalchemy import text

from jobs.store import open_store, record_run
from tests.store_support import metrics, nightly

PROCESSES, RUNS_EACH = 8, 25
SHARED_RUN_ID = "00000000-0000-4000-8000-00000000beef"  # every process retries this one


def ingest(url: str, root: str, worker: int, barrier) -> None:
    store = open_store(url, root)
    requests = pa.table({"request_id": list(range(16))})
    barrier.wait()
    record_run(store, nightly(0, id=SHARED_RUN_ID), metrics(output_tok_s=1.0), requests)
    for i in range(RUNS_EACH):
        record_run(store, nightly(i, host=f"worker-{worker}"), metrics(output_tok_s=float(i), wall_s=1.0), requests)
    store.engine.dispose()


def test_parallel_ingest_into_postgresql(pg_url, tmp_path):
    from jobs.store import upgrade
    store = open_store(pg_url, str(tmp_path / "requests"))
    upgrade(store.engine)
    store.engine.dispose()  # children must not inherit open connections
    ctx = multiprocessing.get_context("fork")  # inherits the imports: starts in milliseconds
    barrier = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=ingest, args=(pg_url, store.parquet_root, w, barrier)) for w in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    with store.engine.connect() as conn:
        runs = conn.execute(text("SELECT host, COUNT(*) FROM runs GROUP BY host")).all()
        n_metrics, n_distinct = conn.execute(
            text("SELECT COUNT(*), COUNT(DISTINCT run_id || engine || metric) FROM metrics")).one()
    assert dict(runs) == {"gpu-1": 1, **{f"worker-{w}": RUNS_EACH for w in range(PROCESSES)}}
    assert n_metrics == n_distinct == 1 + PROCESSES * RUNS_EACH * 2
