"""Regression triage by hand: re-measure two commits, and if the shift between them is
confirmed, bisect the first-parent commits between them to the first bad one. Logic lives
in jobs/gates/triage_chain.py; every bench run lands in the results store as evidence.

    airflow dags trigger bisect_regression --conf '{"good": "abc123", "bad": "def456",
        "workload": "nano-bench"}'
"""
from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from roadgate_common import RESULTS, gpu_task


@dag(
    dag_id="bisect_regression",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["roadgate", "gates"],
    params={
        "good": Param(type="string", minLength=1, description="a commit whose figure is good"),
        "bad": Param(type="string", minLength=1, description="a later commit (first-parent) whose figure is bad"),
        "workload": Param(type="string", minLength=1, description="a workload of jobs/data/workloads.yaml"),
        "metric": Param("output_tok_s", type="string", minLength=1),
        "better": Param("higher", type="string", enum=["higher", "lower"]),
        "engine": Param("ours", type="string", minLength=1),
        "backend": Param("auto", type="string", enum=["auto", "cuda", "torch"]),
        "model": Param("smollm2-135m-instruct", type="string", minLength=1),
        "repetitions": Param(5, type="integer", minimum=5, description="runs of each end (5 and 5 reach p = 0.004)"),
        "runs_per_probe": Param(3, type="integer", minimum=1),
        "max_runs": Param(30, type="integer", minimum=1, description="bench runs the bisect may spend"),
        "preflight": Param(True, type="boolean", description="lease a GPU and wait for a quiet host per run"),
    },
)
def bisect_regression():
    # On a GPU worker: its bench runs take the GPU lease and the preflight as any bench does.
    @gpu_task(outlets=[RESULTS])
    def triage(params=None) -> dict:
        from jobs.gates.triage_chain import run_triage
        return run_triage(dict(params))

    triage()


dag = bisect_regression()
