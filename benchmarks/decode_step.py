"""One decode step at batch 256 / context 1024 against its roofline floor, and where
the GPU memory goes.

The step is the engine's own CUDA graph for the bucket (forward, fp32 logits,
sampling), replayed on dummy weights of the SmolLM2-135M architecture with every
row at the given context; timed with CUDA events after warm-up, median of many
replays, rotating over several rows-to-blocks layouts so that the KV reads are
not served from L2. The floor is the bytes the step must read (weights + the
KV of every row) at the device copy rate, measured on this card in this process
(benchmarks/copy_ceiling.py) and recorded beside the ratio. `--context LO-HI` gives
each row its own context, drawn uniformly from LO..HI (seeded: the same lengths every
run), as a batch of mixed lengths is in nano-bench; the decode work list is planned
from them.
Figures are also written to the results store as the micro-benchmark
`decode-step-b<batch>-c<context>` (jobs/microbench.py) unless --no-store.
--profile prints the step's kernels (torch.profiler over 20 replays): time per
step by kernel, the breakdown the roofline gap is read from.
Usage: python3 benchmarks/decode_step.py [--batch 256] [--context 1024 | LO-HI] [--no-store] [--profile]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.copy_ceiling import copy_ceiling  # noqa: E402
from engine import LLM  # noqa: E402
from jobs.store.models import utcnow  # noqa: E402


def context_range(text: str) -> tuple[int, int]:
    """`--context`: N (every row N cached tokens) or LO-HI (each row its own, uniform)."""
    lo, dash, hi = text.partition("-")
    try:
        lo, hi = int(lo), int(hi if dash else lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N or LO-HI, whole numbers") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= LO <= HI")
    return lo, hi


def ctx_config(lo: int, hi: int):
    """The context as the run's config records it: the number for equal lengths (the
    series these runs always had), the range with its draw otherwise."""
    return lo if lo == hi else {"uniform": [lo, hi], "seed": 0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--context", type=context_range, default=(1024, 1024),
                    help="cached tokens a row: N, or LO-HI for lengths drawn uniformly per row")
    ap.add_argument("--layouts", type=int, default=4, help="distinct block layouts to rotate over")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="the engine's max_model_len, which sizes the step's graph (default: what the "
                         "layouts' KV blocks hold; the engine's own default is the model's context)")
    ap.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    ap.add_argument("--profile", action="store_true", help="also print the step's time by kernel")
    args = ap.parse_args()
    started = utcnow()
    B, bs = args.batch, 16
    lo, hi = args.context
    label = f"{lo}" if lo == hi else f"{lo}-{hi}"
    ctx = torch.randint(lo, hi + 1, (B,), generator=torch.Generator().manual_seed(0)).cuda()
    blocks_per_row = math.ceil((hi + 1) / bs)
    kv_tokens = args.layouts * B * blocks_per_row * bs
    llm = LLM(args.model, backend="cuda", max_num_seqs=B, max_model_len=args.max_model_len,
              kv_cache_tokens=max(kv_tokens, args.max_model_len or 0))
    graphs, inputs = llm.runner.graphs, llm.runner.inputs.views
    bucket = graphs.bucket_for(B)
    g = graphs.graph(bucket, greedy=True)
    layouts = torch.randperm(llm.block_manager.num_blocks, dtype=torch.int32, device="cuda")
    layouts = layouts[:args.layouts * B * blocks_per_row].view(args.layouts, B, blocks_per_row)
    inputs["seq_lens"][:B] = ctx + 1                      # ctx cached tokens plus the new one
    inputs["positions"][:B] = ctx
    inputs["token_ids"][:B] = torch.randint(0, llm.model_config.vocab_size, (B,), device="cuda")

    def run(i: int) -> None:
        table = layouts[i % args.layouts]
        inputs["block_tables"][:B, :blocks_per_row] = table
        inputs["slots"][:B] = table.gather(1, (ctx // bs)[:, None])[:, 0].long() * bs + ctx % bs
        g.replay()

    for i in range(20):
        run(i)
    times = []
    # An NVTX range around the timed replays only, for profilers: `ncu --nvtx --nvtx-include
    # "timed/" -k regex:attn_decode -c 1 python3 benchmarks/decode_step.py ...` profiles a
    # measured launch, not one of the engine's start-up or warm-up ones.
    torch.cuda.nvtx.range_push("timed")
    for i in range(200):
        run(i)   # staging the layout is outside the timed region: only the replay is timed
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    torch.cuda.nvtx.range_pop()
    step = statistics.median(times)
    c = llm.model_config
    weight_bytes = llm.model.decode_bytes()
    kv_bytes = int((ctx + 1).sum()) * llm._kv_bytes_per_token()
    mem = llm.memory_report()   # before the copy's buffers can enter torch's peak
    ceiling = copy_ceiling()
    floor = (weight_bytes + kv_bytes) / ceiling
    print(f"decode step B={B} ctx={label} ({c.num_layers} layers, graph replay): median {step * 1e3:.3f} ms; "
          f"floor {floor * 1e3:.3f} ms (weights {weight_bytes / 1e6:.0f} MB + KV {kv_bytes / 1e6:.0f} MB "
          f"at {ceiling / 1e12:.2f} TB/s, this card's copy rate); ratio {step / floor:.2f}x; "
          f"{getattr(g, 'programmatic_edges', 0)} programmatic edges (engine.ops.pdl)")
    if args.profile:
        print_kernel_profile(run, step)
    print("GPU memory: " + ", ".join(f"{k} {v / 1e9:.3f} GB" for k, v in mem.items()))
    if not args.no_store:
        from jobs.microbench import record_microbench
        config = {"model": args.model, "batch": B, "context": ctx_config(lo, hi),
                  "dtype": str(llm.dtype).removeprefix("torch."), "layouts": args.layouts}
        figures = {"decode_step_s": step, "roofline_ratio": step / floor,
                   "memory_other_frac": mem["other"] / mem["peak_allocated"],
                   "copy_bytes_per_s": ceiling}
        run_id = record_microbench(f"decode-step-b{B}-c{label}", config, figures, started, utcnow())
        print(f"recorded run {run_id}")


def print_kernel_profile(run, step: float, replays: int = 20) -> None:
    """GPU time per step by kernel name over `replays` graph replays (CUPTI traces
    the kernels inside a graph), largest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(replays):
            run(i)
        torch.cuda.synchronize()
    rows = [(e.device_time_total / replays, e.count / replays, e.key) for e in prof.key_averages()
            if e.device_time_total > 0 and e.key.strip()]
    total = sum(r[0] for r in rows)
    # With programmatic edges (engine.ops.pdl) a kernel starts before the one it follows has
    # finished, and its span includes that wait: the spans then add to more than the replay.
    why = ("the spans overlap: a kernel launched early waits inside its span" if total > step * 1e6
           else "the difference is gaps between kernels")
    print(f"kernels: {total / 1e3:.3f} ms of GPU time a step (replay median {step * 1e3:.3f} ms; {why})")
    print(f"{'us/step':>9} {'calls':>6} {'us/call':>8} {'%':>5}  kernel")
    for us, calls, name in sorted(rows, reverse=True)[:25]:
        print(f"{us:>9.1f} {calls:>6.0f} {us / calls:>8.2f} {100 * us / total:>5.1f}  {name[:90]}")


if __name__ == "__main__":
    main()
