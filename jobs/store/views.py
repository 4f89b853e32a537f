"""The SQL views (sql/views/*.sql): portable SQL, identical on SQLite and PostgreSQL.

Views hold no data, so an upgrade drops and recreates them from the files whenever
the files changed (jobs.store.migrate): changing a view is editing its file, not
writing a migration.
"""
from __future__ import annotations

from importlib.resources import files

from sqlalchemy import Connection, text

SQL_DIR = files("jobs.store") / "sql"

# Creation order: a view comes after the views it reads.
VIEWS = ["v_metric_history", "v_latest_runs", "v_gate_evidence", "v_roadmap_status", "v_change_points",
         "v_roadmap_board", "v_roadmap_history", "v_latency_distributions", "v_run_validity", "v_latest_figures",
         "v_regression_triage"]


def view_sql(name: str) -> str:
    return (SQL_DIR / "views" / f"{name}.sql").read_text()


def dashboard_sql(name: str) -> str:
    """A named dashboard query from sql/dashboards/; its :parameters are bound by the caller."""
    path = SQL_DIR / "dashboards" / f"{name}.sql"
    if not path.is_file():
        raise KeyError(name)
    return path.read_text()


def dashboard_names() -> list[str]:
    return sorted(p.name.removesuffix(".sql") for p in (SQL_DIR / "dashboards").iterdir() if p.name.endswith(".sql"))


def recreate_views(conn: Connection) -> None:
    for name in reversed(VIEWS):
        conn.execute(text(f"DROP VIEW IF EXISTS {name}"))
    for name in VIEWS:
        conn.execute(text(f"CREATE VIEW {name} AS\n{view_sql(name).strip().rstrip(';')}"))
