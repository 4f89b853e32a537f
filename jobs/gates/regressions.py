"""Change points in each metric's history (Apache Otava's e-divisive with t-test merging).

A series is one metric of one series of figures (v_metric_history.series: workload
and version, hardware, engine and its identifying config; jobs/store/ingest.py), in
run order, so adding a peer to a run or a new peer version does not start a new
history of ours. A change point is stored with the two runs it lies between, once:
re-running detection appends only change points not found before.
"""
from __future__ import annotations

from itertools import groupby

from sqlalchemy import text

from jobs.store.db import Store
from jobs.store.models import ChangePoint

# Otava defaults used by Hunter: a shift must be significant (p < 0.001) and at least 5% of the level,
# so run-to-run noise over years of nightlies does not raise alarms.
MAX_PVALUE = 0.001
MIN_MAGNITUDE = 0.05
WINDOW = 30
MIN_POINTS = 8

HISTORY_QUERY = text(
    "SELECT series, fingerprint, engine, metric, better, run_id, value FROM v_metric_history "
    "ORDER BY series, metric, started_at, metric_id"
)
LEGACY_SERIES_PREFIX = "run:"   # v_metric_history's series of rows recorded before 0004
KNOWN_QUERY = text("SELECT series, metric, first_run_after_id FROM v_change_points")


def find_change_points(values: list[float], max_pvalue: float = MAX_PVALUE,
                       min_magnitude: float = MIN_MAGNITUDE) -> list:
    """Otava change points of one series; each has .index (the first point after the change) and .stats."""
    if len(values) < MIN_POINTS:
        return []
    # Imported here: the bench job on a GPU host records runs without Otava installed.
    from otava.analysis import compute_change_points
    change_points, _ = compute_change_points(values, window_len=WINDOW, max_pvalue=max_pvalue, min_magnitude=min_magnitude)
    return change_points


def detect_regressions(store: Store) -> list[ChangePoint]:
    """Scans every series for change points; appends the new ones and returns them."""
    with store.session() as session, session.begin():
        known = set(session.execute(KNOWN_QUERY).all())
        history = session.execute(HISTORY_QUERY).all()
        found = []
        for (series, metric), points in groupby(history, key=lambda r: (r.series, r.metric)):
            points = list(points)
            for cp in find_change_points([p.value for p in points]):
                after, before = points[cp.index], points[cp.index - 1]
                if (series, metric, after.run_id) in known:
                    continue
                mean_before, mean_after = cp.stats.mean_before(), cp.stats.mean_after()
                worse = mean_after < mean_before if after.better == "higher" else mean_after > mean_before
                found.append(ChangePoint(
                    # A series derived for rows older than series keys is derived again by the view.
                    series=None if series.startswith(LEGACY_SERIES_PREFIX) else series, fingerprint=after.fingerprint, engine=after.engine, metric=metric,
                    last_run_before_id=before.run_id, first_run_after_id=after.run_id,
                    mean_before=mean_before, mean_after=mean_after,
                    change_percent=cp.stats.forward_change_percent(), pvalue=cp.stats.pvalue, is_regression=worse,
                ))
        session.add_all(found)
    return found
