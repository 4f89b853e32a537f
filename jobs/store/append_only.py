"""History is append-only: refused in code for every session, and by triggers in the database.

The ORM guard catches mistakes early with a clear message; the triggers (created
by the migrations) also stop raw SQL and other clients.
"""
from __future__ import annotations

from sqlalchemy import UniqueConstraint, event
from sqlalchemy.orm import ORMExecuteState, Session

from jobs.store.models import AppendOnly, Base


class AppendOnlyError(RuntimeError):
    """An UPDATE or DELETE of history was attempted; append a superseding row instead."""


def _refuse(what: str, name: str) -> AppendOnlyError:
    return AppendOnlyError(f"{what} of {name} refused: history is append-only; record a superseding row instead")


@event.listens_for(Session, "before_flush")
def _refuse_changed_or_deleted(session: Session, _context, _instances) -> None:
    for obj in session.deleted:
        if isinstance(obj, AppendOnly):
            raise _refuse("DELETE", type(obj).__tablename__)
    for obj in session.dirty:
        if isinstance(obj, AppendOnly) and session.is_modified(obj):
            raise _refuse("UPDATE", type(obj).__tablename__)


@event.listens_for(Session, "do_orm_execute")
def _refuse_bulk_statements(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    for mapper in state.all_mappers:
        if issubclass(mapper.class_, AppendOnly):
            raise _refuse("UPDATE" if state.is_update else "DELETE", mapper.local_table.name)


def trigger_ddl(dialect: str, tables: list[str], with_function: bool = True) -> list[str]:
    """Statements that make the database itself refuse UPDATE and DELETE on `tables`
    (on PostgreSQL, `with_function` also creates the trigger function they call)."""
    if dialect == "postgresql":
        statements = [
            """CREATE OR REPLACE FUNCTION roadgate_refuse_change() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'roadgate: % on % refused: history is append-only', TG_OP, TG_TABLE_NAME;
END $$ LANGUAGE plpgsql"""
        ] if with_function else []
        for t in tables:
            statements += [
                f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
                "FOR EACH ROW EXECUTE FUNCTION roadgate_refuse_change()",
                f"CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
                "FOR EACH STATEMENT EXECUTE FUNCTION roadgate_refuse_change()",
            ]
        return statements
    if dialect == "sqlite":
        return [
            f"CREATE TRIGGER {t}_no_{op.lower()} BEFORE {op} ON {t} "
            f"BEGIN SELECT RAISE(ABORT, 'roadgate: {op} on {t} refused: history is append-only'); END"
            for t in tables
            for op in ("UPDATE", "DELETE")
        ]
    raise ValueError(f"no append-only triggers for dialect {dialect!r}")


def no_overwrite_ddl(keys: dict[str, list[tuple[str, ...]]]) -> list[str]:
    """SQLite: triggers that refuse an INSERT whose key (each of `keys[table]`: the primary key,
    then any unique key) names an existing row. A BEFORE INSERT trigger runs before conflict
    resolution, so INSERT OR REPLACE, REPLACE INTO and ON CONFLICT ... DO UPDATE cannot rewrite
    history (REPLACE deletes the old row without firing a DELETE trigger unless the connection
    turned recursive_triggers on, which other clients need not do). OR IGNORE is refused too."""
    statements = []
    for table, table_keys in keys.items():
        for key in table_keys:
            same_key = " AND ".join(f'"{c}" = NEW."{c}"' for c in key)
            statements.append(
                f"CREATE TRIGGER {no_overwrite_trigger(table, key)} BEFORE INSERT ON {table} "
                f"WHEN EXISTS (SELECT 1 FROM {table} WHERE {same_key}) BEGIN SELECT RAISE(ABORT, "
                f"'roadgate: INSERT over an existing row of {table} refused: history is append-only'); END")
    return statements


def no_overwrite_trigger(table: str, key: tuple[str, ...]) -> str:
    return f"{table}_no_overwrite_{'_'.join(key)}"


def history_keys(tables: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """The primary key and unique keys of each table, as the models declare them."""
    keys = {}
    for name in tables:
        table = Base.metadata.tables[name]
        uniques = [c for c in table.constraints if isinstance(c, UniqueConstraint)] + [
            i for i in table.indexes if i.unique]
        keys[name] = [tuple(c.name for c in table.primary_key.columns)] + [
            tuple(c.name for c in u.columns) for u in sorted(uniques, key=lambda u: u.name)]
    return keys
