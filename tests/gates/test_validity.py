"""A run the bench job judged invalid is stored, and never makes a roadmap row PASS (SQLite and PostgreSQL)."""
import pytest
from sqlalchemy import select

from jobs.gates.evaluate import evaluate_gates
from jobs.store import record_run
from jobs.store.models import Run
from jobs.validity import engine_verdict, run_verdict
from jobs.workloads import get_workload
from tests.gates.test_evaluate import NOW, THROUGHPUT, VS_PEER, good_metrics, setup_rows
from tests.store_support import metrics, nightly

NANO = get_workload("nano-bench")   # validity: min_duration_s 1.0, min_requests 256, no agreement floor
CPU_SMALL = get_workload("cpu-small")  # min_duration_s 0.1, min_requests 8, min_agreement 0.75


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
    verdict = run_verdict(NANO, {"roadgate": measured(5.0, 256), "hf-transformers": measured(0.2, 256)}, "skipped")
    assert not verdict["valid"] and not verdict["quiet_host"]
    assert verdict["reasons"] == ["host not known to be quiet (preflight skipped)",
                                  "hf-transformers: ran 0.2s, shorter than the workload's minimum 1s"]
    assert verdict["engines"]["roadgate"]["valid"] and not verdict["engines"]["hf-transformers"]["valid"]
    assert run_verdict(NANO, {"roadgate": measured(5.0, 256)}, "quiet")["valid"]


def test_the_agreement_floor_holds_our_engine_and_records_a_peers_agreement():
    low = measured(1.0, 8, agreement=0.375)
    verdict = run_verdict(CPU_SMALL, {"ours": measured(1.0, 8, agreement=1.0), "llamacpp": low}, "quiet")
    assert verdict["valid"] and verdict["engines"]["llamacpp"]["measured"]["agreement"] == 0.375
    verdict = run_verdict(CPU_SMALL, {"ours": low, "hf": measured(1.0, 8)}, "quiet")
    assert verdict["reasons"] == ["ours: agreement with the reference 0.375, below the floor 0.75"]


def test_a_repeated_short_workload_counts_all_its_measured_time():
    repeated = {**measured(0.34, 256), "measured_s": {"value": 1.1, "count": 1}}
    assert engine_verdict(NANO, repeated)["valid"]
    assert engine_verdict(NANO, measured(0.34, 256))["reasons"] == ["ran 0.34s, shorter than the workload's minimum 1s"]


def statuses_and_reasons(store) -> dict:
    return {e.roadmap_row_id: (e.status, e.reason) for e in evaluate_gates(store, NOW)}


def test_an_engine_judged_invalid_is_never_evidence_for_pass(store):
    setup_rows(store, THROUGHPUT)
    # The row's own rules (5 min, 256 samples, agreement 1.0) are all met: only the job's verdict fails it.
    short = run_verdict(NANO, {"roadgate": measured(0.5, 256)}, "quiet")
    run_id = record_run(store, nightly(9, validity=short), good_metrics())
    status, reason = statuses_and_reasons(store)["ROAD-TEST-TPUT"]
    assert status == "INVALID" and "shorter than the workload's minimum 1s" in reason
    with store.session() as session:   # stored either way, with its reasons
        assert session.get(Run, run_id).validity["reasons"] == ["roadgate: ran 0.5s, shorter than the "
                                                                "workload's minimum 1s"]
    # The same evidence judged valid passes: the verdict, nothing else, made the difference.
    record_run(store, nightly(9, validity=run_verdict(NANO, {"roadgate": measured(5.0, 256)}, "quiet")),
               good_metrics())
    assert statuses_and_reasons(store)["ROAD-TEST-TPUT"][0] == "PASS"


def test_an_invalid_peer_makes_a_ratio_row_invalid(store):
    setup_rows(store, VS_PEER)
    verdict = run_verdict(NANO, {"roadgate": measured(5.0, 256), "hf-transformers": measured(5.0, 100)}, "quiet")
    record_run(store, nightly(9, validity=verdict),
               good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=1000.0))
    status, reason = statuses_and_reasons(store)["ROAD-TEST-VS-PEER"]
    assert status == "INVALID" and reason.startswith("hf-transformers measurement invalid: finished 100 requests")


def test_runs_without_a_verdict_are_judged_by_the_row_rules_alone(store):
    setup_rows(store, THROUGHPUT)
    record_run(store, nightly(9), good_metrics())   # recorded before the job judged its runs
    assert statuses_and_reasons(store)["ROAD-TEST-TPUT"][0] == "PASS"
    with store.session() as session:
        assert session.scalars(select(Run.validity)).one() is None
