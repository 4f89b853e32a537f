"""Quiet throughout, end to end: `roadgate bench --preflight` and the nightly's cells and landing,
with our engine really run on cpu-small and every host reading scripted (preflight and monitor)."""
from __future__ import annotations

import functools

import pytest
from sqlalchemy import select

import jobs.bench
from jobs import nightly, preflight
from jobs.cli import main
from jobs.gates.evaluate import evaluate_gates
from jobs.host_facts import cpu_class
from jobs.store.models import Run
from tests.gates.test_evaluate import setup_rows
from tests.host_support import steady_host
from tests.store_support import db_url, pg_database, pg_url, store  # noqa: F401
from tests.test_preflight import FakeHost

pytestmark = pytest.mark.slow

# Any figure passes: these tests are about whether a run is evidence at all.
CPU_SMALL_ROW = dict(id="ROAD-TEST-CPU-SMALL", title="t", metric="output_tok_s", engine="ours", comparison=">=",
                     threshold=0.001, workload="cpu-small", hardware=cpu_class(), max_age_days=7)
RUN_ENGINE = jobs.bench.run_engine
THRESHOLDS = {name: preflight.DEFAULTS[name] for name in ("window_s", "load_threshold", "max_gpu_util",
                                                          "sample_every_s")}


def bench_on(monkeypatch, store, foreign_cpus: float) -> Run:
    """`roadgate bench --preflight` of ours on cpu-small; the preflight sees a quiet scripted host,
    the engine's run one with `foreign_cpus` busy outside the bench."""
    monkeypatch.setattr(preflight, "machine", FakeHost().inputs)
    monkeypatch.setattr(jobs.bench, "run_engine", functools.partial(RUN_ENGINE, host_inputs=steady_host(foreign_cpus)))
    assert main(["bench", "--workload", "cpu-small", "--engine", "ours", "--backend", "torch", "--preflight"]) == 0
    with store.session() as session:
        return session.scalars(select(Run).order_by(Run.started_at.desc())).first()


def test_bench_records_the_preflights_thresholds_and_the_host_during_the_run(default_store, monkeypatch,
                                                                             simulated_gpus):
    setup_rows(default_store, CPU_SMALL_ROW)
    simulated_gpus(2)
    busy = bench_on(monkeypatch, default_store, foreign_cpus=1.5)
    lease = busy.config["gpu_leases"]["ours"]   # the preflight's GPU is the one the engine ran on
    assert (lease["index"], lease["devices"], busy.preflight["gpu"]["index"]) == (0, 2, 0)
    assert busy.preflight_status == "quiet" and busy.preflight["thresholds"] == THRESHOLDS   # quiet before the run
    assert busy.validity["host"]["ours"]["samples"]                                          # busy during it
    assert busy.validity["reasons"] == busy.validity["host_reasons"] == [
        "ours: noisy during measurement (foreign CPUs mean 1.5, max 1.5, allowed 0.25)"]
    (evaluation,) = evaluate_gates(default_store)
    assert (evaluation.run_id, evaluation.status) == (busy.id, "INVALID")
    assert evaluation.reason.startswith("ours: noisy during measurement")


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> dict[str, dict]:
    """Ours on cpu-small run by the nightly's cell task: on a quiet, then on a busy scripted host (quiet
    before each cell's measurement)."""
    root = tmp_path_factory.mktemp("nightly")
    config = nightly.resolve_config({"engines": ["ours"], "workloads": ["cpu-small"]}, gpu_present=lambda: False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROADGATE_DATA_DIR", str(root))
        mp.setenv("ROADGATE_GPU_COUNT", "0")   # a host without GPUs: its one slot is leased
        return {name: nightly.run_bench_cell({"engine": "ours", "workload": "cpu-small"}, config, root / name,
                                             host_inputs=steady_host(foreign_cpus),
                                             preflight_inputs=FakeHost().inputs())
                for name, foreign_cpus in (("quiet", 0.0), ("busy", 1.5))}


def land(store, cell: dict, preflight_overrides: dict, dag_run: str) -> Run:
    """The nightly's sensor (on a host busy with 3 CPUs until t=60, then idle) and landing of one cell."""
    config = nightly.resolve_config({"engines": ["ours"], "workloads": ["cpu-small"],
                                     "preflight": preflight_overrides}, gpu_present=lambda: False)
    host = FakeHost(load=lambda t: 3.0 if t < 60 else 0.1)
    outcome = None
    while outcome is None:   # the sensor pokes until a quiet window
        outcome = nightly.wait_for_quiet_host(config, host.inputs())
        host.sleep(config.preflight["sample_every_s"])
    (run_id,) = nightly.land_bench_results([cell], config, outcome, "nightly_benchmark", dag_run, store)
    with store.session() as session:
        return session.get(Run, run_id)


def test_the_nightly_stages_the_host_during_each_cell_and_lands_it_in_the_verdict(store, staged, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    setup_rows(store, CPU_SMALL_ROW)
    quiet = land(store, staged["quiet"], {}, "quiet")
    assert quiet.preflight["thresholds"] == THRESHOLDS and quiet.validity["valid"]
    assert quiet.config["gpu_leases"]["ours"]["index"] is None
    assert {e.roadmap_row_id: e.status for e in evaluate_gates(store)} == {"ROAD-TEST-CPU-SMALL": "PASS"}

    busy = land(store, staged["busy"], {}, "busy")
    assert busy.validity["host_reasons"] == ["ours: noisy during measurement (foreign CPUs mean 1.5, max 1.5, "
                                             "allowed 0.25)"]
    assert [e.status for e in evaluate_gates(store)] == ["INVALID"]

    # The busy-machine override: the sensor is done at once, the run stored and never evidence.
    lenient = land(store, staged["quiet"], {"load_threshold": 64}, "lenient")
    assert lenient.preflight_status == "quiet" and lenient.preflight["waited_s"] < 60
    assert lenient.validity["host_reasons"] == ["lenient preflight (load_threshold 64 > default 1)"]
