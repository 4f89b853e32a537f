"""`roadgate db ...` and `roadgate gates ...`: the results store and the roadmap gates."""
from __future__ import annotations

import argparse
import re

from sqlalchemy import text

from jobs.errors import RoadmapError, StoreUnavailable, UsageError
from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import load_roadmap, sync_roadmap
from jobs.report.format import format_value, printable, unit_of
from jobs.settings import data_dir, db_migrate_url
from jobs.store.db import Store
from jobs.store.migrate import init_writer_role
from jobs.store.ready import open_ready_store
from jobs.store.roles import WRITER_ROLE
from jobs.store.views import dashboard_names, dashboard_sql

STATUS_COLUMNS = ["roadmap_row_id", "status", "value", "target", "reason", "evaluated_at"]
CHANGE_COLUMNS = ["after_started_at", "workload", "hardware_class", "engine", "metric", "change_percent",
                  "is_regression", "last_run_before_id", "first_run_after_id"]


# Each shift check with its verdict, and the bisect's culprit where one ran (shas shortened to 12).
TRIAGE_QUERY = (
    "SELECT shift_check_id AS shift_check, change_point_id AS change_point, checked_at, metric, "
    "SUBSTR(good_sha, 1, 12) AS good, SUBSTR(bad_sha, 1, 12) AS bad, change, pvalue, verdict, "
    "bisect_stopped AS bisect, SUBSTR(first_bad_sha, 1, 12) AS first_bad, bisect_runs "
    "FROM v_regression_triage ORDER BY shift_check_id, culprit_id")


