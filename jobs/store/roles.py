"""PostgreSQL roles: migrations run as the owner of the tables, the tool writes as a role
that can only read and append history.

An owner may ALTER TABLE ... DISABLE TRIGGER, TRUNCATE or DROP: the append-only
triggers stop mistakes, not the owner. The writer gets SELECT and INSERT on history,
INSERT and UPDATE on roadmap_rows (a mirror of the YAML file), USAGE on the id
sequences, SELECT on the rest and on the views, nothing else.
"""
from __future__ import annotations

from sqlalchemy import Connection, text

from jobs.store.models import APPEND_ONLY_TABLES, Base
from jobs.store.views import VIEWS

WRITER_ROLE = "roadgate_writer"
MIRRORS = ("roadmap_rows",)


def role_exists(conn: Connection, role: str) -> bool:
    return conn.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}) is not None


def create_role(conn: Connection, role: str) -> None:
    """A login role named `role`, unless there is one (roles are global to the cluster)."""
    if not role_exists(conn, role):
        conn.execute(text(f"CREATE ROLE {conn.dialect.identifier_preparer.quote(role)} LOGIN"))


def grant_writer(conn: Connection, role: str) -> None:
    """Gives `role` exactly the writer's privileges on the store in the current schema.
    Idempotent; run again after views are re-created, since a dropped view's grants go with it."""
    q = conn.dialect.identifier_preparer.quote
    r = q(role)
    tables = [*Base.metadata.tables, "alembic_version"]
    everything = ", ".join(q(name) for name in [*tables, *VIEWS])
    conn.execute(text(f"GRANT USAGE ON SCHEMA {q(conn.scalar(text('SELECT current_schema()')))} TO {r}"))
    conn.execute(text(f"REVOKE ALL ON {everything} FROM {r}"))
    conn.execute(text(f"GRANT SELECT ON {everything} TO {r}"))
    conn.execute(text(f"GRANT INSERT ON {', '.join(q(t) for t in [*APPEND_ONLY_TABLES, *MIRRORS])} TO {r}"))
    conn.execute(text(f"GRANT UPDATE ON {', '.join(q(t) for t in MIRRORS)} TO {r}"))
    for table in Base.metadata.sorted_tables:
        if table.autoincrement_column is not None:
            sequence = conn.scalar(text("SELECT pg_get_serial_sequence(:t, :c)"),
                                   {"t": q(table.name), "c": table.autoincrement_column.name})
            conn.execute(text(f"GRANT USAGE ON SEQUENCE {sequence} TO {r}"))
