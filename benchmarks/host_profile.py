"""Where the host's time goes in our engine's step loop, per step, on one workload.

Wraps the step's phases with timers (the engine's own per-phase clocks, plus the
model runner's input building, sampling tensors and graph replay) and prints
microseconds per step. The loop is host-bound when the GPU wait is small.
Usage: python3 benchmarks/host_profile.py [--workload fixed-256x128x128] [--model dummy:smollm2-135m]

--host-only replaces the forward pass and the sampler with stubs (hidden states and
logits of zeros, so every token is 0), uploads each step's inputs into the CUDA graphs'
static buffer and replays a stub of the decode graphs (the pending-token gather, token 0
sampled), so decode steps take the GPU engine's host path; it reports only full-batch
decode steps (medians over --reps rounds): the host's own cost of a steady-state decode
step, measurable on a CPU host (without the CUDA calls' own cost: the upload's and the
tokens' copies, the events, the graph launch), e.g.
  python3 benchmarks/host_profile.py --host-only --backend torch [--max-num-seqs 64]

--prefill BATCHxTOKENS ... runs benchmarks/prefill.py's repetitions (fresh random prompts of
token ids, `generate(max_tokens=1)`, the prefix cache emptied before each) on the same stubs
and prints the host's milliseconds per repetition by phase, medians of --reps; `requests`
is the rest of generate's wall clock (validating and adding the prompts, the outputs), e.g.
  python3 benchmarks/host_profile.py --prefill 1x4000 1x8000 64x1000 --backend torch
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.prefill import parse_shape, random_prompts  # noqa: E402
from engine import LLM, SamplingParams  # noqa: E402
from engine.cuda_graphs import DecodeBuckets  # noqa: E402
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
    ap.add_argument("--host-only", action="store_true", help="stub the model; time full-batch decode steps")
    ap.add_argument("--max-num-seqs", type=int, default=256, help="the full batch of --host-only")
    ap.add_argument("--prefill", nargs="+", type=parse_shape, metavar="BATCHxTOKENS",
                    help="stub the model; time prefill repetitions of these shapes")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each --prefill shape; rounds of --host-only")
    args = ap.parse_args()
    if args.prefill:
        # As benchmarks/prefill.py's engine, with KV room for the largest batch at once.
        longest = max(n for _, n in args.prefill)
        room = max(b * (n + 16) for b, n in args.prefill)
        return host_prefill(LLM(args.model, backend=args.backend, dtype="bfloat16", max_model_len=longest + 16,
                                kv_cache_tokens=room), args.prefill, args.reps)
    workload = get_workload(args.workload)
    if args.host_only:
        # Room in the KV cache for every request at once: a full batch, never a preemption.
        room = workload.count * (workload.input_len[1] + workload.output_len[1] + 16)
        return host_only(LLM(args.model, backend=args.backend, dtype="bfloat16", kv_cache_tokens=room,
                             max_num_seqs=args.max_num_seqs), workload, args.reps)
    llm = LLM(args.model, backend=args.backend)
    requests = workload.requests()
    params = [workload.sampling_params(r, i) for i, r in enumerate(requests)]
    llm.generate([r.prompt for r in requests], params)          # warm-up: every graph bucket replayed once
    runner = llm.runner
    for name in ("_step_inputs", "_sampling_arrays", "_token_ids", "_metadata", "_copy_out", "read"):
        timed(runner, name)
    timed(runner.inputs, "upload")
    for name in ("apply", "record_tokens"):
        timed(runner.input_batch, name)
    if runner.graphs:
        timed(runner.graphs, "replay")
    timed(llm.scheduler, "update_from_output")
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


def stub_model(llm: LLM) -> None:
    """Replace the forward pass and the sampler's logits with stubs: what is left is host work."""
    torch.set_num_threads(1)     # the stubs' tiny ops gain nothing from a thread pool, only noise
    # Views of buffers allocated once, one wide (a one-token vocabulary: every token is 0):
    # the stubs and the runner's row gather on them cost next to nothing inside `launch`.
    model = llm.model
    hidden = torch.zeros((llm.config.max_num_batched_tokens, 1))
    logits = torch.zeros((llm.config.max_num_seqs, 1))
    model.forward = lambda token_ids, *_: hidden[:token_ids.shape[0]]
    model.logits = lambda rows: logits[:rows.shape[0]]


