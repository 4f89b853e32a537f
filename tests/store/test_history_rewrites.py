"""No statement rewrites history: on SQLite the schema itself refuses every form of
overwrite, for any client; on PostgreSQL the writer role may only read and append."""
import sqlite3
import uuid

import psycopg
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import DBAPIError

from jobs.cli import main
from jobs.errors import StoreUnavailable
from jobs.store import open_ready_store, record_run
from jobs.store.append_only import history_keys
from jobs.store.models import (APPEND_ONLY_TABLES, Annotation, Base, ChangePoint, Culprit, GateEvaluation, RoadmapRow,
                               Series, ShiftCheck)
from jobs.store.views import VIEWS
from tests.store_support import metrics, new_schema_url, nightly

KEYS = history_keys(list(APPEND_ONLY_TABLES))
# The column each attempt tries to change, and to what.
FORGED = {"annotations": ("text", "'forged'"), "change_points": ("change_percent", "-1.0"),
          "gate_evaluations": ("reason", "'forged'"), "metrics": ("value", "-1.0"), "runs": ("status", "'forged'"),
          "series": ("hardware", "'forged'"), "shift_checks": ("verdict", "'forged'"),
          "culprits": ("first_bad_sha", "'forged'")}


def seed_history(store) -> None:
    """One row or more in every history table, inserted as `store` connects."""
    before = record_run(store, nightly(0), metrics(output_tok_s=100.0))
    after = record_run(store, nightly(1), metrics(output_tok_s=80.0))
    with store.session() as session, session.begin():
        session.add(RoadmapRow(id="ROAD-SEEDED", title="seeded", metric="output_tok_s", engine="roadgate",
                               comparison=">=", threshold=1.0, workload="nano-bench", hardware_class="H200",
                               max_age_days=7.0, validity={}))
        session.flush()
        session.add_all([
            GateEvaluation(batch_id=str(uuid.uuid4()), roadmap_row_id="ROAD-SEEDED", status="PASS", reason="seeded"),
            ChangePoint(fingerprint="f" * 32, engine="roadgate", metric="output_tok_s", last_run_before_id=before,
                        first_run_after_id=after, mean_before=100.0, mean_after=80.0, change_percent=-20.0,
                        pvalue=0.001, is_regression=True),
            Annotation(author="alice", text="seeded", run_id=before),
            Series(key="s" * 32, workload="nano-bench", hardware="NVIDIA H200", engine="roadgate", identity={}),
            ShiftCheck(series="s" * 32, metric="output_tok_s", better="higher", before_sha="a" * 40,
                       after_sha="b" * 40, before_run_ids=[before], after_run_ids=[after], median_before=100.0,
                       median_after=80.0, change=-0.2, change_low=-0.25, change_high=-0.15, pvalue=0.004,
                       rank_biserial=1.0, verdict="confirmed"),
            Culprit(series="s" * 32, metric="output_tok_s", last_good_sha="a" * 40, first_bad_sha="b" * 40,
                    stopped="found", candidates=["b" * 40], median_good=100.0, median_bad=80.0, probes=[], runs=0),
        ])
    with store.engine.connect() as conn:
        assert all(conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar() for t in APPEND_ONLY_TABLES)


def columns(table: str, without: tuple[str, ...] = ()) -> list[str]:
    return [c.name for c in Base.metadata.tables[table].columns if c.name not in without]


def quoted(names) -> str:
    return ", ".join(f'"{n}"' for n in names)


def overwrite(form: str, table: str, key: tuple[str, ...]) -> str:
    """Re-inserts every row of `table` with one column forged, so that it collides on `key`."""
    primary = KEYS[table][0]
    names = columns(table, without=() if key == primary else primary)   # a new id: only `key` collides
    column, value = FORGED[table]
    values = ", ".join(value if n == column else f'"{n}"' for n in names)
    insert = f"INTO {table} ({quoted(names)}) SELECT {values} FROM {table}"
    return {"INSERT OR REPLACE": f"INSERT OR REPLACE {insert}",
            "REPLACE": f"REPLACE {insert}",
            "ON CONFLICT DO UPDATE": f'INSERT {insert} WHERE true ON CONFLICT ({quoted(key)}) '
                                     f'DO UPDATE SET "{column}" = excluded."{column}"'}[form]


def change(form: str, table: str) -> str:
    column, value = FORGED[table]
    return {"UPDATE": f'UPDATE {table} SET "{column}" = {value}',
            "UPDATE OR REPLACE": f'UPDATE OR REPLACE {table} SET "{column}" = {value}',
            "DELETE": f"DELETE FROM {table}"}[form]


SQLITE_ATTEMPTS = [
    pytest.param(overwrite(form, table, key), id=f"{table}-{form}-{'+'.join(key)}")
    for table in APPEND_ONLY_TABLES for key in KEYS[table] for form in ("INSERT OR REPLACE", "REPLACE",
                                                                         "ON CONFLICT DO UPDATE")
] + [pytest.param(change(form, table), id=f"{table}-{form}")
     for table in APPEND_ONLY_TABLES for form in ("UPDATE", "UPDATE OR REPLACE", "DELETE")]


def snapshot(conn) -> dict:
    return {t: sorted(map(tuple, conn.execute(text(f"SELECT * FROM {t}")).all()), key=repr)
            for t in APPEND_ONLY_TABLES}


