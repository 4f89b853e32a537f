"""A store that is ready before the work starts: reachable, writable, migrated.

Jobs open the store this way before their real work (bench before any engine runs),
so a bad URL, a missing driver or database, an unreachable server or a data
directory that cannot be written costs seconds and one line, not a benchmark.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from jobs import settings
from jobs.errors import StorageError, StoreUnavailable
from jobs.store.db import Store, make_engine, normalize_url
from jobs.store.migrate import upgrade
from jobs.store.parquet import root_location
from jobs.storage import LocalPath


def open_ready_store(url: str | None = None, parquet_root_uri: str | None = None,
                     migrate_url: str | None = None, *, existing: bool = False) -> Store:
    """The store at `url` (default ROADGATE_DB_URL, else the SQLite file in the data dir),
    migrated to head through `migrate_url` (default: ROADGATE_DB_MIGRATE_URL when `url` is
    the default, else `url` itself). `existing`: for commands that only read, a SQLite store
    that does not exist yet is refused ("no results yet") instead of created. Raises
    StoreUnavailable."""
    if url is None:
        url, migrate_url = settings.db_url(), migrate_url or settings.db_migrate_url()
    if existing:
        _refuse_if_absent(url)
    migrate_url = migrate_url or url
    root = parquet_root_uri or settings.parquet_root()
    try:
        place = root_location(root)
        place.check_reachable()
    except StorageError as e:
        raise StoreUnavailable(str(e)) from None
    if isinstance(place, LocalPath):
        _check_writable(place.path, "Parquet root")
    store = Store(_connected(url), root)
    try:
        owner = store.engine if migrate_url == url else _connected(migrate_url)
        try:
            upgrade(owner)
        except DBAPIError as e:
            raise StoreUnavailable(f"cannot migrate the results store at {_shown(migrate_url)}: "
                                   f"{_one_line(e.orig or e)}") from None
        finally:
            if owner is not store.engine:
                owner.dispose()
    except BaseException:
        store.engine.dispose()
        raise
    return store


def _connected(url: str) -> Engine:
    """An engine for `url` that has answered a query."""
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError:
        raise StoreUnavailable(f"malformed database URL {_masked(url)!r} "
                               "(want e.g. postgresql://user@host/db or sqlite:///path)") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        database = Path(parsed.database)
        if database.is_dir():
            raise StoreUnavailable(f"SQLite store {database} is a directory")
        _check_writable(database.parent, "SQLite store's directory")
    try:
        engine = make_engine(url)
    except NoSuchModuleError:
        raise StoreUnavailable(f"unknown database driver {parsed.drivername!r} in {_shown(url)}") from None
    except ImportError as e:
        raise StoreUnavailable(f"the driver of {parsed.drivername!r} is not installed ({e}): {_shown(url)}") from None
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except DBAPIError as e:
        engine.dispose()
        raise StoreUnavailable(f"cannot open the results store at {_shown(url)}: {_one_line(e.orig or e)}") from None
    return engine


def _refuse_if_absent(url: str) -> None:
    """Reading a SQLite store that was never written must not create an empty one."""
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError:
        return   # _connected names the malformed URL
    database = Path(parsed.database or "")
    # A data directory that is a file is its own problem, named by the checks that follow.
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
            and not database.exists() and not database.parent.is_file():
        raise StoreUnavailable(f"no results yet: {database} does not exist "
                               "(`roadgate bench` records the first run)")


def _check_writable(path: Path, what: str) -> None:
    """`path` is, or can be made, a directory this process may write in."""
    existing = next(p for p in [path, *path.parents] if p.exists())
    if not existing.is_dir():
        raise StoreUnavailable(f"{what} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StoreUnavailable(f"{what} {path}: {existing} is not writable")


def _shown(url: str) -> str:
    return make_url(normalize_url(url)).render_as_string(hide_password=True)


def _masked(url: str) -> str:
    return re.sub(r":[^:@/]*@", ":***@", url)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
