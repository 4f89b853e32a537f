"""A run the bench job judged invalid is stored, and never makes a roadmap row PASS (SQLite and PostgreSQL)."""
import dataclasses

import pytest
from sqlalchemy import select

from jobs import preflight
from jobs.errors import WorkloadError
from jobs.gates.evaluate import evaluate_gates
from jobs.preflight import GpuState
from jobs.store import record_run
from jobs.store.models import Run
from jobs.validity import engine_verdict, lenient_preflight, run_verdict
from jobs.workloads import get_workload, load_workloads
from tests.gates.test_evaluate import NOW, THROUGHPUT, VS_PEER, good_metrics, setup_rows
from tests.host_support import watched
from tests.store_support import metrics, nightly
from tests.test_preflight import FakeHost

NANO = get_workload("nano-bench")   # validity: min_duration_s 1.0, min_requests 256, no agreement floor
CPU_SMALL = get_workload("cpu-small")  # min_duration_s 0.1, min_requests 8, min_agreement 0.75
QUIET = watched()   # what the monitor records of a measurement on an idle host
# A throughput row that does not ask for a quiet host, as agreement and micro-benchmark rows do not.
ANY_HOST = dict(THROUGHPUT, id="ROAD-TEST-TPUT-ANY-HOST", validity={"preflight_quiet": False})


def verdict_of(workload, metrics_by_engine: dict, preflight_status: str = "quiet", *,
            thresholds: dict | None = preflight.DEFAULTS, host: dict | None = None) -> dict:
    """run_verdict after a preflight at `thresholds`, each engine measured on the host `host`
    gives it (default: a quiet one)."""
    return run_verdict(workload, metrics_by_engine, preflight_status, preflight_thresholds=thresholds,
                       host_by_engine={engine: (host or {}).get(engine, QUIET) for engine in metrics_by_engine})


def measured(wall_s: float, requests: int, agreement: float | None = None) -> dict:
    m = {"wall_s": {"value": wall_s, "count": 1}, "requests_s": {"value": requests / wall_s, "count": requests}}
    if agreement is not None:
        m["agreement"] = {"value": agreement, "count": requests}
    return m


@pytest.mark.parametrize("workload, engine_metrics, reason", [
    (NANO, measured(0.5, 256), "ran 0.5s, shorter than the workload's minimum 1s"),
    (NANO, measured(5.0, 255), "finished 255 requests, fewer than the workload's minimum 256"),
    (CPU_SMALL, measured(1.0, 8, agreement=0.5), "agreement with the reference 0.5, below the floor 0.75"),
])
def test_each_workload_rule_fails_a_measurement_on_its_own(workload, engine_metrics, reason):
    verdict = engine_verdict(workload, engine_metrics)
    assert (verdict["valid"], verdict["reasons"]) == (False, [reason])


def test_a_measurement_that_meets_every_rule_is_valid_and_unmeasured_agreement_is_no_failure():
    assert engine_verdict(CPU_SMALL, measured(1.0, 8, agreement=0.75)) == {
        "valid": True, "reasons": [], "measured": {"duration_s": 1.0, "requests": 8, "agreement": 0.75,
                                                  "prefix_cache_hit_tokens": 0}}
    assert engine_verdict(CPU_SMALL, measured(1.0, 8))["valid"]      # the reference engine has no agreement


def test_the_run_verdict_needs_a_quiet_host_and_names_the_failing_engine():
    judged = verdict_of(NANO, {"roadgate": measured(5.0, 256), "hf-transformers": measured(0.2, 256)}, "skipped",
                     thresholds=None)
    assert not judged["valid"] and not judged["quiet_host"]
    assert judged["reasons"] == ["host not known to be quiet (preflight skipped)",
                                 "hf-transformers: ran 0.2s, shorter than the workload's minimum 1s"]
    assert judged["engines"]["roadgate"]["valid"] and not judged["engines"]["hf-transformers"]["valid"]
    assert verdict_of(NANO, {"roadgate": measured(5.0, 256)})["valid"]


def test_the_agreement_floor_holds_our_engine_and_records_a_peers_agreement():
    low = measured(1.0, 8, agreement=0.375)
    judged = verdict_of(CPU_SMALL, {"ours": measured(1.0, 8, agreement=1.0), "llamacpp": low})
    assert judged["valid"] and judged["engines"]["llamacpp"]["measured"]["agreement"] == 0.375
    judged = verdict_of(CPU_SMALL, {"ours": low, "hf": measured(1.0, 8)})
    assert judged["reasons"] == ["ours: agreement with the reference 0.375, below the floor 0.75"]


