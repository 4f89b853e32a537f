"""Decode steps of our engine counted through CUPTI, beside the engine's own count.

Our engine (cuda backend, dummy weights by default) runs fixed-256x128x128: warmed up on the
workload's shapes, its 256 requests are prefilled and a few decode steps taken, then --steps
decode steps at batch 256 run under torch.profiler with CPU and CUDA activities (CUPTI records
the CUDA runtime API calls, the driver API's kernel launches, and every kernel and copy on the
GPU), each step inside a record_function range. Per decode step it reports:

* the runtime API calls that wait for the device, poll it or copy (cudaEventSynchronize,
  cudaEventQuery, cudaStreamSynchronize, cudaDeviceSynchronize, cudaMemcpy*), counted from the
  trace: a call belongs to the step whose range it starts in (the driver API, which the trace
  has only for launches, is the engine's PyCUDA: it launches, and waits only in cuda_debug mode);
* the engine's own count of its waits in the same steps (runner.syncs: syncs, with nothing
  queued behind the wait, and lagged reads, with the next step queued); every wait is one
  cudaEventSynchronize, so their sum should equal the traced count;
* the GPU's idle time from the trace's kernel and copy intervals, each given to the step whose
  API call launched it (CUPTI's correlation id): between consecutive steps, and in all, as
  shares of the span from the first step's first GPU work to the last step's last. Tracing
  slows the host's calls, so the idle figures err high, never low.

Figures go to the results store as micro-benchmark `step-trace-fixed-256x128x128` unless --no-store.
Usage: python3 benchmarks/step_trace.py [--model dummy:smollm2-135m] [--steps 64] [--trace FILE.json] [--no-store]
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine import LLM  # noqa: E402
from jobs.engines import warmup_prompts  # noqa: E402
from jobs.store.models import utcnow  # noqa: E402
from jobs.workloads import get_workload  # noqa: E402

WORKLOAD = "fixed-256x128x128"
MICROBENCHMARK = f"step-trace-{WORKLOAD}"
STEP_LABEL = "roadgate-decode-step"
SETTLE_STEPS = 4          # decode steps after the prefill and before the trace: the loop in its steady state
API_CATEGORIES = ("cuda_runtime", "cuda_driver")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# The waits and polls counted, by metric; copies are every cudaMemcpy* call (cudaMemcpyAsync...).
SYNC_CALLS = {"cudaEventSynchronize": "cupti_event_syncs_per_step", "cudaEventQuery": "cupti_event_queries_per_step",
              "cudaStreamSynchronize": "cupti_stream_syncs_per_step",
              "cudaDeviceSynchronize": "cupti_device_syncs_per_step"}
MEMCPY_PREFIX, MEMCPY_METRIC = "cudaMemcpy", "cupti_memcpy_calls_per_step"
COUNTED_METRICS = (*SYNC_CALLS.values(), MEMCPY_METRIC)


def api_name(event: dict) -> str:
    """A CUDA API call's name without the version suffix CUPTI gives some (cudaGraphLaunch_v10000)."""
    return re.sub(r"_v\d+$", "", event["name"])


def counted_metric(name: str) -> str | None:
    """The per-step metric an API call counts toward, if any."""
    return MEMCPY_METRIC if name.startswith(MEMCPY_PREFIX) else SYNC_CALLS.get(name)


def step_windows(events: list[dict], label: str = STEP_LABEL) -> list[tuple[float, float]]:
    """The host's time ranges (start, end) of the traced steps, in order."""
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == label)


def _api_calls_by_step(events: list[dict], windows: list[tuple[float, float]]):
    """(step index, event) for each API call that starts inside a step's range."""
    starts = [start for start, _ in windows]
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in API_CATEGORIES:
            step = bisect.bisect_right(starts, e["ts"]) - 1
            if step >= 0 and e["ts"] <= windows[step][1]:
                yield step, e


def calls_by_step(events: list[dict], windows: list[tuple[float, float]]) -> list[Counter]:
    """Each step's CUDA API calls by name."""
    counts = [Counter() for _ in windows]
    for step, e in _api_calls_by_step(events, windows):
        counts[step][api_name(e)] += 1
    return counts


def counted_totals(counts: list[Counter]) -> dict[str, int]:
    """The calls of each counted metric over all the steps (0 where no step made one)."""
    totals = dict.fromkeys(COUNTED_METRICS, 0)
    for step in counts:
        for name, n in step.items():
            metric = counted_metric(name)
            if metric:
                totals[metric] += n
    return totals


def step_figures(counts: list[Counter], syncs: int, lagged_reads: int, between: float, idle: float) -> dict[str, float]:
    """What a run records: per step, the counted calls and the engine's own waits; the idle shares."""
    totals = counted_totals(counts) | {"syncs_per_step": syncs, "lagged_reads_per_step": lagged_reads}
    return {metric: n / len(counts) for metric, n in totals.items()} | {"step_gap_frac": between, "gpu_idle_frac": idle}


