"""Gate evaluation whenever results land: scheduled on the results asset, so every landing
(the nightly benchmark's, an ad hoc batch's, an asset event posted by hand) evaluates the
roadmap gates and renders the report once. The nightly itself ends at its landing.

It also looks for change points in the history; new ones in the regression direction end
at the suspected-regressions asset, on which bisect_regression is scheduled."""
from __future__ import annotations

import logging

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowSkipException

from roadgate_common import RESULTS, SUSPECTED_REGRESSIONS

log = logging.getLogger(__name__)


@dag(
    dag_id="gate_evaluation",
    schedule=[RESULTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["roadgate", "gates"],
)
def gate_evaluation():
    @task
    def evaluate(triggering_asset_events=None) -> list[dict]:
        from jobs.nightly import evaluate_gates_now
        landed = [run_id for events in (triggering_asset_events or {}).values()
                  for event in events for run_id in (event.extra or {}).get("run_ids", [])]
        log.info("runs landed since the last evaluation: %s", landed or "none named")
        return evaluate_gates_now()

    @task
    def report(evaluations: list[dict]) -> None:
        from jobs.nightly import publish_report
        publish_report()   # prints the table; not returned, so it is not logged twice

    @task(outlets=[SUSPECTED_REGRESSIONS])
    def find_regressions(outlet_events=None) -> list[int]:
        from jobs.nightly import find_new_regressions
        change_point_ids = find_new_regressions()
        if not change_point_ids:
            raise AirflowSkipException("no new change point in the regression direction")   # no asset event
        outlet_events[SUSPECTED_REGRESSIONS].extra = {"change_point_ids": change_point_ids}
        return change_point_ids

    report(evaluate())
    find_regressions()


dag = gate_evaluation()
