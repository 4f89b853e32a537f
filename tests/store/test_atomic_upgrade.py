"""Upgrades are atomic (kill -9 anywhere leaves the store as it was), serialized, and do
no DDL when there is nothing to do."""
import itertools
import multiprocessing
import os
import signal
import sqlite3
import sys
import threading

import pyarrow as pa
from sqlalchemy import Engine, event, text

from jobs.cli import main
from jobs.store import open_ready_store, open_store, record_run, upgrade
from jobs.store.db import make_engine
from jobs.store.parquet import read_run_requests
from jobs.store.views import VIEWS
from tests.store_support import metrics, nightly

KILL_POINTS = 20
fork = multiprocessing.get_context("fork")  # inherits the imports: starts in milliseconds


def statements_run_by(argv: list[str]) -> list[str]:
    seen = []

    def note(_conn, _cursor, statement, *_):
        seen.append(statement)
    event.listen(Engine, "before_cursor_execute", note)
    try:
        assert main(argv) == 0
    finally:
        event.remove(Engine, "before_cursor_execute", note)
    return seen


def upgrade_killed_at(url: str, n: int) -> None:
    """In a child: `roadgate db upgrade`, SIGKILLed just before its n-th SQL statement."""
    count = itertools.count(1)

    def kill(*_):
        if next(count) == n:
            os.kill(os.getpid(), signal.SIGKILL)
    event.listen(Engine, "before_cursor_execute", kill)
    sys.exit(main(["db", "upgrade", "--db-url", url]))


def test_kill_9_anywhere_in_a_fresh_upgrade_leaves_a_usable_store(tmp_path):
    total = len(statements_run_by(["db", "upgrade", "--db-url", f"sqlite:///{tmp_path / 'calibration.db'}"]))
    points = sorted({1 + round(i * (total - 1) / (KILL_POINTS - 1)) for i in range(KILL_POINTS)})
    assert len(points) == KILL_POINTS, f"only {total} statements"
    for n in points:
        path = tmp_path / f"killed-at-{n}.db"
        child = fork.Process(target=upgrade_killed_at, args=(f"sqlite:///{path}", n))
        child.start()
        child.join(60)
        assert child.exitcode == -signal.SIGKILL, f"statement {n} of {total}: exit {child.exitcode}"
        with sqlite3.connect(path) as conn:   # the whole upgrade was one transaction: nothing of it is left
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [], f"statement {n} of {total}"
        store = open_ready_store(f"sqlite:///{path}", str(tmp_path / f"requests-{n}"))
        run_id = record_run(store, nightly(0), metrics(output_tok_s=100.0), pa.table({"request_id": [0, 1]}))
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT run_id, value FROM v_metric_history")).all() == [(run_id, 100.0)]
        assert read_run_requests(store.parquet_root, run_id).num_rows == 2
        store.engine.dispose()


def upgrade_at_once(url: str, barrier) -> None:
    store = open_store(url)
    barrier.wait()
    upgrade(store.engine)


def test_concurrent_upgrades_of_a_fresh_store_all_succeed(db_url):
    barrier = fork.Barrier(8)
    children = [fork.Process(target=upgrade_at_once, args=(db_url, barrier)) for _ in range(8)]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [c.exitcode for c in children] == [0] * 8
    store = open_store(db_url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0007"
        for view in VIEWS:
            conn.execute(text(f"SELECT * FROM {view}")).all()
    store.engine.dispose()


def test_opening_a_fresh_sqlite_file_waits_for_a_writer_instead_of_failing(tmp_path):
    # SQLite refuses the switch to WAL at once, busy handler or not, while another connection
    # is mid-write on a fresh file: this was the concurrent-upgrade test's rare failure.
    path = tmp_path / "fresh.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE first_writer (x)")
    threading.Timer(0.5, writer.execute, args=("COMMIT",)).start()
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM first_writer").scalar() == 0
    engine.dispose()
    writer.close()


WRITES = ("CREATE", "DROP", "ALTER", "INSERT", "UPDATE", "DELETE", "GRANT", "REVOKE")


def test_an_upgrade_with_nothing_to_do_writes_nothing(store, db_url):
    done = statements_run_by(["db", "upgrade", "--db-url", db_url])
    assert done and not [s for s in done if s.lstrip().upper().startswith(WRITES)]


def test_changed_views_are_recreated(store, db_url):
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE store_state SET value = 'digest of older views' WHERE key = 'views_digest'"))
    done = statements_run_by(["db", "upgrade", "--db-url", db_url])
    assert sum(s.startswith("CREATE VIEW") for s in done) == len(VIEWS)
    assert not [s for s in statements_run_by(["db", "upgrade", "--db-url", db_url]) if s.startswith(WRITES)]
