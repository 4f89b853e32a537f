"""Ad hoc batch generation: split the input into shards, generate each shard on one GPU,
commit a manifest and record the run. Logic lives in jobs/batch.py.

    airflow dags trigger batch_generation --conf '{"input_uri": "/data/prompts.jsonl",
        "output_uri": "/data/out/batch-1", "num_shards": 8}'

Params are validated against their JSON schema when the run is created, so a bad
trigger is refused before any task runs.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from roadgate_common import RESULTS, gpu_task


@dag(
    dag_id="batch_generation",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["roadgate", "generation"],
    params={
        "model": Param("smollm2-135m-instruct", type="string", minLength=1,
                       description="alias, GGUF path or HF folder, as `roadgate generate --model`"),
        "input_uri": Param(type="string", minLength=1,
                           description="JSONL, CSV or Parquet with a prompt or messages column "
                                       "(local path, file:// or s3://bucket/key)"),
        "output_uri": Param(type="string", minLength=1,
                            description="directory for the Parquet parts and _manifest.json "
                                        "(local path, file:// or s3://bucket/prefix)"),
        "num_shards": Param(1, type="integer", minimum=1, maximum=4096),
        "backend": Param("auto", type="string", enum=["auto", "cuda", "torch"]),
        "sampling": Param(
            {}, type="object", additionalProperties=False,
            description="fields given override the batch's defaults (greedy, 256 tokens, seed 0: "
                        "jobs.batch.SAMPLING_DEFAULTS), they do not replace them",
            properties={"max_tokens": {"type": "integer", "minimum": 1},
                        "temperature": {"type": "number", "minimum": 0},
                        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                        "top_k": {"type": "integer", "minimum": 0},
                        "seed": {"type": "integer", "minimum": 0}}),
        "row_group_size": Param(256, type="integer", minimum=1),
    },
)
def batch_generation():
    @task(multiple_outputs=True)
    def prepare(params=None, dag_run=None) -> dict:
        from jobs.batch import parse_params, run_key
        return {"batch": parse_params(dict(params)).as_dict(), "key": run_key(dag_run.dag_id, dag_run.run_id)}

    @task
    def split(batch: dict, key: str) -> list[dict]:
        from jobs.batch import BatchParams, split_input
        return split_input(BatchParams(**batch), key)

    # The retry delay is the deployment's ([core] default_task_retry_delay, docker/airflow.env).
    @gpu_task(retries=2)
    def generate(shard: dict, batch: dict, key: str) -> dict:
        from jobs.batch import BatchParams, generate_shard
        return generate_shard(shard, BatchParams(**batch), key)

    @task(outlets=[RESULTS])
    def commit(results: list[dict], batch: dict, key: str, dag_run=None, outlet_events=None) -> dict:
        from jobs.batch import BatchParams, commit_batch
        # results[:]: one request for every shard's result (iterating logs "XCom not found" at its end).
        manifest = commit_batch(results[:], BatchParams(**batch), key, dag_run.dag_id, dag_run.run_id)
        outlet_events[RESULTS].extra = {"kind": "generate", "run_ids": [manifest["store_run_id"]]}
        return {k: manifest[k] for k in ("store_run_id", "rows", "output_tokens")}

    prepared = prepare()
    batch, key = prepared["batch"], prepared["key"]
    results = generate.partial(batch=batch, key=key).expand(shard=split(batch, key))
    commit(results, batch, key)

dag = batch_generation()
