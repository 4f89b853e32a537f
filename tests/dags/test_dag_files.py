"""The DAG files parse, and carry the wiring the pipeline depends on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.dags.conftest import DAGS, REPO, load_dag

DAG_IDS = {"nightly_benchmark", "batch_generation", "gate_evaluation", "bisect_regression"}


def test_every_dag_imports_without_errors(airflow_env):
    from airflow.dag_processing.dagbag import BundleDagBag
    bag = BundleDagBag(str(DAGS), bundle_path=str(DAGS), bundle_name="dags-folder")
    assert bag.import_errors == {}
    assert set(bag.dags) == DAG_IDS


def test_nightly_wiring_gpu_pool_queue_sensor_and_results_outlet(airflow_env):
    from roadgate_common import RESULTS
    nightly = load_dag("nightly_benchmark")
    bench, sensor, ingest = (nightly.task_dict[t] for t in ("bench", "preflight", "ingest"))
    assert (bench.pool, bench.queue) == ("gpu", "gpu")
    assert sensor.mode == "reschedule" and sensor.queue == "gpu"
    assert RESULTS in ingest.outlets
    assert {t.task_id for t in sensor.downstream_list} >= {"bench"}
    assert nightly.timetable.expression == "0 2 * * *"
    generate = load_dag("batch_generation").task_dict["generate"]
    assert (generate.pool, generate.queue) == ("gpu", "gpu")


def test_the_bisect_runs_on_a_gpu_worker_on_suspected_regressions_and_lands_its_runs(airflow_env):
    from roadgate_common import RESULTS, SUSPECTED_REGRESSIONS
    bisect = load_dag("bisect_regression")
    (task,) = bisect.task_dict.values()
    assert (task.task_id, task.pool, task.queue) == ("triage", "gpu", "gpu") and RESULTS in task.outlets
    assert list(bisect.timetable.asset_condition.objects) == [SUSPECTED_REGRESSIONS]   # or by hand
    gates = load_dag("gate_evaluation")
    assert gates.task_dict["find_regressions"].outlets == [SUSPECTED_REGRESSIONS]
    assert bisect.params["repetitions"] == 5 and bisect.params["preflight"] is True


def test_the_gates_are_evaluated_once_per_landing_by_gate_evaluation_alone(airflow_env):
    from airflow.dag_processing.dagbag import BundleDagBag

    from roadgate_common import RESULTS
    nightly = load_dag("nightly_benchmark")
    # The nightly ends at its landing: no gate evaluation or report of its own.
    assert set(nightly.task_dict) == {"configure", "plan", "preflight", "bench", "ingest"}
    assert nightly.task_dict["ingest"].downstream_list == []
    bag = BundleDagBag(str(DAGS), bundle_path=str(DAGS), bundle_name="dags-folder")
    consumers = [dag_id for dag_id, dag in bag.dags.items()
                 if RESULTS in getattr(dag.timetable.asset_condition, "objects", ())]
    assert consumers == ["gate_evaluation"]
    gates = bag.dags["gate_evaluation"]
    assert [t.task_id for t in gates.task_dict["evaluate"].downstream_list] == ["report"]


def _parse_in_subprocess(runner: str, leases: Path | None = None, data: Path | None = None,
                         git_repo: Path | None = None) -> subprocess.CompletedProcess:
    script = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import BundleDagBag\n"
        f"bag = BundleDagBag({str(DAGS)!r}, bundle_path={str(DAGS)!r}, bundle_name='dags-folder')\n"
        "out = {'errors': bag.import_errors}\n"
        "if not bag.import_errors:\n"
        "    for dag_id, task_id in [('nightly_benchmark', 'bench'), ('batch_generation', 'generate')]:\n"
        "        t = bag.dags[dag_id].task_dict[task_id]\n"
        "        kw = t.partial_kwargs\n"
        "        out[dag_id] = {'operator': t.operator_class.__name__ if hasattr(t.operator_class, '__name__') else str(t.operator_class),\n"
        "                       'devices': [d['Capabilities'] + [d['Count']] for d in kw['device_requests']],\n"
        "                       'image': kw['image'], 'pool': t.pool, 'queue': t.queue,\n"
        "                       'private_env': sorted(kw.get('private_environment') or {}),\n"
        "                       'mounts': sorted(m['Target'] for m in kw['mounts']),\n"
        "                       'env': sorted(kw.get('environment') or {})}\n"
        "print(json.dumps(out, default=str))\n")
    env = {**os.environ, "ROADGATE_TASK_RUNNER": runner, "ROADGATE_GPU_IMAGE": "roadgate-gpu-worker:test",
           "AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret",
           **({"ROADGATE_GPU_LEASE_DIR": str(leases), "ROADGATE_DATA_DIR": str(data)} if leases else {}),
           **({"ROADGATE_GIT_REPO": str(git_repo)} if git_repo else {})}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO)


def test_docker_runner_puts_gpu_tasks_in_the_gpu_image_with_the_hosts_gpu_leases(airflow_env, tmp_path):
    leases, data = tmp_path / "leases", tmp_path / "data"
    out = _parse_in_subprocess("docker", leases, data)
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == {}
    for dag_id in ("nightly_benchmark", "batch_generation"):
        placed = parsed[dag_id]
        assert "Docker" in placed["operator"]
        # Every GPU, and the host's leases: the task leases one of them inside its container.
        assert placed["devices"] == [[["gpu"], -1]]
        assert placed["mounts"] == sorted([str(data), str(leases)])
        assert placed["image"] == "roadgate-gpu-worker:test"
        assert (placed["pool"], placed["queue"]) == ("gpu", "gpu")
        assert placed["private_env"] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]   # object storage's keys


def test_docker_runner_mounts_the_hosts_checkout_for_bench_at_a_ref(airflow_env, tmp_path):
    leases, data, repo = tmp_path / "leases", tmp_path / "data", tmp_path / "checkout"
    out = _parse_in_subprocess("docker", leases, data, git_repo=repo)
    assert out.returncode == 0, out.stderr[-2000:]
    placed = json.loads(out.stdout.strip().splitlines()[-1])["nightly_benchmark"]
    assert placed["mounts"] == sorted([str(data), str(leases), str(repo)])
    assert "ROADGATE_GIT_REPO" in placed["env"]
    found = subprocess.run([sys.executable, "-c", "from jobs import git_ref; print(git_ref.default_checkout())"], cwd=REPO,
                           capture_output=True, text=True, env={**os.environ, "ROADGATE_GIT_REPO": str(repo)})
    assert found.stdout.strip() == str(repo)      # where bench --ref takes its commits from, inside


def test_an_unknown_task_runner_is_refused_by_name(airflow_env):
    out = _parse_in_subprocess("kubernetes")
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert any("ROADGATE_TASK_RUNNER must be 'local' or 'docker', got 'kubernetes'" in e
               for e in parsed["errors"].values())


def test_the_idle_loop_warning_of_dags_test_is_kept_once_a_minute(airflow_env):
    import logging

    from roadgate_common import OncePerMinute
    now = [0.0]
    quiet = OncePerMinute(clock=lambda: now[0])

    def passes(message: str, at: float) -> bool:
        now[0] = at
        return quiet.filter(logging.LogRecord("airflow.sdk.definitions.dag", logging.WARNING, "", 0, message, (), None))

    assert [passes("No tasks to run. unrunnable tasks: {preflight}", t) for t in (0, 1, 30, 59.9, 60, 61)] == [
        True, False, False, False, True, False]
    assert passes("preflight: noisy: load 1.90 busy CPUs ...", 61)   # everything else passes
    assert any(isinstance(f, OncePerMinute) for f in logging.getLogger("airflow.sdk.definitions.dag").filters)
