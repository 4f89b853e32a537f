"""A nightly's bench cells side by side on the GPUs of one host (issue 23), on this CPU host with
simulated GPUs: the processes of the run's other cells (live holders of its group's GPU leases)
are left out of a cell's preflight load and of its foreign CPUs, and recorded apart, while any
other busy process still counts; two cells run at once on distinct GPUs, each after its own
preflight, and land what benchmarks/gpu_scaling.py --check-dag-run proves from."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_scaling import dag_run_leases, main as gpu_scaling
from jobs import nightly
from jobs.store import open_ready_store
from jobs.store.models import Run
from jobs.workloads import get_workload
from tests.conftest import REPO
from tests.host_support import steady_host
from tests.test_preflight import FakeHost
from tests.tiny_model import tiny_model  # noqa: F401 (a fixture)

GROUP = "the bench cells of nightly_benchmark__night-1"
# A process that spins on one CPU, holding a GPU lease of the group named by its argument (if any).
SPIN = """
import sys
from jobs.gpu_lease import lease

def spin():
    print("spinning", flush=True)
    while True:
        pass

if sys.argv[1]:
    with lease(timeout_s=10, group=sys.argv[1]):
        spin()
spin()
"""
# A task of the group that watches the host for 2 s, as a cell's monitor and preflight do.
WATCH = """
import functools, json, sys, time
from jobs import gpu_lease, host_monitor, preflight

siblings = functools.partial(gpu_lease.holders, sys.argv[1])
outside_siblings, every_process = host_monitor.busy_cpus_outside(siblings), preflight.busy_cpus_sampler()
with host_monitor.watch(None, every_s=0.2, siblings=siblings) as sampler:
    time.sleep(2)
print(json.dumps({"monitor": sampler.summary(), "load_outside_siblings": outside_siblings(),
                  "load": every_process()}))
"""
# One bench cell of a nightly, started when the file argv[4] appears, so that two start together.
CELL = """
import json, sys, time
from pathlib import Path
import torch  # noqa: F401 (imported before the start, as a task's start-up)
from jobs import nightly

config = nightly.NightlyConfig.from_dict(json.loads(sys.argv[1]))
print("ready", flush=True)
while not Path(sys.argv[4]).exists():
    time.sleep(0.01)
print(json.dumps(nightly.run_bench_cell(json.loads(sys.argv[2]), config, Path(sys.argv[3]))), flush=True)
"""
# Long enough a measurement for the two cells to overlap for seconds; the host is judged, not the figures.
WORKLOADS = """
workloads:
  side-a: &side
    version: 1
    prompts: {source: random_tokens, count: 16, input_len: [16, 16]}
    output_len: [32, 32]
    sampling: {temperature: 0, ignore_eos: true}
    seed: 1
    hardware: any
    validity: {min_duration_s: 3, min_requests: 16}
  side-b: *side
