"""jobs.settings: every ROADGATE_* variable jobs/ reads, read when asked."""
from pathlib import Path

import pytest

from jobs import settings

VARIABLES = ("ROADGATE_DATA_DIR", "ROADGATE_DB_URL", "ROADGATE_DB_MIGRATE_URL", "ROADGATE_PARQUET_ROOT",
             "ROADGATE_WORKLOADS_FILE", "ROADGATE_ROADMAP_FILE", "ROADGATE_SCRATCH_DIR", "ROADGATE_GPU_LEASE_DIR",
             "ROADGATE_GPU_COUNT")


@pytest.fixture
def unset(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_defaults_follow_the_data_dir(unset, tmp_path):
    assert settings.data_dir() == Path("data") and settings.gpu_count() is None
    unset.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    assert settings.db_url() == settings.db_migrate_url() == f"sqlite:///{tmp_path / 'roadgate.db'}"
    assert settings.parquet_root() == str(tmp_path / "requests")
    assert settings.workloads_file() == settings.SHIPPED_DATA / "workloads.yaml"
    assert settings.roadmap_file().is_file() and settings.gpu_lease_dir() == settings.DEFAULT_GPU_LEASE_DIR


def test_the_migrate_url_defaults_to_the_writers_and_empty_means_unset(unset):
    unset.setenv("ROADGATE_DB_URL", "postgresql://writer@db/roadgate")
    unset.setenv("ROADGATE_DB_MIGRATE_URL", "")
    assert settings.db_migrate_url() == "postgresql://writer@db/roadgate"
    unset.setenv("ROADGATE_GPU_LEASE_DIR", "")
    assert settings.gpu_lease_dir() == settings.DEFAULT_GPU_LEASE_DIR


@pytest.mark.parametrize("value, count", [("0", 0), ("3", 3), ("", None)])
def test_the_gpu_count_is_a_whole_number_or_unset(unset, value, count):
    unset.setenv("ROADGATE_GPU_COUNT", value)
    assert settings.gpu_count() == count
