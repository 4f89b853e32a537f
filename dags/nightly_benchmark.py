"""Nightly benchmark: wait for a quiet host, run every engine on every workload (each cell on a
GPU it leases; on a host of several GPUs, after a preflight of its own there), land the results. Logic lives in
jobs/nightly.py. The landing updates the results asset, which schedules
dags/gate_evaluation.py: the gates are evaluated and the report rendered there, once.

Trigger with a conf to override the defaults of jobs/data/nightly.yaml, e.g.
    airflow dags trigger nightly_benchmark --conf '{"engines": ["ours", "hf"]}'
"""
from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, PokeReturnValue, dag, task

from roadgate_common import GPU_QUEUE, RESULTS, gpu_task

PREFLIGHT_TIMEOUT_S = 6 * 3600
NULLABLE_NAMES = {"type": ["null", "array"], "items": {"type": "string", "minLength": 1}, "minItems": 1}


@dag(
    dag_id="nightly_benchmark",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["roadgate", "benchmark"],
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        # null: the default of jobs/data/nightly.yaml for the host's profile.
        "profile": Param("auto", enum=["auto", "cpu", "gpu"]),
        "engines": Param(None, **NULLABLE_NAMES),
        "workloads": Param(None, **NULLABLE_NAMES),
        "reference": Param(None, type=["null", "string"]),
        "model": Param(None, type=["null", "string"]),
        "backend": Param(None, type=["null", "string"], enum=[None, "auto", "cuda", "torch"]),
        "device": Param(None, type=["null", "string"], enum=[None, "cpu", "cuda"]),
        "preflight": Param({}, type="object", additionalProperties=False, properties={
            name: {"type": "number", "minimum": 0}
            for name in ("window_s", "load_threshold", "sample_every_s", "max_gpu_util")}),
    },
)
def nightly_benchmark():
    # On the gpu queue: the `auto` profile asks the GPU host whether it has a GPU.
    @task(multiple_outputs=True, queue=GPU_QUEUE)
    def configure(params=None, dag_run=None) -> dict:
        from jobs.nightly import resolve_config, staging_dir
        return {"config": resolve_config(dict(params)).as_dict(),
                "staging": str(staging_dir(dag_run.dag_id, dag_run.run_id))}

    @task
    def plan(config: dict) -> list[dict]:
        from jobs.nightly import NightlyConfig, plan_bench_matrix
        return plan_bench_matrix(NightlyConfig.from_dict(config))

    # Reschedule mode: between pokes the sensor gives its worker slot back. A poke samples
    # one quiet window (30 s by default), so it holds a slot only that long.
    # The gate that decides when the nightly starts, beside the cells' own preflights on a host
    # of several GPUs: it keeps a one-GPU host's nightly as strict as it was. There the cells
    # run one at a time inside the window found here, each watched while measured; the run
    # waits here, holding no slot or GPU, for up to 6 h and fails unmeasured if the host never
    # quiets. Without it the cells would wait inside their tasks, holding the GPU.
    @task.sensor(mode="reschedule", poke_interval=120, timeout=PREFLIGHT_TIMEOUT_S, queue=GPU_QUEUE)
    def preflight(config: dict, dag_run=None) -> PokeReturnValue:
        import pendulum

        from jobs.nightly import NightlyConfig, wait_for_quiet_host
        waited = (pendulum.now("UTC") - dag_run.start_date).total_seconds() if dag_run.start_date else 0.0
        outcome = wait_for_quiet_host(NightlyConfig.from_dict(config), waited_s=waited, limit_s=PREFLIGHT_TIMEOUT_S)
        return PokeReturnValue(is_done=outcome is not None, xcom_value=outcome)

    @gpu_task(retries=2)
    def bench(cell: dict, config: dict, staging: str) -> dict:
        from pathlib import Path

        from jobs.nightly import NightlyConfig, run_bench_cell
        return run_bench_cell(cell, NightlyConfig.from_dict(config), Path(staging))

    @task(outlets=[RESULTS])
    def ingest(staged: list[dict], config: dict, preflight_outcome: dict, dag_run=None, outlet_events=None) -> list[str]:
        from jobs.nightly import NightlyConfig, land_bench_results
        # staged[:] fetches every mapped result in one request; iterating (list(staged)) asks for
        # one past the last, which the task SDK logs as "[error] XCom not found" on every run.
        run_ids = land_bench_results(staged[:], NightlyConfig.from_dict(config), preflight_outcome,
                                     dag_run.dag_id, dag_run.run_id)
        outlet_events[RESULTS].extra = {"kind": "bench", "run_ids": run_ids}
        return run_ids

    configured = configure()
    config, staging = configured["config"], configured["staging"]
    quiet = preflight(config)
    staged = bench.partial(config=config, staging=staging).expand(cell=plan(config))
    quiet >> staged
    ingest(staged, config, quiet)

dag = nightly_benchmark()

if __name__ == "__main__":
    # `python dags/nightly_benchmark.py`: one run in this process (`make demo` runs gate_evaluation after it).
    dag.test()