def test_a_repeated_short_workload_counts_all_its_measured_time():
    repeated = {**measured(0.34, 256), "measured_s": {"value": 1.1, "count": 1}}
    assert engine_verdict(NANO, repeated)["valid"]
    assert engine_verdict(NANO, measured(0.34, 256))["reasons"] == ["ran 0.34s, shorter than the workload's minimum 1s"]


def statuses_and_reasons(store) -> dict:
    return {e.roadmap_row_id: (e.status, e.reason) for e in evaluate_gates(store, NOW)}


def test_an_engine_judged_invalid_is_never_evidence_for_pass(store):
    setup_rows(store, THROUGHPUT)
    # The row's own rules (5 min, 256 samples, agreement 1.0) are all met: only the job's verdict fails it.
    short = verdict_of(NANO, {"roadgate": measured(0.5, 256)})
    run_id = record_run(store, nightly(9, validity=short), good_metrics())
    status, reason = statuses_and_reasons(store)["ROAD-TEST-TPUT"]
    assert status == "INVALID" and "shorter than the workload's minimum 1s" in reason
    with store.session() as session:   # stored either way, with its reasons
        assert session.get(Run, run_id).validity["reasons"] == ["roadgate: ran 0.5s, shorter than the "
                                                                "workload's minimum 1s"]
    # The same evidence judged valid passes: the verdict, nothing else, made the difference.
    record_run(store, nightly(9, validity=verdict_of(NANO, {"roadgate": measured(5.0, 256)})),
               good_metrics())
    assert statuses_and_reasons(store)["ROAD-TEST-TPUT"][0] == "PASS"


def test_an_invalid_peer_makes_a_ratio_row_invalid(store):
    setup_rows(store, VS_PEER)
    judged = verdict_of(NANO, {"roadgate": measured(5.0, 256), "hf-transformers": measured(5.0, 100)})
    record_run(store, nightly(9, validity=judged),
               good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=1000.0))
    status, reason = statuses_and_reasons(store)["ROAD-TEST-VS-PEER"]
    assert status == "INVALID" and reason.startswith("hf-transformers measurement invalid: finished 100 requests")


def test_runs_without_a_verdict_are_judged_by_the_row_rules_alone(store):
    setup_rows(store, THROUGHPUT)
    record_run(store, nightly(9), good_metrics())   # recorded before the job judged its runs
    assert statuses_and_reasons(store)["ROAD-TEST-TPUT"][0] == "PASS"
    with store.session() as session:
        assert session.scalars(select(Run.validity)).one() is None


# ---------------------------------------------------------------- quiet throughout

def test_contention_while_an_engine_is_measured_makes_the_run_invalid():
    engines = {"ours": measured(1.0, 8, agreement=1.0), "hf": measured(1.0, 8)}
    judged = verdict_of(CPU_SMALL, engines, host={"hf": watched(foreign_cpus=1.0)})
    reason = "hf: noisy during measurement (foreign CPUs mean 1, max 1, allowed 0.25)"
    assert not judged["valid"] and judged["reasons"] == judged["host_reasons"] == [reason]
    assert judged["quiet_host"] and judged["engines"]["hf"]["valid"]   # quiet before, and hf's own rules met
    assert judged["host"]["hf"]["samples"] and judged["rules"]["max_foreign_cpus"] == 0.25
    # Below the workload's threshold the host counts as quiet; a workload may allow more.
    assert verdict_of(CPU_SMALL, engines, host={"hf": watched(foreign_cpus=0.2)})["valid"]
    assert verdict_of(dataclasses.replace(CPU_SMALL, max_foreign_cpus=1.5), engines,
                      host={"hf": watched(foreign_cpus=1.0)})["valid"]


def test_a_foreign_gpu_process_or_an_unwatched_engine_is_no_quiet_host():
    foreign = watched(gpu=GpuState(pids=[4242], utilization_pct=60.0))
    judged = verdict_of(NANO, {"roadgate": measured(5.0, 256)}, host={"roadgate": foreign})
    assert judged["reasons"] == ["roadgate: noisy during measurement (foreign CPUs mean 0, max 0, allowed 0.25; "
                                 "foreign GPU processes [4242])"]
    unwatched = run_verdict(NANO, {"roadgate": measured(5.0, 256)}, "quiet", preflight_thresholds=preflight.DEFAULTS)
    assert unwatched["reasons"] == ["roadgate: host not monitored during measurement"]