def format_table(rows, columns: list[str]) -> str:
    """Rows as aligned text; what came from the database is stripped of control characters."""
    cells = [columns] + [["" if r[c] is None else f"{r[c]:.4g}" if isinstance(r[c], float) else printable(str(r[c]))
                          for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def _print_query(store: Store, sql: str, columns: list[str] | None = None, params: dict | None = None) -> None:
    with store.engine.connect() as conn:
        result = conn.execute(text(sql), params or {})
        rows = [dict(r._mapping) for r in result]
        print(format_table(rows, columns or list(result.keys())))


def print_gate_status(store: Store) -> None:
    """The roadmap's current status (v_roadmap_board) as a table on stdout, figures with their units."""
    with store.engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM v_roadmap_board ORDER BY roadmap_row_id"))]
    for row in rows:
        unit = unit_of(row["metric"], row["unit"])
        row["value"], row["target"] = format_value(row["value"], unit), format_value(row["target"], unit)
    print(format_table(rows, STATUS_COLUMNS))


def _store(url: str | None, existing: bool = False) -> Store:
    """The store at `url` (default: the environment's), reachable and migrated; else one line, exit 2.
    `existing`: the command only reads, so a store never written is "no results yet", not created."""
    try:
        return open_ready_store(url, existing=existing)
    except StoreUnavailable as e:
        raise UsageError(str(e)) from None


def _sync(store: Store, path: str | None) -> int:
    try:
        rows = load_roadmap(path)
    except RoadmapError as e:
        raise UsageError(str(e)) from None
    sync_roadmap(store, rows)
    return len(rows)


def cmd_db_upgrade(args) -> int:
    _store(args.db_url)
    print("database at head; views current")


def cmd_db_init_roles(args) -> int:
    # The owner's URL: the one migrations run as.
    store = _store(args.db_url or db_migrate_url())
    try:
        init_writer_role(store.engine, args.role)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"role {args.role} may read and append history; connect the tool as it (ROADGATE_DB_URL) "
          "and migrate as the owner (ROADGATE_DB_MIGRATE_URL)")


def cmd_db_check(args) -> int:
    from jobs.store.check import find_strays, quarantine
    store = _store(args.db_url, existing=True)
    try:
        strays, recent = find_strays(store, data_dir(), 60 * args.older_than)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for stray in strays:
        print(f"{stray.kind:<10} {stray.path}")
    if recent:
        print(f"{recent} files newer than {args.older_than:g} minutes left alone: a job may be writing them")
    if strays and args.quarantine:
        print(f"{len(strays)} files moved to {quarantine(strays, data_dir())}")
    elif strays:
        print(f"{len(strays)} stray files; --quarantine moves them under {data_dir() / 'quarantine'}")
    else:
        print("no stray files")
    return 1 if strays else 0


def cmd_db_query(args) -> int:
    if args.name not in dashboard_names():
        raise UsageError(f"unknown query {args.name!r} (known: {', '.join(dashboard_names())})")
    sql = dashboard_sql(args.name)
    wanted = set(re.findall(r"(?<!:):([A-Za-z_]\w*)", sql))
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--param wants KEY=VALUE, got {item!r}")
        if key not in wanted:
            raise UsageError(f"query {args.name!r} has no parameter {key!r} "
                             f"(it takes: {', '.join(sorted(wanted)) or 'none'})")
        params[key] = value
    missing = sorted(wanted - set(params))
    if missing:
        raise UsageError(f"query {args.name!r} needs --param {'=..., --param '.join(missing)}=...")
    _print_query(_store(args.db_url, existing=True), sql, params=params)


def cmd_gates_sync(args) -> int:
    print(f"{_sync(_store(args.db_url), args.roadmap)} roadmap rows synced")


def cmd_gates_evaluate(args) -> int:
    store = _store(args.db_url)
    _sync(store, args.roadmap)
    evaluations = evaluate_gates(store)
    print(f"{len(evaluations)} rows evaluated")
    print_gate_status(store)


def cmd_gates_status(args) -> int:
    print_gate_status(_store(args.db_url, existing=True))


def cmd_gates_regressions(args) -> int:
    # Imported here: Otava pulls in scipy, a second of start-up every other command (bench) would pay.
    from jobs.gates.regressions import detect_regressions
    store = _store(args.db_url, existing=True)
    if not args.no_detect:
        print(f"{len(detect_regressions(store))} new change points")
    where = "" if args.all else "WHERE is_regression "
    _print_query(store, f"SELECT * FROM v_change_points {where}ORDER BY after_started_at, change_point_id", CHANGE_COLUMNS)
    with store.engine.connect() as conn:
        triaged = conn.execute(text("SELECT COUNT(*) FROM shift_checks")).scalar()
    if triaged:
        print(f"\nregression triage (the bisect_regression DAG): {triaged} shift checks")
        _print_query(store, TRIAGE_QUERY)


def register(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db-url", help="SQLAlchemy URL (default: $ROADGATE_DB_URL, else a SQLite file in the data dir)")
    roadmap = argparse.ArgumentParser(add_help=False)
    roadmap.add_argument("--roadmap", help="roadmap YAML file (default: the one shipped in jobs/data)")

    db = subparsers.add_parser("db", help="results database").add_subparsers(dest="db_command", required=True)
    db.add_parser("upgrade", parents=[common], help="migrate to the newest schema").set_defaults(func=cmd_db_upgrade)
    roles = db.add_parser("init-roles", parents=[common],
                          help="PostgreSQL, with the owner's URL: create and grant the role the tool writes as")
    roles.add_argument("--role", default=WRITER_ROLE, help=f"its name (default {WRITER_ROLE})")
    roles.set_defaults(func=cmd_db_init_roles)
    check = db.add_parser("check", parents=[common], help="list orphan Parquet and leftover temporary files "
                                                          "(exit 1 when there are any)")
    check.add_argument("--quarantine", action="store_true", help="move them to <data dir>/quarantine/ (never deleted)")
    check.add_argument("--older-than", type=float, default=60, metavar="MINUTES",
                       help="only files untouched this long: newer ones may be in flight (default 60)")
    check.set_defaults(func=cmd_db_check)
    query = db.add_parser("query", parents=[common], help="run a named dashboard query from sql/dashboards")
    query.add_argument("name")
    query.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    query.set_defaults(func=cmd_db_query)

    gates = subparsers.add_parser("gates", help="roadmap gates").add_subparsers(dest="gates_command", required=True)
    gates.add_parser("sync", parents=[common, roadmap], help="load the roadmap file into the database").set_defaults(
        func=cmd_gates_sync)
    gates.add_parser("evaluate", parents=[common, roadmap], help="sync, then append one evaluation per row").set_defaults(
        func=cmd_gates_evaluate)
    gates.add_parser("status", parents=[common], help="print v_roadmap_status").set_defaults(func=cmd_gates_status)
    regressions = gates.add_parser("regressions", parents=[common], help="detect and list change points")
    regressions.add_argument("--no-detect", action="store_true", help="only list what was found before")
    regressions.add_argument("--all", action="store_true", help="improvements too, not only regressions")
    regressions.set_defaults(func=cmd_gates_regressions)
