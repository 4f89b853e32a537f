"""What the roadgate DAGs share: the results asset, and where GPU work runs.

Where GPU tasks run is configuration, read when the DAG files are parsed:

  ROADGATE_TASK_RUNNER=local   (default) in-process on an Airflow worker: LocalExecutor on
                               one GPU box, or CeleryExecutor workers serving the `gpu` queue.
  ROADGATE_TASK_RUNNER=docker  in the GPU worker image (ROADGATE_GPU_IMAGE), through the
                               Docker provider, leasing one of the GPUs it is given.

Either way GPU tasks take a slot of the `gpu` pool (size it to the GPUs you have:
`airflow pools set gpu N "one slot per GPU"`) and go to the `gpu` queue. In the local runner
each one leases a GPU of its host for its lifetime (jobs/gpu_lease.py), so N slots run on
N distinct GPUs.
"""
from __future__ import annotations

import logging
import os
import time

from airflow.sdk import Asset, task

# Every run that lands in the results store (nightly or ad hoc) updates this asset;
# dags/gate_evaluation.py is scheduled on it.
RESULTS = Asset(name="roadgate_results", uri="roadgate://results-store/runs", group="roadgate")
# Gate evaluation found new change points in the regression direction (extra: change_point_ids);
# dags/bisect_regression.py is scheduled on it.
SUSPECTED_REGRESSIONS = Asset(name="roadgate_suspected_regressions", uri="roadgate://results-store/change-points",
                              group="roadgate")
GPU_POOL = "gpu"
GPU_QUEUE = "gpu"
TASK_RUNNER = os.environ.get("ROADGATE_TASK_RUNNER", "local")
GPU_IMAGE = os.environ.get("ROADGATE_GPU_IMAGE", "roadgate-gpu-worker:latest")
# What a container needs to reach the store and the shared data directory.
FORWARDED_ENV = ("ROADGATE_DATA_DIR", "ROADGATE_DB_URL", "ROADGATE_PARQUET_ROOT", "ROADGATE_GIT_REPO")
# Object storage's settings (jobs/storage.py): private, so the secrets are not rendered in the UI.
FORWARDED_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                     "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")


class OncePerMinute(logging.Filter):
    """`airflow dags test` (what `make demo` runs) logs "No tasks to run" every second while the
    preflight sensor waits for its next poke: about 500 lines in 11 minutes, which drowned the
    sensor's own status line. Keep the first, then one a minute."""

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self.clock, self.last = clock, float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("No tasks to run"):
            return True
        if self.clock() - self.last < 60:
            return False
        self.last = self.clock()
        return True


# The logger of dag.test()'s loop; a scheduler never logs this line.
logging.getLogger("airflow.sdk.definitions.dag").addFilter(OncePerMinute())


def gpu_task(**kwargs):
    """A TaskFlow decorator for work that needs one GPU, placed as configured above.

    Task bodies import from jobs/ inside the function: in the container only the
    function's source travels, and parsing stays fast."""
    if TASK_RUNNER == "local":
        return task(pool=GPU_POOL, queue=GPU_QUEUE, **kwargs)
    if TASK_RUNNER == "docker":
        from docker.types import DeviceRequest, Mount

        from jobs import settings
        data_dir = os.path.abspath(settings.data_dir())
        # Every GPU, and the host's lease files: the task leases one inside its container, as
        # on the host (Docker's count=1 would give every container the same first GPU).
        leases = settings.gpu_lease_dir()
        leases.mkdir(parents=True, exist_ok=True)   # a bind mount's source must exist
        # The image has no .git: bench --ref (regression triage) takes commits from the host's
        # checkout named by ROADGATE_GIT_REPO, writable (git worktree records itself there).
        git_repo = os.environ.get("ROADGATE_GIT_REPO")
        repo_mount = [Mount(target=git_repo, source=git_repo, type="bind")] if git_repo else []
        return task.docker(
            image=GPU_IMAGE, pool=GPU_POOL, queue=GPU_QUEUE,
            device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
            # The data directory (staging, Parquet, SQLite) at the same path inside and out.
            mounts=[Mount(target=data_dir, source=data_dir, type="bind"),
                    Mount(target=str(leases), source=str(leases), type="bind"), *repo_mount],
            environment={name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
            | {"ROADGATE_DATA_DIR": data_dir, "ROADGATE_GPU_LEASE_DIR": str(leases)},
            private_environment={name: os.environ[name] for name in FORWARDED_SECRETS if name in os.environ},
            network_mode=os.environ.get("ROADGATE_DOCKER_NETWORK", "bridge"),
            auto_remove="success", mount_tmp_dir=False, **kwargs)
    raise ValueError(f"ROADGATE_TASK_RUNNER must be 'local' or 'docker', got {TASK_RUNNER!r}")
