"""benchmarks/prefill.py's timeline of a traced repetition, on synthetic chrome-trace events:
host time before the first GPU work and after the last, the GPU's busy time and its gaps."""
from __future__ import annotations

import pytest

from benchmarks.prefill import REPETITION_LABEL, timeline


def gpu(name: str, start: float, end: float, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": end - start}


def repetition(start: float, end: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": REPETITION_LABEL, "ts": start, "dur": end - start}


def test_the_range_splits_into_host_before_gpu_span_and_host_after_and_gaps_are_ranked():
    events = [repetition(100, 400),
              gpu("upload", 150, 152, "gpu_memcpy"),
              gpu("embed", 160, 170), gpu("norm", 165, 175),        # overlapping: busy counts once
              gpu("attn", 200, 260), gpu("gemm", 262, 300),
              gpu("sample", 330, 340), gpu("copy_out", 340, 341, "gpu_memcpy"),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 120, "dur": 5},
              gpu("earlier", 10, 20)]                                  # before the range: left out
    t = timeline(events)
    assert t.before_us == 50 and t.after_us == 59
    assert t.span_us == 191
    assert t.busy_us == 2 + 15 + 60 + 38 + 10 + 1
    assert t.span_us - t.busy_us == sum(g[0] for g in t.gaps)
    assert t.gaps[0] == (30, 150, "gemm", "sample")
    assert t.gaps[1] == (25, 25, "norm", "attn")
    assert [g[0] for g in t.gaps] == sorted((g[0] for g in t.gaps), reverse=True)


@pytest.mark.parametrize("events, problem", [
    ([gpu("k", 0, 1)], "0 ranges"),
    ([repetition(0, 10), repetition(20, 30), gpu("k", 0, 1)], "2 ranges"),
    ([repetition(0, 10), gpu("k", 20, 30)], "no GPU work"),
])
def test_a_trace_without_exactly_one_range_or_any_gpu_work_in_it_is_refused(events, problem):
    with pytest.raises(ValueError, match=problem):
        timeline(events)