def gpu_work_by_step(events: list[dict], windows: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Each step's GPU intervals (kernels, copies, memsets): those launched by an API call of the
    step (the same CUPTI correlation id; a graph launch's kernels share the launch's)."""
    step_of_call = {e["args"]["correlation"]: step for step, e in _api_calls_by_step(events, windows)
                    if "correlation" in e.get("args", {})}
    work: list[list[tuple[float, float]]] = [[] for _ in windows]
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES:
            step = step_of_call.get(e.get("args", {}).get("correlation"))
            if step is not None:
                work[step].append((e["ts"], e["ts"] + e["dur"]))
    return work


def idle_shares(work: list[list[tuple[float, float]]]) -> tuple[float, float]:
    """(GPU idle between consecutive steps, GPU idle in all), as shares of the span from the
    first GPU work of the steps to their last. A step's gap is from the end of all earlier
    steps' work to the start of its own; steps without GPU work are passed over."""
    spans = [(min(s for s, _ in w), max(e for _, e in w)) for w in work if w]
    if len(spans) < 2:
        raise ValueError(f"{len(spans)} of the {len(work)} traced steps ran work on the GPU: "
                         "no gaps between steps to measure")
    begin, end = min(s for s, _ in spans), max(e for _, e in spans)
    between, done = 0.0, spans[0][1]
    for start, finish in spans[1:]:
        between += max(0.0, start - done)
        done = max(done, finish)
    busy, covered = 0.0, begin
    for start, finish in sorted(interval for w in work for interval in w):
        if finish > covered:
            busy += finish - max(start, covered)
            covered = finish
    return between / (end - begin), 1 - busy / (end - begin)


def traced_events(prof: profile, keep: Path | None) -> list[dict]:
    """The profile's chrome-trace events (kept at `keep` if given)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = keep or Path(scratch) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())["traceEvents"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--steps", type=int, default=64, help="decode steps traced")
    ap.add_argument("--trace", type=Path, help="also keep the chrome trace in this file (Perfetto opens it)")
    ap.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error(f"--steps must be at least 2 (gaps between steps are measured), got {args.steps}")
    started = utcnow()
    workload = get_workload(WORKLOAD)
    llm = LLM(args.model, backend="cuda", max_num_seqs=workload.count)
    requests = workload.requests()
    prompts = [r.prompt for r in requests]
    params = [workload.sampling_params(r, i) for i, r in enumerate(requests)]
    llm.generate(warmup_prompts(prompts), params)      # compiles, captures the graphs, sizes the allocator
    seqs = [llm.add_request(p, sp) for p, sp in zip(prompts, params)]
    while min(s.num_output_tokens for s in seqs) < 1:  # every prefill done and its token read
        llm.step()
    for _ in range(SETTLE_STEPS):
        llm.step()
    room = min(s.max_num_tokens - s.num_tokens for s in seqs)
    if room < args.steps:
        sys.exit(f"step_trace: every request decodes for only {room} more steps after its prefill and "
                 f"{SETTLE_STEPS} settling steps; ask --steps {room} or fewer")

    before = llm.stats
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            with record_function(STEP_LABEL):
                llm.step()
        torch.cuda.synchronize()   # the last step's GPU work completes inside the trace
    after = llm.stats
    events = traced_events(prof, args.trace)

    windows = step_windows(events)
    if len(windows) != args.steps:
        sys.exit(f"step_trace: the trace holds {len(windows)} step ranges for {args.steps} steps traced")
    counts = calls_by_step(events, windows)
    if not any(counts):
        sys.exit("step_trace: the trace has no CUDA API call inside the steps (is CUPTI available?)")
    try:
        between, idle = idle_shares(gpu_work_by_step(events, windows))
    except ValueError as e:
        sys.exit(f"step_trace: {e}")
    syncs, lagged_reads = (after[key] - before[key] for key in ("host_syncs", "lagged_reads"))
    figures = step_figures(counts, syncs, lagged_reads, between, idle)

    step_ms = (windows[-1][1] - windows[0][0]) / args.steps / 1e3
    print(f"{args.steps} decode steps at batch {workload.count} ({WORKLOAD}, {args.model}), traced: "
          f"{step_ms:.3f} ms a step on the host under the trace")
    print("per step, counted by CUPTI: " + ", ".join(f"{m} {figures[m]:.2f}" for m in COUNTED_METRICS))
    traced_waits = round(figures["cupti_event_syncs_per_step"] * args.steps)
    print(f"per step, the engine's own count: {(syncs + lagged_reads) / args.steps:.2f} waits (syncs "
          f"{figures['syncs_per_step']:.2f}, lagged reads {figures['lagged_reads_per_step']:.2f})"
          + ("" if syncs + lagged_reads == traced_waits else
             f"; but CUPTI counted {traced_waits} cudaEventSynchronize calls to its {syncs + lagged_reads} waits"))
    print(f"GPU idle: {100 * figures['step_gap_frac']:.2f}% of the span between steps, "
          f"{100 * figures['gpu_idle_frac']:.2f}% in all")
    every_call = sum(counts, Counter())
    print("every CUDA API call, per step: " + ", ".join(f"{name} {n / args.steps:.2f}"
                                                      for name, n in every_call.most_common()))
    if not args.no_store:
        from jobs.microbench import record_microbench
        config = {"model": args.model, "workload": WORKLOAD, "workload_version": workload.version,
                  "steps": args.steps, "settle_steps": SETTLE_STEPS, "dtype": str(llm.dtype).removeprefix("torch."),
                  "max_num_seqs": llm.config.max_num_seqs}
        run_id = record_microbench(MICROBENCHMARK, config, figures, started, utcnow())
        print(f"recorded run {run_id}")


if __name__ == "__main__":
    main()
