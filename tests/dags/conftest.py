"""Fixtures for the DAG tests: a real Airflow metadata DB (SQLite) in a temporary
AIRFLOW_HOME, the repo's dags/ as the DAG folder, and a fresh results store.

Airflow reads its configuration when first imported, so the environment is set
here before any test imports it; tests import airflow inside their bodies.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "ROADGATE_TASK_RUNNER": "local",
    }
    os.environ.update(env)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, env={**os.environ},
                   capture_output=True)
    if str(DAGS) not in sys.path:
        sys.path.insert(0, str(DAGS))   # as Airflow's DAG bundle does, for dags/roadgate_common.py
    return env


@pytest.fixture
def results_store(airflow_env, default_store):
    """The results store the DAG tasks write to: a SQLite file and Parquet under tmp_path."""
    return default_store


def load_dag(dag_id: str):
    from airflow.dag_processing.dagbag import BundleDagBag
    bag = BundleDagBag(str(DAGS), bundle_path=str(DAGS), bundle_name="dags-folder")
    assert bag.import_errors == {}
    return bag.dags[dag_id]
