"""What the report reads: the SQL views, and nothing else.

SQLite hands a view's timestamps back as text and its booleans as integers, so
every query declares the types of the columns it reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, Integer, String, inspect, text

from jobs.errors import StoreNotReady
from jobs.store.db import Store
from jobs.store.views import VIEWS

BOARD = text("SELECT * FROM v_roadmap_board ORDER BY roadmap_row_id").columns(
    threshold=Float, value=Float, peer_value=Float, target=Float, max_age_days=Float,
    evaluated_at=DateTime, run_started_at=DateTime, run_finished_at=DateTime, evidence_current=Integer,
)
HISTORY = text(
    "SELECT roadmap_row_id, series, run_id, started_at, value, target FROM v_roadmap_history "
    "ORDER BY roadmap_row_id, started_at, metric_id"
).columns(roadmap_row_id=String, series=String, run_id=String, started_at=DateTime, value=Float, target=Float)
CHANGE_POINTS = text("SELECT * FROM v_change_points ORDER BY after_started_at, change_point_id").columns(
    is_regression=Boolean, change_percent=Float, mean_before=Float, mean_after=Float,
    before_started_at=DateTime, after_started_at=DateTime,
)
TRIAGE = text("SELECT * FROM v_regression_triage ORDER BY shift_check_id, culprit_id").columns(
    checked_at=DateTime, detected_change_percent=Float, change=Float, change_low=Float, change_high=Float,
    pvalue=Float, median_before=Float, median_after=Float)
LATENCIES = text(
    "SELECT * FROM v_latency_distributions ORDER BY latency, workload, hardware_class, engine"
).columns(started_at=DateTime, count=Integer, mean=Float, std=Float, p50=Float, p90=Float, p99=Float)
# Picking the newest ids first keeps SQLite from computing every run's agreement before sorting (40x faster).
RECENT_RUNS = text(
    "SELECT * FROM v_run_validity WHERE run_id IN "
    "(SELECT run_id FROM v_run_validity ORDER BY started_at DESC, run_id LIMIT :limit) "
    "ORDER BY started_at DESC, run_id"
).columns(
    started_at=DateTime, finished_at=DateTime, agreement=Float, metric_count=Integer, git_dirty=Boolean,
)
# Unordered: the docs group and sort these few hundred rows themselves, and an ORDER BY here makes
# SQLite re-run the newest-run lookup per row (1.8 s instead of 0.08 s over 5 years of nightlies).
LATEST_FIGURES = text("SELECT * FROM v_latest_figures").columns(started_at=DateTime, value=Float)


def require_views(store: Store) -> None:
    missing = sorted(set(VIEWS) - set(inspect(store.engine).get_view_names()))
    if missing:
        raise StoreNotReady(f"the database has no view {', '.join(missing)}: run `roadgate db upgrade` first")


@dataclass
class DashboardData:
    board: list            # v_roadmap_board rows
    history: dict          # roadmap_row_id -> its v_roadmap_history points in its evidence's series, oldest first
    change_points: list    # v_change_points rows
    triage: list           # v_regression_triage rows, oldest first
    latencies: list        # v_latency_distributions rows
    recent_runs: list      # v_run_validity rows, newest first


def load_dashboard_data(store: Store, recent_runs: int) -> DashboardData:
    require_views(store)
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # PostgreSQL's JIT spends longer compiling the history query than running it (2.0 s vs 0.9 s
            # over 5 years of nightlies); SET LOCAL ends with this read-only transaction.
            conn.execute(text("SET LOCAL jit = off"))
        board = conn.execute(BOARD).all()
        # A figure is compared only within its series: a row's plot shows the series its status rests on.
        series = {row.roadmap_row_id: row.series for row in board}
        history: dict[str, list] = {row.roadmap_row_id: [] for row in board}
        for point in conn.execute(HISTORY):
            if series[point.roadmap_row_id] in (None, point.series):
                history[point.roadmap_row_id].append(point)
        return DashboardData(
            board=board,
            history=history,
            change_points=conn.execute(CHANGE_POINTS).all(),
            triage=conn.execute(TRIAGE).all(),
            latencies=conn.execute(LATENCIES).all(),
            recent_runs=conn.execute(RECENT_RUNS, {"limit": recent_runs}).all(),
        )


def load_board(store: Store) -> list:
    require_views(store)
    with store.engine.connect() as conn:
        return conn.execute(BOARD).all()


def load_latest_figures(store: Store) -> list:
    require_views(store)
    with store.engine.connect() as conn:
        return conn.execute(LATEST_FIGURES).all()


def series_of(row) -> tuple[str, str]:
    """The (series, metric) a board row or a change point belongs to."""
    return row.series, row.metric


def age_days(row, now: datetime) -> float | None:
    """Days since a board row's evidence run finished (or started, if it never finished)."""
    when = row.run_finished_at or row.run_started_at
    return None if when is None else (now - when).total_seconds() / 86400


SUPERSEDED_NOTE = "superseded since the gates were evaluated; run `roadgate gates evaluate`"


def evidence_superseded(row) -> bool:
    """The board row's value is no longer what its run holds: a correction landed after the evaluation."""
    return row.evidence_current == 0
