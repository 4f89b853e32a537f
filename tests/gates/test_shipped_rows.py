"""The shipped roadmap's rows as written: each gates the way its metric improves, a row on a
micro-benchmark can pass at all, and the prefill and step-trace rows are judged on the runs
of their micro-benchmarks."""
from datetime import timedelta

from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import load_roadmap, sync_roadmap
from jobs.microbench import record_microbench
from jobs.registry import METRICS, MICROBENCHMARKS
from jobs.workloads import workload_names
from tests.gates.test_evaluate import NOW
from tests.gates.test_microbench import HOST


def test_micro_benchmark_names_are_not_workload_names():
    assert MICROBENCHMARKS.isdisjoint(workload_names())


def test_each_row_gates_the_way_its_metric_improves():
    for row in load_roadmap():
        assert row.comparison == (">=" if METRICS[row.metric].better == "higher" else "<="), row.id


def test_rows_on_micro_benchmarks_waive_the_quiet_host_rule():
    """A micro-benchmark run records no preflight ('skipped'): a row asking for a quiet host
    would find every one of its runs invalid."""
    for row in load_roadmap():
        if row.workload in MICROBENCHMARKS:
            assert row.validity.get("preflight_quiet") is False, row.id


def test_the_prefill_and_step_trace_rows_are_judged_on_their_micro_benchmark_runs(store):
    rows = [r for r in load_roadmap() if r.workload.startswith(("prefill-", "step-trace-"))]
    sync_roadmap(store, rows)
    at = NOW - timedelta(days=1)
    runs = {
        "prefill-1x4000": {"prefill_s": 0.0062, "ttft_p50_s": 0.0055, "prompt_tok_s": 645_000, "torch_prefill_s": 0.004},
        "prefill-1x8000": {"prefill_s": 0.015, "ttft_p50_s": 0.014, "prompt_tok_s": 533_000},
        "prefill-64x1000": {"prefill_s": 0.049, "ttft_p50_s": 0.03, "prompt_tok_s": 1_300_000},
        "step-trace-fixed-256x128x128": {"cupti_memcpy_calls_per_step": 2.0, "cupti_event_syncs_per_step": 1.0,
                                         "syncs_per_step": 0.0, "lagged_reads_per_step": 1.0,
                                         "step_gap_frac": 0.05, "gpu_idle_frac": 0.09},
    }
    for name, figures in runs.items():
        record_microbench(name, {"model": "dummy:smollm2-135m"}, figures, at, at + timedelta(seconds=8),
                          store=store, host=HOST)
    verdicts = {e.roadmap_row_id: (e.status, e.value) for e in evaluate_gates(store, NOW)}
    assert verdicts == {
        "ROAD-ENGINE-PREFILL-1X4000-TTFT-H200": ("PASS", 0.0055),
        "ROAD-ENGINE-PREFILL-1X8000-H200": ("GATING", 0.015),
        "ROAD-ENGINE-PREFILL-64X1000-1P2M-H200": ("PASS", 1_300_000),
        "ROAD-ENGINE-DECODE-STEP-GAP-H200": ("GATING", 0.05),
        "ROAD-ENGINE-DECODE-STEP-COPIES-H200": ("PASS", 2.0),
    }
