"""Fixtures shared by tests/store and tests/gates: a real, empty, migrated database per test.

PostgreSQL: one throwaway database per test session on the tests' own server
(tests/pg_cluster.py), a fresh schema per test, all dropped at the end. SQLite: a file per test.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from jobs.store import MetricRecord, RunRecord, open_store, upgrade
from tests.pg_cluster import server_url

EPOCH = datetime(2025, 1, 1, 2, 0)
# A workloads file (ROADGATE_WORKLOADS_FILE) whose one workload runs in a second: for tests
# that run the real `roadgate bench` many times.
TINY_WORKLOAD = """\
workloads:
  tiny:
    version: 1
    description: two short prompts, two tokens each
    prompts: {source: random_tokens, count: 2, input_len: [8, 8]}
    output_len: [2, 2]
    sampling: {temperature: 0, ignore_eos: true}
    seed: 0
    hardware: any
    validity: {min_duration_s: 0.001, min_requests: 2}
"""


@pytest.fixture(scope="session")
def pg_database():
    server = server_url()
    name = f"roadgate_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def new_schema_url(pg_database: str) -> str:
    """A URL into a fresh, empty schema of the test database."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{pg_database}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url(pg_database):
    return new_schema_url(pg_database)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'roadgate.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url, tmp_path):
    s = open_store(db_url, str(tmp_path / "requests"))
    upgrade(s.engine)
    yield s
    s.engine.dispose()


def nightly(day: int, **overrides) -> RunRecord:
    """A valid nightly bench run `day` days after EPOCH; any field can be overridden."""
    started = EPOCH + timedelta(days=day)
    fields = dict(kind="bench", workload="nano-bench", hardware_class="H200", gpu_name="NVIDIA H200",
                  started_at=started, finished_at=started + timedelta(minutes=5), config={"backend": "cuda"},
                  git_sha=f"{day:040x}", git_dirty=False, host="gpu-1")
    fields.update(overrides)
    return RunRecord(**fields)


def metrics(engine: str = "roadgate", **values) -> list[MetricRecord]:
    return [MetricRecord(engine, name, value, count=256) for name, value in values.items()]
