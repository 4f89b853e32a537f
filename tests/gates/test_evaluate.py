"""Each gate status, reached from a constructed history."""
from datetime import timedelta

import pytest
import yaml
from sqlalchemy import text

from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.store import MetricRecord, record_run, supersede_run
from tests.store_support import EPOCH, metrics, nightly

THROUGHPUT = dict(id="ROAD-TEST-TPUT", title="t", metric="output_tok_s", engine="roadgate", comparison=">=",
                  threshold=1000, workload="nano-bench", hardware="H200", max_age_days=7,
                  validity={"min_duration_s": 60, "min_samples": 200, "min_agreement": 0.95})
VS_PEER = dict(THROUGHPUT, id="ROAD-TEST-VS-PEER", threshold={"ratio": 1.1, "peer": "hf-transformers"})
TTFT = dict(THROUGHPUT, id="ROAD-TEST-TTFT", metric="ttft_p50_s", comparison="<=", threshold=0.02, validity={})
NOW = EPOCH + timedelta(days=10)


def setup_rows(store, *rows):
    sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": list(rows)}, allow_unicode=True)))


def statuses(store, now=NOW) -> dict:
    return {e.roadmap_row_id: e.status for e in evaluate_gates(store, now)}


def good_metrics(tok_s=1200.0, agreement=1.0):
    return metrics(output_tok_s=tok_s, agreement=agreement, ttft_p50_s=0.01)


@pytest.mark.parametrize("run, values, expected", [
    (nightly(9), good_metrics(), "PASS"),
    (nightly(9), good_metrics(tok_s=900.0), "GATING"),
    (nightly(1), good_metrics(), "STALE"),
    (nightly(9, preflight_status="noisy"), good_metrics(), "INVALID"),
    (nightly(9, status="failed"), good_metrics(), "INVALID"),
    (nightly(9), good_metrics(agreement=0.5), "INVALID"),
    (nightly(9, finished_at=EPOCH + timedelta(days=9, seconds=30)), good_metrics(), "INVALID"),
    (nightly(9), [MetricRecord("roadgate", "output_tok_s", 1200.0, count=50)], "INVALID"),
])
def test_each_status_from_a_constructed_history(store, run, values, expected):
    setup_rows(store, THROUGHPUT)
    record_run(store, nightly(0), good_metrics())  # an older valid run does not rescue newer evidence
    record_run(store, run, values)
    assert statuses(store) == {"ROAD-TEST-TPUT": expected}


def test_no_matching_runs_is_no_data(store):
    setup_rows(store, THROUGHPUT, TTFT)
    assert statuses(store) == {"ROAD-TEST-TPUT": "NO_DATA", "ROAD-TEST-TTFT": "NO_DATA"}
    record_run(store, nightly(9, workload="latency-b1"), good_metrics())
    record_run(store, nightly(9, hardware_class="cpu"), good_metrics())
    record_run(store, nightly(9), metrics("hf-transformers", output_tok_s=1.0))
    assert statuses(store) == {"ROAD-TEST-TPUT": "NO_DATA", "ROAD-TEST-TTFT": "NO_DATA"}


def test_lower_is_better_rows(store):
    setup_rows(store, TTFT)
    record_run(store, nightly(9), metrics(ttft_p50_s=0.03))
    assert statuses(store) == {"ROAD-TEST-TTFT": "GATING"}
    record_run(store, nightly(9, started_at=EPOCH + timedelta(days=9, hours=1)), metrics(ttft_p50_s=0.015))
    assert statuses(store) == {"ROAD-TEST-TTFT": "PASS"}


def an_hour_later():
    """A second run on the evening of nightly(9)."""
    started = EPOCH + timedelta(days=9, hours=1)
    return nightly(9, started_at=started, finished_at=started + timedelta(minutes=5))


def test_ratio_threshold_compares_to_the_peer_measured_in_the_same_run(store):
    setup_rows(store, VS_PEER)
    # A peer of another run does not count, even of the same series: it saw another host state.
    record_run(store, nightly(8), metrics("hf-transformers", output_tok_s=1500.0))
    record_run(store, nightly(9), good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=1000.0))
    (evaluation,) = evaluate_gates(store, NOW)
    assert (evaluation.status, evaluation.target, evaluation.peer_value) == ("PASS", pytest.approx(1100.0), 1000.0)
    record_run(store, an_hour_later(), good_metrics(tok_s=1200.0))
    assert statuses(store) == {"ROAD-TEST-VS-PEER": "INVALID"}   # the newest run has no peer beside ours


def test_a_peer_far_below_its_own_history_makes_the_ratio_unusable(store):
    setup_rows(store, VS_PEER)
    for day in range(5):   # the peer's usual figure, in its own series
        record_run(store, nightly(day + 3), good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=1000.0))
    # A starved peer (a busy host): ours at 1200 would be 24x it, a PASS it has not earned.
    record_run(store, nightly(9), good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=50.0))
    (evaluation,) = evaluate_gates(store, NOW)
    assert evaluation.status == "INVALID"
    assert "hf-transformers output_tok_s 50 is far off its own history (median 1000" in evaluation.reason
    # A peer within its usual range is usable again.
    record_run(store, an_hour_later(), good_metrics(tok_s=1200.0) + metrics("hf-transformers", output_tok_s=900.0))
    assert statuses(store) == {"ROAD-TEST-VS-PEER": "PASS"}


def test_ratio_threshold_without_a_peer_result_is_invalid(store):
    setup_rows(store, VS_PEER)
    record_run(store, nightly(9), good_metrics())
    assert statuses(store) == {"ROAD-TEST-VS-PEER": "INVALID"}


def test_evaluations_append_and_the_view_shows_the_newest(store):
    setup_rows(store, THROUGHPUT)
    bad = record_run(store, nightly(9), good_metrics(tok_s=900.0))
    assert statuses(store) == {"ROAD-TEST-TPUT": "GATING"}
    supersede_run(store, bad, nightly(9), good_metrics(tok_s=1300.0), reason="wrong clock")
    assert statuses(store) == {"ROAD-TEST-TPUT": "PASS"}
    with store.engine.connect() as conn:
        history = conn.execute(text("SELECT status FROM gate_evaluations ORDER BY id")).scalars().all()
        current = conn.execute(text("SELECT roadmap_row_id, status, value FROM v_roadmap_status")).all()
    assert history == ["GATING", "PASS"]
    assert [tuple(r) for r in current] == [("ROAD-TEST-TPUT", "PASS", 1300.0)]