@pytest.fixture(scope="module")
def sqlite_history(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "roadgate.db"
    store = open_ready_store(f"sqlite:///{path}", str(path.parent / "requests"))
    seed_history(store)
    yield store, path
    store.engine.dispose()


@pytest.mark.parametrize("sql", SQLITE_ATTEMPTS)
def test_sqlite_refuses_every_rewrite_from_our_connections(sqlite_history, sql):
    store, _ = sqlite_history
    with store.engine.connect() as conn:
        before = snapshot(conn)
    with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as conn:
        conn.exec_driver_sql(sql)
    with store.engine.connect() as conn:
        assert snapshot(conn) == before


@pytest.mark.parametrize("sql", SQLITE_ATTEMPTS)
def test_sqlite_refuses_every_rewrite_from_a_bare_client(sqlite_history, sql):
    # Python's sqlite3 as it comes: no recursive triggers, no foreign keys; only the schema guards.
    store, path = sqlite_history
    with store.engine.connect() as ours:
        before = snapshot(ours)
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()
    with store.engine.connect() as ours:
        assert snapshot(ours) == before


def test_sqlite_connections_keep_foreign_keys_on(sqlite_history):
    store, _ = sqlite_history
    for _ in range(3):   # every pooled connection, not only the first
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    with pytest.raises(DBAPIError, match="FOREIGN KEY"), store.engine.begin() as conn:
        conn.execute(text("INSERT INTO annotations (run_id, author, text, created_at) "
                          "VALUES ('no-such-run', 'mallory', 'x', '2025-01-01')"))


# ---------------------------------------------------------------- PostgreSQL, as the writer role

@pytest.fixture(scope="module")
def pg_writer(pg_database, tmp_path_factory):
    """A store migrated by its owner (postgres) and a writer role made by `db init-roles`, seeded as the writer."""
    owner_url = new_schema_url(pg_database)
    role = f"roadgate_writer_{uuid.uuid4().hex[:10]}"   # roles are global to the cluster
    try:
        for _ in range(2):   # idempotent
            assert main(["db", "init-roles", "--db-url", owner_url, "--role", role]) == 0
        writer_url = make_url(owner_url).set(username=role).render_as_string(hide_password=False)
        writer = open_ready_store(writer_url, str(tmp_path_factory.mktemp("requests")))
        seed_history(writer)
        yield owner_url, writer_url, writer
        writer.engine.dispose()
    finally:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


PG_ATTEMPTS = [
    pytest.param(sql.format(t=table, column=FORGED[table][0], value=FORGED[table][1]), id=f"{table}-{name}")
    for table in APPEND_ONLY_TABLES for name, sql in {
        "UPDATE": 'UPDATE {t} SET "{column}" = {value}',
        "DELETE": "DELETE FROM {t}",
        "TRUNCATE": "TRUNCATE {t} CASCADE",
        "ALTER TABLE": "ALTER TABLE {t} ADD COLUMN forged integer",
        "DISABLE TRIGGER": "ALTER TABLE {t} DISABLE TRIGGER {t}_append_only",
        "DROP TABLE": "DROP TABLE {t} CASCADE",
    }.items()
] + [pytest.param(overwrite("ON CONFLICT DO UPDATE", table, KEYS[table][0]), id=f"{table}-ON CONFLICT DO UPDATE")
     for table in APPEND_ONLY_TABLES]


@pytest.mark.parametrize("sql", PG_ATTEMPTS)
def test_the_postgresql_writer_cannot_rewrite_history(pg_writer, sql):
    _, _, writer = pg_writer
    with writer.engine.connect() as conn:
        before = snapshot(conn)
    with pytest.raises(DBAPIError) as refused, writer.engine.begin() as conn:
        conn.exec_driver_sql(sql)
    assert refused.value.orig.sqlstate == "42501", refused.value   # insufficient_privilege
    with writer.engine.connect() as conn:
        assert snapshot(conn) == before


def test_the_postgresql_writer_reads_everything_and_evaluates_gates(pg_writer):
    _, writer_url, writer = pg_writer
    with writer.engine.connect() as conn:
        for name in [*Base.metadata.tables, *VIEWS]:
            conn.execute(text(f"SELECT * FROM {name}")).all()
        evaluations = conn.execute(text("SELECT COUNT(*) FROM gate_evaluations")).scalar()
    assert main(["gates", "evaluate", "--db-url", writer_url]) == 0   # syncs roadmap_rows: INSERT and UPDATE
    with writer.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM gate_evaluations")).scalar() > evaluations


def test_recreated_views_keep_the_writers_grants_and_only_the_owner_migrates(pg_writer, monkeypatch):
    owner_url, writer_url, writer = pg_writer
    owner = open_ready_store(owner_url, writer.parquet_root)
    with owner.engine.begin() as conn:   # as if sql/views/ had changed since the last upgrade
        conn.execute(text("UPDATE store_state SET value = 'older views' WHERE key = 'views_digest'"))
    with pytest.raises(StoreUnavailable, match="cannot migrate.*(must be owner|permission denied)"):
        open_ready_store(writer_url, writer.parquet_root)
    monkeypatch.setenv("ROADGATE_DB_URL", writer_url)
    monkeypatch.setenv("ROADGATE_DB_MIGRATE_URL", owner_url)
    store = open_ready_store(parquet_root_uri=writer.parquet_root)   # migrates as the owner, returns the writer
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT current_user")).scalar() == make_url(writer_url).username
        for view in VIEWS:
            conn.execute(text(f"SELECT * FROM {view}")).all()
    with owner.engine.connect() as conn:
        assert conn.scalar(text("SELECT value FROM store_state WHERE key = 'views_digest'")) != "older views"
    store.engine.dispose()
    owner.engine.dispose()
