"""The pipeline on a real Airflow 3 deployment (cluster/: PostgreSQL, Redis, api-server,
scheduler, dag-processor, triggerer, a default-queue and a `gpu`-queue Celery worker), driven
only through the public REST API v2, as a user would: the batch and the nightly end to end,
then the `gpu` worker SIGKILLed in the middle of a shard and replaced, and the shard retried
to output that holds every input row exactly once.

The deployment is tuned only where a test cannot wait for production's timings (OVERRIDES).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import select

from cluster.deployment import Deployment
from tests.conftest import CHAT_PROMPTS, REPO
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# A killed worker's task is failed 20 s after its last heartbeat (sent every 5 s; production:
# 60 s), looked for every 2 s, and retried 2 s later (production: 60 s).
OVERRIDES = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "2",
}
RUN_TIMEOUT_S = 420
ARTIFACTS = Path(os.environ.get("ROADGATE_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")


@pytest.fixture(scope="module")
def deployment():
    # Under /tmp and searchable by all: PostgreSQL runs as `postgres` and pytest's tmp_path is root's only.
    root = Path(tempfile.mkdtemp(prefix="roadgate-cluster-"))
    root.chmod(0o755)
    # GPU leases of its own: other test runs on this host do not make its GPU tasks wait.
    deployment = Deployment(root, OVERRIDES | {"ROADGATE_GPU_LEASE_DIR": str(root / "gpu-leases")}, durable=False)
    try:
        deployment.up()
        yield deployment
    finally:
        deployment.down()
        # The components' and tasks' logs outlive the run, for a failure's post-mortem.
        shutil.rmtree(ARTIFACTS / "cluster-logs", ignore_errors=True)
        shutil.copytree(deployment.logs, ARTIFACTS / "cluster-logs")
        shutil.rmtree(root, ignore_errors=True)


class Api:
    """The public REST API v2, authenticated with a JWT from the simple auth manager's /auth/token."""

    def __init__(self, deployment: Deployment) -> None:
        import httpx
        self.http = httpx.Client(base_url=deployment.api_url, timeout=60)
        token = self.http.post("/auth/token", json={"username": "admin", "password": deployment.password()})
        assert token.status_code == 201, token.text
        self.http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs) -> dict:
        response = self.http.request(method, f"/api/v2{path}", **kwargs)
        assert response.is_success, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def trigger(self, dag_id: str, conf: dict) -> str:
        """A run with `conf`, started now. A DAG starts paused; unpausing a scheduled one (catchup
        off) starts a run for its last due tick at once, which this run would queue behind
        (max_active_runs 1): so a due tick is given to this run, else it has a logical date of none."""
        deadline = time.monotonic() + 120
        while (dag := self.http.get(f"/api/v2/dags/{dag_id}")).status_code == 404:   # not parsed yet
            assert time.monotonic() < deadline, f"the dag-processor never parsed {dag_id}"
            time.sleep(1)
        due = dag.json()["next_dagrun_run_after"]
        logical_date = dag.json()["next_dagrun_logical_date"] if due and datetime.fromisoformat(due) <= \
            datetime.now(timezone.utc) else None
        run_id = self.call("POST", f"/dags/{dag_id}/dagRuns",
                           json={"logical_date": logical_date, "conf": conf})["dag_run_id"]
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        return run_id

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def wait(self, dag_id: str, run_id: str, timeout_s: float = RUN_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while (state := self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
            if time.monotonic() > deadline:
                break
            time.sleep(2)
        return state

    def describe(self, dag_id: str, run_id: str) -> str:
        return "; ".join(f"{ti['task_id']}[{ti['map_index']}] {ti['state']} try {ti['try_number']}"
                         for ti in self.task_instances(dag_id, run_id))


@pytest.fixture(scope="module")
def api(deployment) -> Api:
    return Api(deployment)


def store_runs(deployment: Deployment, airflow_run_id: str) -> list:
    from jobs.store import open_store
    from jobs.store.models import Run
    store = open_store(f"{deployment.state['pg_url']}/roadgate")
    try:
        with store.session() as s:
            return s.scalars(select(Run).where(Run.airflow_run_id == airflow_run_id)).all()
    finally:
        store.engine.dispose()


def write_prompts(path: Path, rows: int) -> list[str]:
    """`rows` short prompts with string ids; returns the ids in input order."""
    ids = [f"row-{i:04d}" for i in range(rows)]
    path.write_text("".join(json.dumps({"id": i, "prompt": f"Say {i} in words."}) + "\n" for i in ids))
    return ids


def test_batch_and_nightly_through_the_rest_api(deployment, api, tiny_model, tmp_path):
    from jobs.batch import read_committed, read_manifest

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(CHAT_PROMPTS.read_text().splitlines(keepends=True)[:12]))
    input_ids = [json.loads(line)["id"] for line in prompts.read_text().splitlines()]
    out = tmp_path / "batch-out"
    batch = api.trigger("batch_generation", {
        "model": str(tiny_model), "input_uri": str(prompts), "output_uri": str(out), "num_shards": 2,
        "backend": "torch", "row_group_size": 4, "sampling": {"max_tokens": 4}})
    # One cheap cell; the host is busy running Airflow itself, so any load counts as quiet.
    nightly = api.trigger("nightly_benchmark", {
        "profile": "cpu", "engines": ["ours"], "workloads": ["cpu-small"], "model": str(tiny_model),
        "preflight": {"window_s": 0, "load_threshold": 1e9}})

    for dag_id, run_id in (("batch_generation", batch), ("nightly_benchmark", nightly)):
        assert api.wait(dag_id, run_id) == "success", api.describe(dag_id, run_id)
    # The GPU tasks went to the `gpu` queue and pool, the rest to the default queue.
    for dag_id, run_id, gpu_tasks in (("batch_generation", batch, {"generate"}),
                                      ("nightly_benchmark", nightly, {"configure", "preflight", "bench"})):
        for ti in api.task_instances(dag_id, run_id):
            assert ti["queue"] == ("gpu" if ti["task_id"] in gpu_tasks else "default"), ti

    committed = read_committed(str(out))
    assert committed.column("id").to_pylist() == input_ids
    assert all(n == 4 for n in committed.column("output_tokens").to_pylist())
    manifest = read_manifest(str(out))
    assert manifest["rows"] == len(input_ids) and manifest["run_id"] == batch and len(manifest["parts"]) == 2
    [generated] = store_runs(deployment, batch)
    assert (generated.kind, generated.id) == ("generate", manifest["store_run_id"])

    [benched] = store_runs(deployment, nightly)
    assert (benched.kind, benched.workload, benched.airflow_dag_id) == ("bench", "cpu-small", "nightly_benchmark")


def test_a_gpu_worker_killed_mid_shard_is_replaced_and_the_shard_retried_to_exactly_once_output(
        deployment, api, tiny_model, tmp_path):
    from jobs.batch import read_committed, read_manifest

    # Two shards of 1,024 rows: the engine runs 256 at a time, so a shard writes its first row
    # groups three batches before it ends. (At 320 rows, one batch of 64 was left: on an idle
    # host the whole run once finished between two looks.)
    input_ids = write_prompts(tmp_path / "prompts.jsonl", 2048)
    out = tmp_path / "batch-out"
    run_id = api.trigger("batch_generation", {
        "model": str(tiny_model), "input_uri": str(tmp_path / "prompts.jsonl"), "output_uri": str(out),
        "num_shards": 2, "backend": "torch", "row_group_size": 8, "sampling": {"max_tokens": 16}})

    # Mid-shard: its temporary part holds row groups, and the part is not published.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (writing := [p for p in out.glob("_staging/*/*/.part-*.tmp") if p.stat().st_size > 4096]):
        assert time.monotonic() < deadline, f"no shard started writing; {api.describe('batch_generation', run_id)}"
        time.sleep(0.05)
    deployment.kill("worker-gpu")
    killed_at = time.monotonic()
    shard = int(writing[0].name.split("-")[1])
    assert not list(out.glob(f"part-{shard:05d}-*.parquet")), "the shard finished before the kill"
    [running] = [ti for ti in api.task_instances("batch_generation", run_id) if ti["state"] == "running"]
    assert (running["task_id"], running["map_index"], running["try_number"]) == ("generate", shard, 1)

    deployment.start("worker-gpu")
    assert api.wait("batch_generation", run_id) == "success", api.describe("batch_generation", run_id)
    tries = api.call("GET", f"/dags/batch_generation/dagRuns/{run_id}/taskInstances/generate/{shard}/tries")
    assert [(t["try_number"], t["state"]) for t in tries["task_instances"]] == [(1, "failed"), (2, "success")]
    print(f"\nkilled mid-shard; batch done {time.monotonic() - killed_at:.0f} s after the kill")

    committed = read_committed(str(out))
    assert committed.column("id").to_pylist() == input_ids   # every row once, in input order
    manifest = read_manifest(str(out))
    assert manifest["rows"] == len(input_ids) == sum(p["rows"] for p in manifest["parts"])
    # The killed attempt's temporary went with the staging directory at commit.
    assert sorted(p.name for p in out.iterdir()) == sorted(["_claim.json", "_manifest.json",
                                                            *(p["path"] for p in manifest["parts"])])
    assert [r.id for r in store_runs(deployment, run_id)] == [manifest["store_run_id"]]
