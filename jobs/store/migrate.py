"""`roadgate db upgrade`: Alembic migrations to head, then the views, in one serialized transaction.

Serialized: on SQLite every transaction starts with BEGIN IMMEDIATE (jobs.store.db), which
holds the write lock; on PostgreSQL an upgrade takes a transaction-scoped advisory lock.
A store already at head whose views match sql/views/ gets no DDL at all: concurrent jobs
do not drop views under each other, and the writer role (jobs.store.roles), which may not
run DDL, can call it.
"""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, insert, select, text, update

from jobs.store.models import StoreState
from jobs.store.roles import WRITER_ROLE, create_role, grant_writer, role_exists
from jobs.store.views import VIEWS, recreate_views, view_sql

UPGRADE_LOCK = int.from_bytes(b"roadgate", "big")  # the advisory lock's key: any constant bigint


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", "jobs.store:migrations")
    return config


def views_digest() -> str:
    return hashlib.sha256("".join(f"{name}\n{view_sql(name)}\n" for name in VIEWS).encode()).hexdigest()


@contextlib.contextmanager
def _serialized(engine: Engine) -> Iterator[Connection]:
    """One transaction that holds the store's upgrade lock until it ends."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK})
        yield conn


def _state(conn: Connection, key: str) -> str | None:
    return conn.scalar(select(StoreState.value).where(StoreState.key == key))


def _set_state(conn: Connection, key: str, value: str) -> None:
    if conn.execute(update(StoreState).where(StoreState.key == key).values(value=value)).rowcount == 0:
        conn.execute(insert(StoreState).values(key=key, value=value))


def _is_current(conn: Connection, config: Config) -> bool:
    heads = set(ScriptDirectory.from_config(config).get_heads())
    return (set(MigrationContext.configure(conn).get_current_heads()) == heads
            and _state(conn, "views_digest") == views_digest())


def upgrade(engine: Engine) -> None:
    config = alembic_config()
    with _serialized(engine) as conn:
        # Checked under the lock: a concurrent upgrade may just have done the work.
        if _is_current(conn, config):
            return
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        recreate_views(conn)
        _set_state(conn, "views_digest", views_digest())
        writer = _state(conn, "writer_role")
        if writer and role_exists(conn, writer):  # re-created views lost the writer's grants
            grant_writer(conn, writer)


def init_writer_role(engine: Engine, role: str = WRITER_ROLE) -> None:
    """PostgreSQL, as the owner of a store at head: creates the role the tool writes as
    (unless it exists), records it for later upgrades and grants it exactly the writer's
    privileges. Idempotent."""
    if engine.dialect.name != "postgresql":
        raise ValueError(f"writer roles are a PostgreSQL feature; this store is {engine.dialect.name}")
    with _serialized(engine) as conn:
        create_role(conn, role)
        _set_state(conn, "writer_role", role)
        grant_writer(conn, role)
