"""Regression triage: re-measure two commits, and if the shift between them is confirmed,
bisect the first-parent commits between them to the first bad one. Logic lives in
jobs/gates/triage_chain.py; every bench run lands in the results store as evidence.

Scheduled on the suspected-regressions asset: gate evaluation's new regression change
points, each triaged in turn. Or by hand:

    airflow dags trigger bisect_regression --conf '{"good": "abc123", "bad": "def456",
        "workload": "nano-bench"}'
    airflow dags trigger bisect_regression --conf '{"change_point_id": 17}'

A change point's id stands for its two runs' commits, workload, metric, engine and model.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from roadgate_common import RESULTS, SUSPECTED_REGRESSIONS, gpu_task


@dag(
    dag_id="bisect_regression",
    schedule=[SUSPECTED_REGRESSIONS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["roadgate", "gates"],
    params={
        "change_point_id": Param(None, type=["null", "integer"], minimum=1,
                                 description="a change point (roadgate gates regressions): its runs fill in the rest"),
        "good": Param(None, type=["null", "string"], minLength=1, description="a commit whose figure is good"),
        "bad": Param(None, type=["null", "string"], minLength=1,
                     description="a later commit (first-parent) whose figure is bad"),
        "workload": Param(None, type=["null", "string"], minLength=1,
                          description="a workload of jobs/data/workloads.yaml"),
        # Unset (null): the change point's, else jobs.gates.triage_chain.TRIAGE_DEFAULTS.
        "metric": Param(None, type=["null", "string"], minLength=1, description="default output_tok_s"),
        "better": Param(None, type=["null", "string"], enum=[None, "higher", "lower"], description="default higher"),
        "engine": Param(None, type=["null", "string"], minLength=1, description="default ours"),
        "backend": Param(None, type=["null", "string"], enum=[None, "auto", "cuda", "torch"],
                         description="default auto"),
        "model": Param(None, type=["null", "string"], minLength=1, description="default smollm2-135m-instruct"),
        "repetitions": Param(5, type="integer", minimum=5, description="runs of each end (5 and 5 reach p = 0.004)"),
        "runs_per_probe": Param(3, type="integer", minimum=1),
        "max_runs": Param(30, type="integer", minimum=1, description="bench runs the bisect may spend"),
        "preflight": Param(True, type="boolean", description="lease a GPU and wait for a quiet host per run"),
    },
)
def bisect_regression():
    # On a GPU worker: its bench runs take the GPU lease and the preflight as any bench does.
    @gpu_task(outlets=[RESULTS])
    def triage(params=None, triggering_asset_events=None) -> list[dict]:
        from jobs.gates.triage_chain import run_triages
        suspected = [change_point_id for events in (triggering_asset_events or {}).values() for event in events
                     for change_point_id in (event.extra or {}).get("change_point_ids", [])]
        return run_triages(dict(params), suspected)

    triage()


dag = bisect_regression()
