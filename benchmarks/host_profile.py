"""Where the host's time goes in our engine's step loop, per step, on one workload.

Wraps the step's phases with timers (the engine's own per-phase clocks, plus the
model runner's input building, sampling tensors and graph replay) and prints
microseconds per step. The loop is host-bound when the GPU wait is small.
Usage: python3 benchmarks/host_profile.py [--workload fixed-256x128x128] [--model dummy:smollm2-135m]
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine import LLM  # noqa: E402
from jobs.workloads import get_workload  # noqa: E402

TIMED = defaultdict(float)


def timed(obj, name: str) -> None:
    inner = getattr(obj, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TIMED[name] += time.perf_counter() - start
    setattr(obj, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="fixed-256x128x128")
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    workload = get_workload(args.workload)
    llm = LLM(args.model, backend=args.backend)
    requests = workload.requests()
    params = [workload.sampling_params(r, i) for i, r in enumerate(requests)]
    llm.generate([r.prompt for r in requests], params)          # warm-up: every graph bucket replayed once
    runner = llm.runner
    for name in ("_host_inputs", "_sampling_arrays", "_upload", "_token_ids", "_metadata", "_copy_out", "read"):
        timed(runner, name)
    if runner.graphs:
        timed(runner.graphs, "replay")
    timed(llm, "_take_tokens")
    before = llm.stats
    start = time.perf_counter()
    llm.generate([r.prompt for r in requests], params)
    wall = time.perf_counter() - start
    after = llm.stats
    steps = after["steps"] - before["steps"]
    phases = {k.removeprefix("host_").removesuffix("_s"): after[k] - before[k]
              for k in after if k.startswith("host_") and k.endswith("_s")}
    phases["  of which GPU wait"] = after["gpu_wait_s"] - before["gpu_wait_s"]
    phases.update({f"  {k}": v for k, v in TIMED.items()})
    print(f"{args.workload}: {steps} steps in {wall:.3f} s ({wall / steps * 1e6:.0f} us per step)")
    for name, seconds in phases.items():
        print(f"  {name:<28}{seconds / steps * 1e6:>10.1f} us/step")


if __name__ == "__main__":
    main()
