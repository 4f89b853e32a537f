"""Deterministic kill points for tests/test_fault_injection.py, on the child's side.

run_task() runs one real task (a `roadgate` command, or a jobs.batch function) in this
child process and counts its events, each just before it happens:

    file      an open, rename, link, remove, mkdir, rmdir or directory listing of a path
              under a watched folder (audit hooks; what pyarrow writes in C++ is not seen)
    parquet   a table (a row group, or a whole small file) handed to a ParquetWriter
    sql       a statement sent to the database (SQLAlchemy's before_cursor_execute)
    step      one step of our engine (LLM.step): a prefill or a decode

At event number `kill_at` the process SIGKILLs itself, as a node dying there would: no
cleanup, no finally block, no atexit. A task that runs to its end writes its result and
its list of events to `out` (JSON): run without `kill_at`, that is the calibration the test
picks its kill points from. The same task on the same starting state makes the same events.

Imported by the fork server (the test's preload): torch, the engine and the jobs are
imported once, and each child starts in milliseconds.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from sqlalchemy import Engine, event

import engine.llm
from jobs.atomic import atomic_parquet_writer
from jobs.batch import BatchParams, commit_batch, generate_shard, split_input
from jobs.cli import main
from jobs.store.parquet import write_requests
from jobs.tempfiles import owned_name

FILE_EVENTS = {"open", "os.rename", "os.link", "os.remove", "os.rmdir", "os.mkdir", "os.scandir", "os.listdir",
               "shutil.rmtree"}


def roadgate(argv: list[str]) -> None:
    code = main(argv)
    if code:
        raise SystemExit(code)


def split(params: dict, key: str) -> list[dict]:
    return split_input(BatchParams(**params), key)


def generate(shard: dict, params: dict, key: str) -> dict:
    return generate_shard(shard, BatchParams(**params), key)


def generate_all(params: dict, key: str) -> list[dict]:
    return [generate(shard, params, key) for shard in split(params, key)]


def commit(results: list[dict], params: dict, key: str, dag_id: str, run_id: str) -> dict:
    return commit_batch(results, BatchParams(**params), key, dag_id, run_id)


def pipeline(params: dict, key: str, dag_id: str, run_id: str) -> dict:
    """A whole DAG run's tasks, one after the other: what a retry of the run does."""
    return commit(generate_all(params, key), params, key, dag_id, run_id)


def _hold(marker: str) -> None:
    """Tells the test this process got there, then stays, alive, until the test kills it."""
    Path(marker).touch()
    time.sleep(600)


def write_parquet_and_hold(path: str, marker: str) -> None:
    """A live writer with a row group written to its temporary file."""
    with atomic_parquet_writer(path, pa.schema([("x", pa.int64())])) as writer:
        writer.write_table(pa.table({"x": [1]}))
        _hold(marker)


def write_requests_and_hold(root: str, run_id: str, marker: str) -> None:
    """A live bench between writing its request rows and recording its run."""
    write_requests(root, run_id, date(2025, 1, 1), pa.table({"request_id": [0, 1]}))
    _hold(marker)


def hold_temporary(directory: str, target: str, marker: str) -> None:
    """A live process with a temporary file of its own in `directory`."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / owned_name(target)).touch()
    _hold(marker)


TASKS = {f.__name__: f for f in (roadgate, split, generate, generate_all, commit, pipeline, write_parquet_and_hold,
                                 write_requests_and_hold, hold_temporary)}


def run_task(task: str, args: tuple, env: dict, watched: list[str], kill_at: int | None, out: str) -> None:
    for name in [n for n in os.environ if n.startswith("ROADGATE_")]:
        del os.environ[name]   # the fork server's environment is the test session's
    os.environ.update(env)
    torch.set_num_threads(1)   # others share this host's cores
    events: list[str] = []
    counting = True

    def note(kind: str, detail: str) -> None:
        if not counting:
            return
        events.append(f"{kind} {detail}")
        if len(events) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    prefixes = tuple(watched)

    def audit(name: str, args: tuple) -> None:
        if name in FILE_EVENTS:
            paths = [os.fspath(a) for a in args if isinstance(a, (str, os.PathLike))]
            hit = next((p for p in paths if isinstance(p, str) and p.startswith(prefixes)), None)
            if hit:
                note("file", f"{name} {hit}")

    sys.addaudithook(audit)
    event.listen(Engine, "before_cursor_execute",
                 lambda _conn, _cursor, statement, *_: note("sql", " ".join(statement.split()[:3])))
    write_table, step = pq.ParquetWriter.write_table, engine.llm.LLM.step

    def counted_write_table(self, table, *args, **kwargs):
        note("parquet", f"{table.num_rows} rows")
        return write_table(self, table, *args, **kwargs)

    def counted_step(self):
        note("step", "")
        return step(self)

    pq.ParquetWriter.write_table, engine.llm.LLM.step = counted_write_table, counted_step
    result = TASKS[task](*args)
    counting = False   # writing the result is the test's, not the task's
    with open(out, "w") as f:
        json.dump({"events": events, "result": result}, f, default=str)
