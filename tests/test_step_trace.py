"""benchmarks/step_trace.py's reading of a trace, on synthetic chrome-trace events: which API
calls each decode step made, which GPU work each step launched, and the GPU's idle time."""
from __future__ import annotations

import pytest

from benchmarks.step_trace import (COUNTED_METRICS, MICROBENCHMARK, STEP_LABEL, api_name, calls_by_step,
                                   counted_totals, gpu_work_by_step, idle_shares, step_figures, step_windows)
from jobs.registry import METRICS, MICROBENCHMARKS


def step(ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": STEP_LABEL, "ts": ts, "dur": dur}


def call(name: str, ts: float, correlation: int | None = None, cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 1,
            "args": {} if correlation is None else {"correlation": correlation}}


def gpu(start: float, end: float, correlation: int, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": "k", "ts": start, "dur": end - start, "args": {"correlation": correlation}}


def decode_step(host_start: float, first: int, copy_in: tuple, kernels: list[tuple], copy_out: tuple) -> list[dict]:
    """One engine step as the trace shows it: its range, the upload, the graph launch, the copy
    of its tokens, the wait for the previous step's tokens and the caching allocator's poll;
    on the GPU the two copies and the graph's kernels (all under the launch's correlation id)."""
    return [step(host_start, 100),
            call("cudaMemcpyAsync", host_start + 10, first), call("cudaGraphLaunch_v10000", host_start + 20, first + 1),
            call("cudaMemcpyAsync", host_start + 30, first + 2), call("cudaEventRecord", host_start + 35),
            call("cudaEventSynchronize", host_start + 40), call("cudaEventQuery", host_start + 50),
            gpu(*copy_in, first, "gpu_memcpy"), *(gpu(*k, first + 1) for k in kernels),
            gpu(*copy_out, first + 2, "gpu_memcpy")]


def trace() -> list[dict]:
    events = (decode_step(0, 1, (15, 17), [(20, 60), (61, 80)], (81, 82))
              + decode_step(100, 11, (120, 122), [(125, 170), (125, 130), (172, 190)], (191, 192))
              + decode_step(200, 21, (200, 202), [(202, 250), (250, 280)], (280, 281)))
    return events + [
        call("cuLaunchKernel", 260, 31, cat="cuda_driver"),            # a PyCUDA launch in the last step
        call("cudaDeviceSynchronize", 305),                            # after the last step: not a step's
        call("cudaStreamSynchronize", -5),                             # before the first
        gpu(0, 14, 999),                                               # launched before the trace began
    ]


def test_each_call_belongs_to_the_step_it_starts_in_and_calls_outside_every_step_count_for_none():
    events = trace()
    windows = step_windows(events)
    assert windows == [(0, 100), (100, 200), (200, 300)]
    counts = calls_by_step(events, windows)
    assert [c["cudaGraphLaunch"] for c in counts] == [1, 1, 1]
    assert counts[2]["cuLaunchKernel"] == 1 and counts[0]["cuLaunchKernel"] == 0
    assert not any(c["cudaDeviceSynchronize"] or c["cudaStreamSynchronize"] for c in counts)
    assert counted_totals(counts) == {"cupti_event_syncs_per_step": 3, "cupti_event_queries_per_step": 3,
                                      "cupti_stream_syncs_per_step": 0, "cupti_device_syncs_per_step": 0,
                                      "cupti_memcpy_calls_per_step": 6}
    assert set(counted_totals(counts)) == set(COUNTED_METRICS)


def test_version_suffixes_are_dropped_from_api_names():
    assert api_name({"name": "cudaGraphLaunch_v10000"}) == "cudaGraphLaunch"
    assert api_name({"name": "cudaMemcpy2DAsync_v3020"}) == "cudaMemcpy2DAsync"
    assert api_name({"name": "cudaMemcpyAsync"}) == "cudaMemcpyAsync"


def test_gpu_work_goes_to_the_step_whose_call_launched_it():
    events = trace()
    work = gpu_work_by_step(events, step_windows(events))
    assert work[0] == [(15, 17), (20, 60), (61, 80), (81, 82)]   # not the kernel launched before the trace
    assert sorted(work[1]) == [(120, 122), (125, 130), (125, 170), (172, 190), (191, 192)]
    assert max(e for _, e in work[2]) == 281


def test_idle_between_steps_and_in_all_are_shares_of_the_span_of_the_steps_gpu_work():
    events = trace()
    between, idle = idle_shares(gpu_work_by_step(events, step_windows(events)))
    span = 281 - 15
    assert between == pytest.approx(((120 - 82) + (200 - 192)) / span)
    # Busy: the union of the intervals (the kernel on a second stream inside another adds nothing).
    busy = (2 + 40 + 19 + 1) + (2 + 45 + 18 + 1) + (2 + 48 + 30 + 1)
    assert idle == pytest.approx(1 - busy / span)


def test_steps_that_overlap_on_the_gpu_leave_no_gap_and_an_idle_gpu_shows_all_idle():
    # The second step's work starts before the first's ends (another stream): no gap, no idle.
    assert idle_shares([[(0, 10)], [(5, 20)], [(20, 30)]]) == (0.0, 0.0)
    # A step without GPU work is passed over; the gap runs from the last work before it.
    between, idle = idle_shares([[(0, 10)], [], [(90, 100)]])
    assert between == pytest.approx(0.8) and idle == pytest.approx(0.8)


def test_fewer_than_two_steps_with_gpu_work_is_refused_with_one_line():
    with pytest.raises(ValueError, match="1 of the 3 traced steps ran work on the GPU"):
        idle_shares([[(0, 10)], [], []])


def test_the_recorded_figures_are_means_per_step_under_registered_names():
    events = trace()
    counts = calls_by_step(events, step_windows(events))
    figures = step_figures(counts, syncs=0, lagged_reads=3, between=0.17, idle=0.21)
    assert figures["cupti_memcpy_calls_per_step"] == 2.0
    assert figures["cupti_event_syncs_per_step"] == figures["lagged_reads_per_step"] == 1.0
    assert (figures["syncs_per_step"], figures["step_gap_frac"], figures["gpu_idle_frac"]) == (0.0, 0.17, 0.21)
    # The results store refuses a name it does not know, after the GPU run: checked here instead.
    assert set(figures) <= set(METRICS) and MICROBENCHMARK in MICROBENCHMARKS
