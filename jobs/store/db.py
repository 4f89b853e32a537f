"""Opening the store: SQL by URL, Parquet under a root.

Where they are by default is jobs.settings' (db_url, db_migrate_url, parquet_root): a SQLite
file and a local Parquet dataset under the data directory, unless the environment names others.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session

import jobs.store.append_only  # noqa: F401  (installs the append-only guard on every Session)
from jobs import settings


def normalize_url(url: str) -> str:
    """Plain postgresql:// URLs mean psycopg 3, the driver we ship (not psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


SQLITE_BUSY_TIMEOUT_S = 60


def _enter_wal(cursor) -> None:
    """Switch the file to WAL, waiting out other connections that hold it.

    On a fresh file the switch needs an exclusive lock, and SQLite answers "database is locked"
    at once, without its busy handler, when another connection is mid-transaction (it would
    otherwise risk a deadlock): eight processes opening a new store together lost one of
    theirs that way. So retry, within the same deadline the busy handler gives everything else.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if url.startswith("postgresql+psycopg:") and "connect_timeout" not in url:
        # libpq waits for an unreachable host as long as TCP does (minutes): fail in seconds.
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10})
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record):
        # pysqlite would BEGIN only before DML and commit before DDL: a migration killed halfway
        # left half a schema. With its own transaction handling off, _sqlite_begin starts them all.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL lets readers run beside one writer; foreign keys are off by default in SQLite;
        # recursive triggers make REPLACE's implicit delete fire the DELETE triggers.
        _enter_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA recursive_triggers=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn):
        # IMMEDIATE takes the write lock up front: concurrent writers wait their turn (the
        # 60 s busy timeout) instead of failing when a read transaction tries to start writing.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@dataclass
class Store:
    engine: Engine
    parquet_root: str

    def session(self) -> Session:
        return Session(self.engine, expire_on_commit=False)


def open_store(url: str | None = None, parquet_root_uri: str | None = None) -> Store:
    return Store(make_engine(url or settings.db_url()), parquet_root_uri or settings.parquet_root())