class StubDecodeGraphs(DecodeBuckets):
    """The decode graphs' host side: a replay does on the device what a graph's first and
    last kernels do (the rows' pending tokens gathered from `sampled`, a token sampled into
    it: 0, as the stubbed model always gives)."""

    def __init__(self, llm: LLM):
        super().__init__(llm.config.max_num_seqs, llm.runner.device)
        self.llm = llm

    def replay(self, bucket: int, greedy: bool) -> torch.Tensor:
        v = self.llm.runner.inputs.views
        self.llm.model.ops.take_pending_tokens(v["token_ids"][:bucket], v["source_rows"][:bucket], self.sampled)
        return self.sampled[:bucket].zero_()


def host_only(llm: LLM, workload, reps: int) -> None:
    """Per phase, the mean µs of a full-batch decode step in each of `reps` rounds of the
    workload (a round's mean takes its block-crossing steps at their own rate), then the
    median over the rounds: the host's speed drifts between rounds more than within one."""
    stub_model(llm)
    # Decode steps replay the graphs' stub, as on a GPU with CUDA graphs (steps with
    # prefill run the eager stub).
    llm.runner.graphs = StubDecodeGraphs(llm)
    steps_scheduled = []
    schedule = llm.scheduler.schedule
    llm.scheduler.schedule = lambda: steps_scheduled.append(schedule()) or steps_scheduled[-1]
    requests = workload.requests()
    full = min(len(requests), llm.config.max_num_seqs)
    rounds = []
    for _ in range(reps + 1):                            # the first round warms up
        totals, steps = dict.fromkeys(llm.host_time, 0.0), 0
        for i, r in enumerate(requests):
            llm.add_request(r.prompt, workload.sampling_params(r, i))
        while llm.has_unfinished():
            before = dict(llm.host_time)
            llm.step()
            out = steps_scheduled.pop()
            if len(out.request_ids) == full and all(n == 1 for n in out.num_scheduled_tokens):
                steps += 1
                for phase in totals:
                    totals[phase] += llm.host_time[phase] - before[phase]
        per_step = {phase: seconds / steps * 1e6 for phase, seconds in totals.items()}
        rounds.append({**per_step, "total": sum(per_step.values())})
    rounds = rounds[1:]
    print(f"{workload.name}, host only: {steps} decode steps of {full} rows a round, medians of {reps} rounds")
    for phase in rounds[0]:
        values = [r[phase] for r in rounds]
        print(f"  {phase:<28}{statistics.median(values):>10.1f} us/step   ({min(values):.1f}-{max(values):.1f})")


def host_prefill(llm: LLM, shapes: list[tuple[int, int]], reps: int) -> None:
    stub_model(llm)
    params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
    gen = torch.Generator().manual_seed(0)
    for batch, tokens in shapes:
        runs = []
        for rep in range(reps + 1):                      # the first one warms up
            prompts = random_prompts(llm, batch, tokens, gen).tolist()
            if not llm.reset_prefix_cache():
                raise RuntimeError("the prefix cache could not be emptied: requests are in flight")
            before, steps_before = dict(llm.host_time), llm.stats["steps"]
            start = time.perf_counter()
            llm.generate(prompts, params)
            wall = time.perf_counter() - start
            steps = llm.stats["steps"] - steps_before
            phases = {phase: llm.host_time[phase] - before[phase] for phase in before}
            phases = {"requests": wall - sum(phases.values()), **phases, "total": wall}
            if rep:
                runs.append(phases)
        print(f"prefill {batch}x{tokens}, host only: {steps} steps a repetition, medians of {reps}")
        for phase in runs[0]:
            print(f"  {phase:<28}{statistics.median(r[phase] for r in runs) * 1e3:>10.2f} ms")


if __name__ == "__main__":
    main()
