"""SIGKILL at 10 or more points of each task, then the next run: nothing broken, lost,
duplicated or left behind.

Each task (`roadgate generate`, `roadgate bench`, `roadgate db upgrade`, and the batch
DAG's split, generate-shard and commit as the jobs.batch functions) runs once to count its
events (tests/fault_points.py: file operations, Parquet writes, SQL statements, engine
steps); the kill points are spread evenly over them, with at least one at each kind. At
each point a fresh copy of the starting state is killed there, then checked: whatever
output exists is whole; then the next run, which must finish and leave every committed
row exactly once, a store `roadgate db check` finds nothing in, and no temporary file.

Tiny on purpose: a 2-layer model (tests/tiny_model.py), 2 to 4 rows, 2 or 3 tokens each.
"""
from __future__ import annotations

import json
import multiprocessing
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from jobs.atomic import atomic_parquet_writer, atomic_write_texts
from jobs.batch import BatchParams, commit_batch, parse_params, read_committed, run_key, split_input
from jobs.cli import main
from jobs.store import open_store, record_run, upgrade
from jobs.store.check import find_strays
from jobs.tempfiles import OWNED
from tests.conftest import CHAT_PROMPTS
from tests.store_support import TINY_WORKLOAD, metrics, nightly
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

KILLS = 10
DAG_ID, RUN_ID = "batch_generation", "manual__faults"
KEY = run_key(DAG_ID, RUN_ID)
# Children come from a fork server that imported torch, the engine and the jobs once: they
# start in milliseconds, and none inherits the test session's threads or open databases.
FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["tests.fault_points"])


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """A data directory holding a migrated, empty store, copied as each run's starting state
    (the migrations' own kill points are tests/store/test_atomic_upgrade.py's)."""
    data = tmp_path_factory.mktemp("empty-store") / "data"
    store = open_store(f"sqlite:///{data / 'roadgate.db'}", str(data / "requests"))
    upgrade(store.engine)
    store.engine.dispose()
    return data


def in_child(tmp_path: Path, watched: list[Path], task: str, *args, env: dict, kill_at: int | None = None):
    """Runs tests.fault_points' `task` in a child; returns (exit code, what it wrote: its
    events and result, or None when it did not finish)."""
    from tests.fault_points import run_task
    out = tmp_path / "child-result.json"
    out.unlink(missing_ok=True)
    child = FORKSERVER.Process(target=run_task, args=(task, args, env, [str(w) for w in watched], kill_at, str(out)))
    child.start()
    child.join(300)
    assert child.exitcode is not None, f"{task} still running after 300 s"
    return child.exitcode, json.loads(out.read_text()) if out.exists() else None


