"""Every environment variable jobs/ reads, with its default: the one place that reads them.

Read when asked, not at import, so a test or a task's environment can set them. A variable
set to the empty string counts as unset. (dags/ reads its own few: where tasks run.)
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# The files shipped with jobs/: workloads, roadmap, nightly matrix, chat prompts.
SHIPPED_DATA = Path(__file__).resolve().parent / "data"
DEFAULT_GPU_LEASE_DIR = Path("/tmp/roadgate-gpu-leases")


def _read(name: str) -> str | None:
    return os.environ.get(name) or None


def data_dir() -> Path:
    """ROADGATE_DATA_DIR: the pipeline's data directory (SQLite store, Parquet, staging, report); ./data."""
    return Path(_read("ROADGATE_DATA_DIR") or "data")


def db_url() -> str:
    """ROADGATE_DB_URL: the results store's SQL database (PostgreSQL in production); a SQLite file in data_dir()."""
    return _read("ROADGATE_DB_URL") or f"sqlite:///{data_dir() / 'roadgate.db'}"


def db_migrate_url() -> str:
    """ROADGATE_DB_MIGRATE_URL: the URL migrations run as (on PostgreSQL the tables' owner, while
    ROADGATE_DB_URL names the writer role: jobs.store.roles); db_url()."""
    return _read("ROADGATE_DB_MIGRATE_URL") or db_url()


def parquet_root() -> str:
    """ROADGATE_PARQUET_ROOT: where per-request rows go, a local path or an object-store URI
    (s3://bucket/prefix); data_dir()/requests."""
    return _read("ROADGATE_PARQUET_ROOT") or str(data_dir() / "requests")


def workloads_file() -> Path:
    """ROADGATE_WORKLOADS_FILE: the benchmark workloads (for experiments and tests); the shipped file."""
    return Path(_read("ROADGATE_WORKLOADS_FILE") or SHIPPED_DATA / "workloads.yaml")


def roadmap_file() -> Path:
    """ROADGATE_ROADMAP_FILE: the roadmap rows the gates judge; the shipped file."""
    return Path(_read("ROADGATE_ROADMAP_FILE") or SHIPPED_DATA / "roadmap.yaml")


def scratch_dir() -> Path:
    """ROADGATE_SCRATCH_DIR: this host's directory for local copies of object-store data (a part
    being generated, an input being read); roadgate-scratch in the system's temporary directory."""
    return Path(_read("ROADGATE_SCRATCH_DIR") or Path(tempfile.gettempdir()) / "roadgate-scratch")


def git_repo() -> Path | None:
    """ROADGATE_GIT_REPO: the git checkout `bench --ref` takes commits from where the running code
    has none (the docker runner's GPU image, into which dags/roadgate_common.py mounts the host's);
    None: the code's own checkout (jobs.git_ref)."""
    value = _read("ROADGATE_GIT_REPO")
    return Path(value) if value else None


def gpu_lease_dir() -> Path:
    """ROADGATE_GPU_LEASE_DIR: this host's GPU lease files (jobs.gpu_lease), shared by every task
    on the host, containers included; DEFAULT_GPU_LEASE_DIR."""
    return Path(_read("ROADGATE_GPU_LEASE_DIR") or DEFAULT_GPU_LEASE_DIR)


def gpu_count() -> int | None:
    """ROADGATE_GPU_COUNT: a simulated number of GPUs on this host (for tests); None: ask NVML.
    Raises ValueError for anything but a whole number >= 0."""
    value = _read("ROADGATE_GPU_COUNT")
    if value is None:
        return None
    if not value.isdigit():
        raise ValueError(f"ROADGATE_GPU_COUNT must be a whole number >= 0, got {value!r}")
    return int(value)