@pytest.mark.parametrize("thresholds, reason", [
    (preflight.DEFAULTS, None),
    ({**preflight.DEFAULTS, "load_threshold": 0.5, "window_s": 60, "sample_every_s": 1}, None),   # stricter
    ({**preflight.DEFAULTS, "load_threshold": 64}, "lenient preflight (load_threshold 64 > default 1)"),
    ({**preflight.DEFAULTS, "window_s": 0, "max_gpu_util": 50},
     "lenient preflight (max_gpu_util 50 > default 10, window_s 0 < default 30)"),
    ({**preflight.DEFAULTS, "sample_every_s": 60}, "lenient preflight (sample_every_s 60 > default 5)"),
    ({}, "lenient preflight (its thresholds were not recorded)"),
])
def test_a_preflight_looser_than_its_defaults_is_lenient(thresholds, reason):
    assert lenient_preflight(thresholds) == reason


def test_the_workloads_foreign_cpu_threshold_is_optional_and_checked(tmp_path):
    spec = tmp_path / "workloads.yaml"
    body = ("workloads:\n  w:\n    version: 1\n    prompts: {source: random_tokens, count: 2, input_len: [2, 5]}\n"
            "    output_len: [4, 4]\n    sampling: {temperature: 0, ignore_eos: true}\n    seed: 1\n"
            "    hardware: cpu\n    validity: {min_duration_s: 0.1, min_requests: 2%s}\n")
    spec.write_text(body % "")
    assert load_workloads(spec)["w"].max_foreign_cpus == 0.25
    spec.write_text(body % ", max_foreign_cpus: 1")
    assert load_workloads(spec)["w"].max_foreign_cpus == 1.0
    spec.write_text(body % ", max_foreign_cpus: -1")
    with pytest.raises(WorkloadError, match="field 'validity.max_foreign_cpus' must be a number >= 0, got -1"):
        load_workloads(spec)


def preflight_at(load_threshold: float) -> preflight.PreflightOutcome:
    """A preflight on a scripted host busy with 3 CPUs, at `load_threshold` and the other defaults."""
    return preflight.check(**{**preflight.DEFAULTS, "load_threshold": load_threshold},
                           inputs=FakeHost(load=lambda t: 3.0).inputs())


def test_a_lenient_preflight_is_stored_and_never_evidence_for_pass(store):
    setup_rows(store, THROUGHPUT, ANY_HOST)
    # The documented busy-machine override: on a host busy with 3 CPUs, a threshold of 64 reads as quiet.
    lenient = preflight_at(64)
    assert lenient.status == "quiet" and lenient.as_dict()["thresholds"]["load_threshold"] == 64
    judged = verdict_of(NANO, {"roadgate": measured(5.0, 256)}, lenient.record_status, thresholds=lenient.thresholds)
    run_id = record_run(store, nightly(9, preflight_status=lenient.record_status, preflight=lenient.as_dict(),
                                       validity=judged), good_metrics())
    evaluated = statuses_and_reasons(store)
    assert evaluated["ROAD-TEST-TPUT"] == ("INVALID", "lenient preflight (load_threshold 64 > default 1)")
    assert evaluated["ROAD-TEST-TPUT-ANY-HOST"][0] == "PASS"   # a row that needs no quiet host still reads it
    with store.session() as session:   # stored, with the threshold it was judged with
        assert session.get(Run, run_id).preflight["thresholds"]["load_threshold"] == 64
    # The same figures at the default threshold: that preflight never sees a quiet host.
    assert preflight_at(preflight.DEFAULTS["load_threshold"]).status == "noisy"


def test_noise_during_measurement_is_never_evidence_for_pass(store):
    setup_rows(store, THROUGHPUT, ANY_HOST)
    noisy = verdict_of(NANO, {"roadgate": measured(5.0, 256)}, host={"roadgate": watched(foreign_cpus=1.9)})
    record_run(store, nightly(9, validity=noisy), good_metrics())
    evaluated = statuses_and_reasons(store)
    assert evaluated["ROAD-TEST-TPUT"] == ("INVALID", "roadgate: noisy during measurement (foreign CPUs mean 1.9, "
                                                      "max 1.9, allowed 0.25)")
    assert evaluated["ROAD-TEST-TPUT-ANY-HOST"][0] == "PASS"
    # Quiet throughout, the same evidence passes.
    record_run(store, nightly(9, validity=verdict_of(NANO, {"roadgate": measured(5.0, 256)})), good_metrics())
    assert statuses_and_reasons(store)["ROAD-TEST-TPUT"][0] == "PASS"