"""


@pytest.fixture
def simulated_host(tmp_path, monkeypatch, simulated_gpus) -> None:
    """Two simulated GPUs with a lease directory of their own, and the test workloads, for this
    process and those it starts."""
    simulated_gpus(2)
    monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path / "leases"))
    (tmp_path / "workloads.yaml").write_text(WORKLOADS)
    monkeypatch.setenv("ROADGATE_WORKLOADS_FILE", str(tmp_path / "workloads.yaml"))


@pytest.fixture
def start(simulated_host):
    """start(script, *args): a Python process of this repo's, in this one's environment, killed at the test's end."""
    started: list[subprocess.Popen] = []

    def run(script: str, *args: str) -> subprocess.Popen:
        started.append(subprocess.Popen([sys.executable, "-c", script, *args], cwd=REPO, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        return started[-1]
    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_a_siblings_cpu_is_recorded_apart_and_any_other_process_still_counts(start, tmp_path):
    sibling, other = start(SPIN, GROUP), start(SPIN, "")
    assert sibling.stdout.readline() == other.stdout.readline() == "spinning\n"
    # Lease words naming the other spinner as one of the group, with no lock held behind them.
    (tmp_path / "leases" / "gpu-1.lock").write_text(f"pid {other.pid} on this-host since 2026-12-01T02:00:00 "
                                                    f"for {GROUP}")
    watcher = start(WATCH, GROUP)
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err[-2000:]
    seen = json.loads(out)
    monitor = seen["monitor"]
    assert monitor["sibling_cpus_mean"] > 0.4
    assert monitor["foreign_cpus_mean"] > 0.4   # the other spinner, which the stale words name
    # The cell's preflight load leaves the sibling out too, and keeps the other spinner.
    assert seen["load_outside_siblings"] > 0.4 and seen["load"] - seen["load_outside_siblings"] > 0.4


def run_side_by_side(start, tmp_path: Path, config: nightly.NightlyConfig, dag_run: str,
                     while_measuring: str | None = None) -> list[Run]:
    """Two cells (ours on side-a and on side-b) of one DAG run started together, each in a
    process of its own as the scheduler runs them, `while_measuring` (a script) running beside
    them; their landing's runs."""
    staging = nightly.staging_dir("nightly_benchmark", dag_run, tmp_path / "staging")
    go = tmp_path / f"{dag_run}.go"
    cells = [start(CELL, json.dumps(config.as_dict()), json.dumps({"engine": "ours", "workload": workload}),
                   str(staging), str(go)) for workload in ("side-a", "side-b")]
    assert [c.stdout.readline() for c in cells] == ["ready\n", "ready\n"]
    if while_measuring:
        assert start(while_measuring, "").stdout.readline() == "spinning\n"
    go.touch()
    staged = []
    for cell in cells:
        out, err = cell.communicate(timeout=300)
        assert cell.returncode == 0, err[-3000:]
        staged.append(json.loads(out.splitlines()[-1]))
    run_ids = nightly.land_bench_results(staged, config, None, "nightly_benchmark", dag_run)
    with open_ready_store().session() as session:
        return [session.get(Run, run_id) for run_id in run_ids]


@pytest.fixture
def config(simulated_host, tiny_model) -> nightly.NightlyConfig:  # noqa: F811
    # The host counts as quiet before the cells whatever it does: the cells' own measurement is under test.
    return nightly.resolve_config({"engines": ["ours"], "workloads": ["side-a", "side-b"], "model": str(tiny_model),
                                   "backend": "torch", "preflight": {"window_s": 1, "sample_every_s": 0.5,
                                                                     "load_threshold": (os.cpu_count() or 1) + 1}},
                                  gpu_present=lambda: False)


@pytest.mark.slow
def test_two_cells_run_at_once_on_distinct_gpus_each_after_its_own_preflight_not_foreign_to_each_other(
        default_store, start, config, tmp_path, capsys):
    runs = run_side_by_side(start, tmp_path, config, "night-1")

    first, second = dag_run_leases("nightly_benchmark", "night-1")
    assert {first.index, second.index} == {0, 1} and first.host == second.host
    assert first.start < second.end and second.start < first.end   # held at the same time
    assert gpu_scaling(["--check-dag-run", "nightly_benchmark", "night-1"]) == 0
    assert "no two of 2 leases held one GPU at once; at most 2 held at once" in capsys.readouterr().out

    allowed = get_workload("side-a").max_foreign_cpus
    for run in runs:
        cell_preflight = run.validity["preflight"]["ours"]
        assert cell_preflight["status"] == "quiet" and cell_preflight["gpu"]["index"] == run.config["gpu_leases"][
            "ours"]["index"]
        assert cell_preflight["thresholds"] == {"window_s": 1, "sample_every_s": 0.5, "max_gpu_util": 10,
                                                "load_threshold": config.preflight["load_threshold"]}
        host = run.validity["host"]["ours"]
        # Counted as foreign, the other cell alone would have made the run noisy.
        assert host["sibling_cpus_mean"] > allowed >= host["foreign_cpus_mean"], host
        assert not any("noisy during measurement" in reason for reason in run.validity["host_reasons"])


@pytest.mark.slow
def test_a_busy_process_beside_two_cells_is_still_foreign_to_each(default_store, start, config, tmp_path):
    runs = run_side_by_side(start, tmp_path, config, "night-2", while_measuring=SPIN)
    allowed = get_workload("side-a").max_foreign_cpus
    for run in runs:
        host = run.validity["host"]["ours"]
        assert host["foreign_cpus_mean"] > allowed and host["sibling_cpus_mean"] > 0, host
        assert "ours: noisy during measurement (foreign CPUs mean" in "; ".join(run.validity["host_reasons"])


@pytest.mark.slow
def test_a_cell_whose_host_never_quiets_is_measured_and_its_run_is_no_evidence(default_store, config, tmp_path):
    busy = FakeHost(load=lambda t: 3.0)
    cell = nightly.run_bench_cell({"engine": "ours", "workload": "side-a"}, config, tmp_path / "staging",
                                  host_inputs=steady_host(), preflight_inputs=busy.inputs())
    assert busy.t == 600   # it waited preflight.DEFAULTS' timeout for a quiet window, then measured
    [run_id] = nightly.land_bench_results([cell], config, None, "nightly_benchmark", "night-3")
    with default_store.session() as session:
        run = session.get(Run, run_id)
    assert run.validity["preflight"]["ours"]["status"] == "noisy"
    assert "ours: host not quiet before its measurement (preflight noisy: never quiet for 1s within 600s)" in \
        run.validity["host_reasons"]
    assert not run.validity["valid"] and run.config["gpu_leases"]["ours"]["index"] == 0