def kill_points(events: list[str]) -> list[int]:
    """KILLS points spread evenly over the events, plus one at each kind of event they missed."""
    assert len(events) >= KILLS, f"only {len(events)} events: {events}"
    points = {1 + round(i * (len(events) - 1) / (KILLS - 1)) for i in range(KILLS)}
    for kind in dict.fromkeys(" ".join(e.split()[:2]) if e.startswith("file") else e.split()[0] for e in events):
        at = [i for i, e in enumerate(events, 1) if e.startswith(kind)]
        if not points & set(at):
            points.add(at[len(at) // 2])
    print(f"{len(points)} kill points over {len(events)} events:",
          "; ".join(f"{n}: {events[n - 1]}" for n in sorted(points)))
    return sorted(points)


def killed_at_each_point(tmp_path: Path, watched: list[Path], prepare, task: str, args_for, env_for) -> Iterator:
    """Calibrates `task` (its arguments and environment: args_for(root), env_for(root)) on a
    root that prepare(root) made, then yields (point, root) each time `task` was killed at
    that point on a freshly prepared root."""
    calibration = tmp_path / "calibration"
    prepare(calibration)
    code, done = in_child(tmp_path, watched, task, *args_for(calibration), env=env_for(calibration))
    assert code == 0 and done, f"{task} failed on its own (exit {code})"
    for n in kill_points(done["events"]):
        root = tmp_path / f"killed-at-{n}"
        prepare(root)
        code, _ = in_child(tmp_path, watched, task, *args_for(root), env=env_for(root), kill_at=n)
        assert code == -signal.SIGKILL, f"{task} at event {n}: exit {code}, not killed"
        yield n, root


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp")]


def db_check(root: Path, monkeypatch) -> int:
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(root / "data"))
    monkeypatch.delenv("ROADGATE_DB_URL", raising=False)
    monkeypatch.delenv("ROADGATE_PARQUET_ROOT", raising=False)
    return main(["db", "check", "--older-than", "0"])


def store_rows(root: Path, sql: str) -> list[tuple]:
    store = open_store(f"sqlite:///{root / 'data' / 'roadgate.db'}")
    try:
        with store.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        store.engine.dispose()


def write_prompts(path: Path, n: int) -> list[str]:
    rows = [json.loads(line) for line in CHAT_PROMPTS.read_text().splitlines()[:n]]
    path.write_text("".join(json.dumps({**r, "id": f"row-{i}"}) + "\n" for i, r in enumerate(rows)))
    return [f"row-{i}" for i in range(n)]


# ---------------------------------------------------------------- roadgate generate

def test_generate_killed_anywhere_leaves_no_partial_output_and_the_next_run_cleans_up(tmp_path, tiny_model):
    prompts = tmp_path / "prompts.jsonl"
    ids = write_prompts(prompts, 3)
    watched = [tmp_path, tiny_model.parent]

    def argv(root: Path) -> tuple[list[str]]:
        return (["generate", "--model", str(tiny_model), "--input", str(prompts), "--output",
                 str(root / "out.parquet"), "--backend", "torch", "--max-tokens", "3"],)

    def whole(out: Path) -> bool:
        table = pq.read_table(out)
        tokens = table.column("output_tokens").to_pylist()
        return table.column("id").to_pylist() == ids and all(0 < n <= 3 for n in tokens)

    left_behind = []
    for n, root in killed_at_each_point(tmp_path, watched, lambda root: root.mkdir(), "roadgate", argv,
                                        lambda root: {}):
        left_behind += [n] if temporaries(root) else []
        out = root / "out.parquet"
        if out.exists():   # killed after the rename: the output is the whole job
            assert whole(out), f"event {n}"
        else:
            code, _ = in_child(tmp_path, watched, "roadgate", *argv(root), env={})
            assert code == 0 and whole(out), f"event {n}: exit {code}"
        assert temporaries(root) == [], f"event {n}"
    assert left_behind, "no kill left a temporary file: its removal went untested"


# ---------------------------------------------------------------- roadgate bench

def test_bench_killed_anywhere_leaves_a_consistent_store_and_the_next_run_cleans_up(tmp_path, tiny_model,
                                                                                   empty_store, monkeypatch):
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(TINY_WORKLOAD)
    watched = [tmp_path, tiny_model.parent]
    argv = (["bench", "--workload", "tiny", "--engine", "ours", "--backend", "torch", "--model", str(tiny_model)],)

    def env(root: Path) -> dict:
        return {"ROADGATE_WORKLOADS_FILE": str(workloads), "ROADGATE_DATA_DIR": str(root / "data")}

    def consistent(root: Path) -> list[str]:
        """The recorded runs, each with its metrics and its whole Parquet; every Parquet file is whole."""
        runs = store_rows(root, "SELECT id, parquet_uri, (SELECT COUNT(*) FROM metrics m WHERE m.run_id = runs.id) "
                                "FROM runs")
        assert all(count > 0 and pq.read_table(uri).num_rows == 2 for _, uri, count in runs)
        assert all(pq.read_table(p).num_rows == 2 for p in (root / "data").rglob("requests.parquet"))
        return [run_id for run_id, _, _ in runs]

    left_behind = []
    for n, root in killed_at_each_point(tmp_path, watched, lambda root: shutil.copytree(empty_store, root / "data"),
                                        "roadgate", lambda root: argv, env):
        # A kill point comes before an event and the SQL COMMIT is none: a killed bench records nothing.
        assert consistent(root) == [], f"event {n}"
        left_behind += [n] if db_check(root, monkeypatch) else []   # a temporary or an orphan Parquet file
        code, _ = in_child(tmp_path, watched, "roadgate", *argv, env=env(root))
        assert code == 0, f"event {n}: the next run exited {code}"
        assert len(consistent(root)) == 1, f"event {n}"
        assert db_check(root, monkeypatch) == 0, f"event {n}: db check found strays"
        assert temporaries(root) == [], f"event {n}"
    assert left_behind, "no kill left a stray file: its removal went untested"


# ---------------------------------------------------------------- roadgate db upgrade

def test_db_upgrade_killed_anywhere_keeps_the_store_as_it_was_and_the_next_run_upgrades(tmp_path, monkeypatch):
    template = tmp_path / "template" / "data"
    store = open_store(f"sqlite:///{template / 'roadgate.db'}", str(template / "requests"))
    upgrade(store.engine)
    # No request rows: their Parquet path would name the template's copy, not each root's.
    run_id = record_run(store, nightly(0), metrics(output_tok_s=100.0))
    with store.engine.begin() as conn:   # as after a release that changed the views
        conn.execute(text("UPDATE store_state SET value = 'older views' WHERE key = 'views_digest'"))
    store.engine.dispose()
    argv = (["db", "upgrade"],)

    def env(root: Path) -> dict:
        return {"ROADGATE_DATA_DIR": str(root / "data")}

    for n, root in killed_at_each_point(tmp_path, [tmp_path], lambda root: shutil.copytree(template, root / "data"),
                                        "roadgate", lambda root: argv, env):
        # One transaction: nothing of the upgrade is left, everything before it is.
        assert store_rows(root, "SELECT value FROM store_state WHERE key = 'views_digest'") == [("older views",)], n
        assert store_rows(root, "SELECT id FROM runs") == [(run_id,)], f"event {n}"
        code, _ = in_child(tmp_path, [tmp_path], "roadgate", *argv, env=env(root))
        assert code == 0, f"event {n}: the next run exited {code}"
        assert store_rows(root, "SELECT run_id, value FROM v_metric_history") == [(run_id, 100.0)], f"event {n}"
        assert store_rows(root, "SELECT value FROM store_state WHERE key = 'views_digest'") != [("older views",)]
        assert db_check(root, monkeypatch) == 0, f"event {n}: db check found strays"
        assert temporaries(root) == [], f"event {n}"


# ---------------------------------------------------------------- the batch DAG's tasks

class Batch:
    """What the batch tests share: 4 input rows, 2 shards, 2 tokens a row, a store per root."""

    def __init__(self, tmp_path: Path, model: Path, empty_store: Path, monkeypatch):
        self.tmp_path, self.model, self.empty_store, self.monkeypatch = tmp_path, model, empty_store, monkeypatch
        self.prompts = tmp_path / "prompts.jsonl"
        self.ids = write_prompts(self.prompts, 4)
        self.watched = [tmp_path, model.parent]

    def params(self, root: Path) -> dict:
        return parse_params({"model": str(self.model), "input_uri": str(self.prompts), "output_uri": str(root / "out"),
                             "num_shards": 2, "backend": "torch", "row_group_size": 1,
                             "sampling": {"max_tokens": 2, "temperature": 0.0, "seed": 0}}).as_dict()

    def env(self, root: Path) -> dict:
        return {"ROADGATE_DATA_DIR": str(root / "data")}

    def run(self, root: Path, task: str, *args):
        return in_child(self.tmp_path, self.watched, task, *args, env=self.env(root))

    def fresh(self, root: Path) -> None:
        shutil.copytree(self.empty_store, root / "data")

    def split(self, root: Path) -> list[dict]:
        self.fresh(root)
        return split_input(BatchParams(**self.params(root)), KEY)

    def generated(self, root: Path) -> list[dict]:
        """Split, and every shard generated: the results the commit task is given."""
        self.split(root)
        code, done = self.run(root, "generate_all", self.params(root), KEY)
        assert code == 0
        return done["result"]

    def killed_at_each_point(self, prepare, task: str, args_for) -> Iterator:
        """As the module's, checking what each killed task left: parts whole and this run's, a
        manifest only over whole parts; and that some kill left temporary files behind."""
        left_behind = []
        for n, root in killed_at_each_point(self.tmp_path, self.watched, prepare, task, args_for, self.env):
            out = root / "out"
            for part in out.glob("part-*.parquet"):
                assert pq.read_schema(part).metadata[b"roadgate.batch_run_key"] == KEY.encode(), f"event {n}"
                assert pq.read_table(part).num_rows == 2, f"event {n}"
            if (out / "_manifest.json").exists():
                assert read_committed(str(out)).column("id").to_pylist() == self.ids, f"event {n}"
            left_behind += [n] if temporaries(root) else []
            yield n, root
        assert left_behind, "no kill left a temporary file: its removal went untested"

    def next_run_commits_every_row_once(self, root: Path, n: int) -> None:
        code, done = self.run(root, "pipeline", self.params(root), KEY, DAG_ID, RUN_ID)
        assert code == 0, f"event {n}: the next run exited {code}"
        out, manifest = root / "out", done["result"]
        committed = read_committed(str(out))   # checks every part against the manifest's sha256
        assert committed.column("id").to_pylist() == self.ids, f"event {n}"
        assert all(0 < t <= 2 for t in committed.column("output_tokens").to_pylist()), f"event {n}"
        assert sorted(p.name for p in out.iterdir()) == sorted(
            ["_claim.json", "_manifest.json"] + [p["path"] for p in manifest["parts"]]), f"event {n}"
        assert store_rows(root, "SELECT id FROM runs WHERE kind = 'generate'") == [(manifest["store_run_id"],)]
        assert db_check(root, self.monkeypatch) == 0, f"event {n}: db check found strays"
        assert temporaries(root) == [], f"event {n}"


@pytest.fixture
def batch(tmp_path, tiny_model, empty_store, monkeypatch) -> Batch:
    return Batch(tmp_path, tiny_model, empty_store, monkeypatch)


def test_batch_split_killed_anywhere_then_the_run_again_commits_every_row_once(batch):
    for n, root in batch.killed_at_each_point(batch.fresh, "split", lambda root: (batch.params(root), KEY)):
        assert not list((root / "out").glob("part-*")), f"event {n}"
        batch.next_run_commits_every_row_once(root, n)


def test_batch_shard_killed_anywhere_then_the_run_again_commits_every_row_once(batch):
    shard = {}

    def prepare(root: Path) -> None:
        shard[root] = batch.split(root)[1]

    for n, root in batch.killed_at_each_point(prepare, "generate", lambda root: (shard[root], batch.params(root), KEY)):
        batch.next_run_commits_every_row_once(root, n)


def test_batch_commit_killed_anywhere_then_the_run_again_commits_every_row_once(batch):
    results = {}

    def prepare(root: Path) -> None:
        results[root] = batch.generated(root)

    for n, root in batch.killed_at_each_point(
            prepare, "commit", lambda root: (results[root], batch.params(root), KEY, DAG_ID, RUN_ID)):
        batch.next_run_commits_every_row_once(root, n)


# ---------------------------------------------------------------- a live writer's files are never removed

def holder(tmp_path: Path, task: str, *args) -> multiprocessing.Process:
    """A child running tests.fault_points' `task` (a writer that then waits), once it got there."""
    from tests.fault_points import run_task
    marker = tmp_path / f"held-{uuid.uuid4().hex}"
    child = FORKSERVER.Process(target=run_task, args=(task, (*args, str(marker)), {}, [], None, str(marker) + ".json"))
    child.start()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.is_alive() and time.monotonic() < deadline, f"{task} never got there"
        time.sleep(0.05)
    return child


def killed(child: multiprocessing.Process) -> None:
    child.kill()   # SIGKILL
    child.join()


def owned_by(directory: Path, child: multiprocessing.Process) -> list[Path]:
    return [p for p in directory.rglob("*.tmp") if OWNED.fullmatch(p.name)["owner"].split("~")[1] == str(child.pid)]


def test_the_next_write_of_a_file_removes_a_killed_writers_temporary_never_a_live_ones(tmp_path):
    out = tmp_path / "out" / "table.parquet"
    live, dead = (holder(tmp_path, "write_parquet_and_hold", str(out)) for _ in range(2))
    killed(dead)
    try:
        assert owned_by(out.parent, live) and owned_by(out.parent, dead)
        with atomic_parquet_writer(out, pa.schema([("x", pa.int64())])) as writer:
            writer.write_table(pa.table({"x": [2]}))
        assert pq.read_table(out).column("x").to_pylist() == [2]
        assert owned_by(out.parent, live) and not owned_by(out.parent, dead)
    finally:
        killed(live)
    atomic_write_texts({out.with_suffix(".txt"): "the same for text files\n"})
    with atomic_parquet_writer(out, pa.schema([("x", pa.int64())])) as writer:
        writer.write_table(pa.table({"x": [3]}))
    assert temporaries(tmp_path) == []


def test_recording_a_run_removes_what_killed_benches_left_never_what_live_ones_write(tmp_path):
    data = tmp_path / "data"
    store = open_store(f"sqlite:///{data / 'roadgate.db'}", str(data / "requests"))
    upgrade(store.engine)
    day = data / "requests" / "date=2025-01-01"
    # Benches after writing their request rows (an orphan until the run is recorded), or in mid-write.
    ids = {state: str(uuid.uuid4()) for state in ("live orphan", "dead orphan", "live temporary", "dead temporary")}
    children = {state: holder(tmp_path, "write_requests_and_hold", store.parquet_root, ids[state])
                if state.endswith("orphan") else holder(tmp_path, "hold_temporary", str(day / f"run_id={ids[state]}"),
                                                        "requests") for state in ids}
    killed(children["dead orphan"])
    killed(children["dead temporary"])
    try:
        first = record_run(store, nightly(0), metrics(output_tok_s=1.0), pa.table({"request_id": [0, 1]}))
        assert sorted(d.name for d in day.iterdir()) == sorted(
            f"run_id={run_id}" for run_id in (first, ids["live orphan"], ids["live temporary"]))
        assert (day / f"run_id={ids['live orphan']}" / "requests.parquet").exists()
        assert owned_by(day, children["live temporary"])
    finally:
        killed(children["live orphan"])
        killed(children["live temporary"])
    second = record_run(store, nightly(0), metrics(output_tok_s=1.0), pa.table({"request_id": [0, 1]}))
    assert sorted(d.name for d in day.iterdir()) == sorted(f"run_id={run_id}" for run_id in (first, second))
    assert find_strays(store, data, 0) == ([], 0)
    store.engine.dispose()


def test_commit_removes_dead_processes_temporaries_never_a_live_attempts(batch):
    root = batch.tmp_path / "root"
    results = batch.generated(root)
    staging = root / "out" / "_staging" / KEY
    live = holder(batch.tmp_path, "hold_temporary", str(staging), "part-00000-of-00002.parquet")
    dead = holder(batch.tmp_path, "hold_temporary", str(root / "out"), "_manifest.json")
    killed(dead)
    args = (results, BatchParams(**batch.params(root)), KEY, DAG_ID, RUN_ID)
    batch.monkeypatch.setenv("ROADGATE_DATA_DIR", str(root / "data"))
    try:
        commit_batch(*args)
        assert owned_by(root / "out", live) and not owned_by(root / "out", dead)
        assert sorted(p.name for p in staging.iterdir()) == [p.name for p in owned_by(staging, live)]
    finally:
        killed(live)
    commit_batch(*args)   # the run's commit again: the batch is committed, and now nothing is alive
    assert temporaries(root) == [] and not (root / "out" / "_staging").exists()
