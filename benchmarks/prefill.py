"""Prefill on the GPU: our engine against plain torch on the same weights, in one process.

Shapes are BATCHxTOKENS (1x4000: one 4,000-token prompt; 64x1000: 64 prompts of 1,000).
Ours runs `LLM.generate(..., max_tokens=1)` through the whole engine (validating the
prompts, scheduling, chunked prefill under max_num_batched_tokens, sampling); a repetition's
time is its wall clock (host included, as a user sees it), its TTFT the engine's own. The
prompts are token-id lists, as a caller hands them, made before the clock starts: turning
this script's random tensor into lists is its own cost (~1 ms at 64x1000 on the H200
host), not the engine's. Plain torch is the same forward pass written directly: cuBLAS
GEMMs, `scaled_dot_product_attention(is_causal=True)` (flash attention), timed with CUDA
events, eager and (the peer at its best, without a host launching ~450 kernels one by one)
replayed as a CUDA graph captured for the shape. Each is warmed up on every measured shape
first; every repetition draws fresh random prompts and starts with our prefix cache emptied,
so nothing is served from a cache. Medians of --reps repetitions.

--profile prints each side's GPU time by kernel for one repetition of every shape.
--timeline traces one more repetition of ours per shape (CPU and CUDA activities) and prints
where its generate() call went: host time before the first GPU work, the GPU's idle gaps
inside its span (the largest with the kernels around them), and the time after its last work.
--ab SETTING=VALUE measures a second engine, B, that differs from the first, A, in one tuning
knob of engine.config.ENV_OVERRIDES (e.g. prefill_gemm_tma=off), in the same process: both are
warmed up on each shape, and their repetitions alternate on the same fresh prompts, so drift
in the GPU's clocks falls on both alike. It prints the two and B's time over A's; it stores
nothing.
Figures go to the results store as micro-benchmark `prefill-<shape>` unless --no-store. Their
wall clock and TTFT include host work, so a stored shape's measurement (warm-ups, repetitions,
plain torch) runs under jobs/host_monitor.py, and --preflight first leases the GPU and waits for a
quiet host, as `roadgate bench --preflight` does: each run records whether its host was quiet
before and throughout (jobs/microbench.py).
Usage: python3 benchmarks/prefill.py [--model dummy:smollm2-135m] [--shapes 1x4000 1x8000 64x1000]
       [--preflight [--gpu N]] [--ab prefill_gemm_tma=off]
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.step_trace import GPU_CATEGORIES, traced_events  # noqa: E402
from engine import LLM, SamplingParams  # noqa: E402
from engine.config import ENV_OVERRIDES, EngineConfig  # noqa: E402
from jobs import host_monitor  # noqa: E402
from jobs.errors import UsageError  # noqa: E402
from jobs.preflight import on_a_leased_gpu  # noqa: E402
from jobs.store.models import utcnow  # noqa: E402


def parse_shape(text: str) -> tuple[int, int]:
    batch, _, tokens = text.partition("x")
    try:
        shape = int(batch), int(tokens)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not BATCHxTOKENS, e.g. 1x4000") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r} needs a batch and a length of at least 1")
    return shape


class TorchPrefill:
    """The model's forward over whole prompts in plain torch eager, reading the engine's
    own weights: the reference a prefill kernel has to beat."""

    def __init__(self, llm: LLM):
        self.m, self.c = llm.model, llm.model_config

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c.rms_norm_eps)).to(x.dtype) * w

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, n] -> float32 logits of each prompt's last token [B, V]."""
        m, c = self.m, self.c
        B, n = ids.shape
        nh, nkv, d = c.num_heads, c.num_kv_heads, c.head_dim
        half = d // 2
        cos, sin = m.cos_sin[:n, :half][:, None], m.cos_sin[:n, half:][:, None]
        h = m.embed[ids]
        for layer in m.layers:
            qkv = F.linear(self._norm(h, layer.attn_norm), layer.qkv)
            q, k, v = qkv.view(B, n, nh + 2 * nkv, d).split([nh, nkv, nkv], dim=2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True)
            h = h + F.linear(attn.transpose(1, 2).reshape(B, n, nh * d), layer.o)
            gate, up = F.linear(self._norm(h, layer.ffn_norm), layer.gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, layer.down)
        return torch.mm(self._norm(h[:, -1], m.norm), m.lm_head.t(), out_dtype=torch.float32)


def parse_setting(text: str) -> tuple[str, object]:
    """SETTING=VALUE: one tuning knob of ENV_OVERRIDES, its value read as from its variable and
    checked as the engine's config checks it, before either engine is built."""
    name, equals, value = text.partition("=")
    if not equals or name not in ENV_OVERRIDES:
        raise argparse.ArgumentTypeError(f"{text!r} is not SETTING=VALUE for a setting of {', '.join(ENV_OVERRIDES)}")
    try:
        parsed = ENV_OVERRIDES[name][1](value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid {name}") from None
    try:
        EngineConfig("", **{name: parsed})
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name, parsed


def kv_tokens_for(shapes: list[tuple[int, int]], block_size: int) -> int:
    """KV cache tokens that hold every shape's prompts and their one output token, in whole
    blocks: what each of two engines in one process gets, rather than a share of free memory."""
    return max(batch * -(-(tokens + 1) // block_size) * block_size for batch, tokens in shapes)


def microbenchmark_name(batch: int, tokens: int) -> str:
    return f"prefill-{batch}x{tokens}"


def random_prompts(llm: LLM, batch: int, tokens: int, gen: torch.Generator) -> torch.Tensor:
    vocab = llm.model_config.vocab_size
    return torch.randint(100, vocab - 100, (batch, tokens), generator=gen)


def time_ours(llm: LLM, prompts: torch.Tensor, around=contextlib.nullcontext) -> tuple[float, float]:
    """One repetition through the engine: (wall seconds, median TTFT seconds). `around()`:
    a context the timed part runs in (print_timeline's traced range)."""
    if not llm.reset_prefix_cache():
        raise RuntimeError("the prefix cache could not be emptied: requests are in flight")
    params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
    token_ids = prompts.tolist()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with around():
        outs = llm.generate(token_ids, params)
        torch.cuda.synchronize()
    return time.perf_counter() - t0, statistics.median(o.ttft for o in outs)


def time_torch(ref: TorchPrefill, prompts: torch.Tensor) -> float:
    ids = prompts.cuda()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    ref(ids)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3


class TorchPrefillGraph:
    """TorchPrefill over prompts of one shape, captured in a CUDA graph as torch documents it
    (warmed up on a side stream first); each call copies its prompts in and replays."""

    def __init__(self, ref: TorchPrefill, batch: int, tokens: int):
        self.ids = torch.zeros((batch, tokens), dtype=torch.long, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ref(self.ids)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = ref(self.ids)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(ids)
        self.graph.replay()
        return self.logits

    def time(self, prompts: torch.Tensor) -> float:
        """Seconds of one replay, by CUDA events; the prompts are on the GPU before it, as
        time_torch's are."""
        self.ids.copy_(prompts.cuda())
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        self.graph.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e-3


def print_kernel_profile(label: str, fn) -> None:
    """GPU time by kernel name over one call of fn, largest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.device_time_total, e.count, e.key) for e in prof.key_averages()
            if e.device_time_total > 0 and e.key.strip()]
    total = sum(r[0] for r in rows)
    print(f"  {label}: {total / 1e3:.3f} ms of GPU time in kernels")
    print(f"  {'us':>9} {'calls':>6} {'us/call':>8} {'%':>5}  kernel")
    for us, calls, name in sorted(rows, reverse=True)[:14]:
        print(f"  {us:>9.1f} {calls:>6} {us / calls:>8.2f} {100 * us / total:>5.1f}  {name[:90]}")


REPETITION_LABEL = "roadgate-prefill-repetition"


@dataclass
class Timeline:
    """One traced repetition, in µs: host before the first GPU work, the GPU's span and busy
    time, host after the last GPU work, and the idle gaps (length, start from the span's
    start, kernel before, kernel after), largest first."""
    before_us: float
    span_us: float
    busy_us: float
    after_us: float
    gaps: list[tuple[float, float, str, str]]


def timeline(events: list[dict], label: str = REPETITION_LABEL) -> Timeline:
    """Where the repetition's range went, from its chrome-trace events (GPU work outside the
    range is left out)."""
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == label]
    if len(ranges) != 1:
        raise ValueError(f"the trace holds {len(ranges)} ranges named {label}, not one")
    start, end = ranges[0]["ts"], ranges[0]["ts"] + ranges[0]["dur"]
    work = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES and start <= e["ts"] <= end)
    if not work:
        raise ValueError("no GPU work inside the repetition's range (is CUPTI available?)")
    busy, gaps = 0.0, []
    covered, last_name = work[0][0], work[0][2]
    for begin, finish, name in work:
        if begin > covered:
            gaps.append((begin - covered, covered - work[0][0], last_name, name))
        if finish > covered:
            busy += finish - max(begin, covered)
            covered, last_name = finish, name
    return Timeline(work[0][0] - start, covered - work[0][0], busy, end - covered, sorted(gaps, reverse=True))


def print_timeline(llm: LLM, prompts: torch.Tensor, largest: int = 8) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall, ttft = time_ours(llm, prompts, around=lambda: record_function(REPETITION_LABEL))
    t = timeline(traced_events(prof, None))
    print(f"  timeline (traced: the host runs slower): wall {wall * 1e3:.2f} ms, TTFT {ttft * 1e3:.2f} ms; "
          f"host before the first GPU work {t.before_us / 1e3:.3f} ms, GPU span {t.span_us / 1e3:.3f} ms "
          f"({(t.span_us - t.busy_us) / 1e3:.3f} ms idle in {len(t.gaps)} gaps), after the last "
          f"{t.after_us / 1e3:.3f} ms")
    for length, at, before, after in t.gaps[:largest]:
        print(f"    gap {length:7.1f} us at {at / 1e3:6.3f} ms: {before[:50]} -> {after[:50]}")


def measure(engines: dict[str, LLM], batch: int, tokens: int, reps: int, gen: torch.Generator) -> dict[str, dict]:
    """Each engine warmed up on the shape, then `reps` repetitions, the engines taking turns on
    each repetition's fresh prompts: per engine its figures and host ms per repetition by phase."""
    for llm in engines.values():
        time_ours(llm, random_prompts(llm, batch, tokens, gen))          # warm-up on the measured shape
    host_before = {label: dict(llm.host_time) for label, llm in engines.items()}
    times = {label: [] for label in engines}
    for _ in range(reps):
        prompts = random_prompts(next(iter(engines.values())), batch, tokens, gen)
        for label, llm in engines.items():
            times[label].append(time_ours(llm, prompts))
    results = {}
    for label, llm in engines.items():
        wall = statistics.median(w for w, _ in times[label])
        results[label] = {
            "figures": {"prefill_s": wall, "ttft_p50_s": statistics.median(t for _, t in times[label]),
                        "prompt_tok_s": batch * tokens / wall},
            "host": {phase: (llm.host_time[phase] - host_before[label][phase]) / reps for phase in host_before[label]}}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--shapes", nargs="+", type=parse_shape, default=[(1, 4000), (1, 8000), (64, 1000)])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true", help="skip the plain-torch reference")
    ap.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    ap.add_argument("--profile", action="store_true", help="print GPU time by kernel for each shape")
    ap.add_argument("--timeline", action="store_true", help="trace one more repetition of ours per shape "
                    "and print where its generate() call went")
    ap.add_argument("--ab", type=parse_setting, metavar="SETTING=VALUE",
                    help="also measure an engine that differs in this one tuning knob, alternating with the first")
    ap.add_argument("--preflight", action="store_true",
                    help="lease a GPU (refused when none is free) and wait for a quiet host (roadgate preflight's "
                         "defaults) before measuring; the stored runs record the outcome")
    ap.add_argument("--gpu", type=int, help="with --preflight: the GPU to lease (default: the lowest free one)")
    args = ap.parse_args()
    if args.ab and not args.no_store:
        ap.error("--ab compares two engines and stores neither; pass --no-store")
    if args.gpu is not None and not args.preflight:
        ap.error("--gpu names the GPU --preflight leases; pass --preflight too")
    if not args.no_store:
        # Checked before any GPU work: the store refuses an unregistered name only after its measurement.
        from jobs.registry import MICROBENCHMARKS
        names = [microbenchmark_name(batch, tokens) for batch, tokens in args.shapes]
        unregistered = [name for name in names if name not in MICROBENCHMARKS]
        if unregistered:
            ap.error(f"{', '.join(unregistered)}: not a micro-benchmark of jobs/registry.py, so the results store "
                     "would refuse it; register it there or pass --no-store")
    with contextlib.ExitStack() as held:
        outcome, gpu_index = None, 0
        if args.preflight:
            try:
                leased, outcome = on_a_leased_gpu(held, args.gpu)
            except UsageError as e:
                ap.error(str(e))
            gpu_index = leased.index
        measure_and_report(args, outcome, gpu_index)


def measure_and_report(args: argparse.Namespace, outcome, gpu_index: int) -> None:
    """Every shape measured, printed and (unless --no-store) stored with `outcome`, the
    preflight it waited on (None: none), and the host watched on GPU `gpu_index` meanwhile."""
    longest = max(n for _, n in args.shapes)
    settings = {"backend": "cuda", "max_model_len": longest + 16}
    if args.ab:
        settings["kv_cache_tokens"] = kv_tokens_for(args.shapes, EngineConfig.block_size)
        knob, value = args.ab
        engines = {"A": LLM(args.model, **settings), f"B {knob}={value}": LLM(args.model, **settings, **{knob: value})}
    else:
        engines = {"ours": LLM(args.model, **settings)}
    first = next(iter(engines.values()))
    ref = None if args.no_torch else TorchPrefill(first)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for batch, tokens in args.shapes:
        started = utcnow()
        # Watched only where the figures are stored: the A/B and the printed runs keep the
        # monitor's samples (a few ms of the GIL every 0.5 s) out of their repetitions.
        with (contextlib.nullcontext() if args.no_store else host_monitor.watch(gpu_index)) as watched:
            results = measure(engines, batch, tokens, args.reps, gen)
            torch_figures = {}
            if ref is not None:
                time_torch(ref, random_prompts(first, batch, tokens, gen))     # warm-up, as for ours
                torch_figures["torch_prefill_s"] = statistics.median(
                    time_torch(ref, random_prompts(first, batch, tokens, gen)) for _ in range(args.reps))
                graph = TorchPrefillGraph(ref, batch, tokens)
                graph.time(random_prompts(first, batch, tokens, gen))          # a warm-up replay, as for eager
                torch_figures["torch_graph_prefill_s"] = statistics.median(
                    graph.time(random_prompts(first, batch, tokens, gen)) for _ in range(args.reps))
                del graph
        torch_s = torch_figures.get("torch_graph_prefill_s")
        for label, llm in engines.items():
            figures, host = results[label]["figures"], results[label]["host"]
            figures.update(torch_figures)
            rows.append((f"{batch}x{tokens}", label, figures))
            wall, ttft = figures["prefill_s"], figures["ttft_p50_s"]
            print(f"prefill {batch}x{tokens}: {label} {wall * 1e3:.2f} ms wall (TTFT p50 {ttft * 1e3:.2f} ms, "
                  f"{batch * tokens / wall / 1e3:.0f}k prompt tok/s)"
                  + (f"; plain torch in a CUDA graph {torch_s * 1e3:.2f} ms ({batch * tokens / torch_s / 1e3:.0f}k "
                     f"tok/s), eager {torch_figures['torch_prefill_s'] * 1e3:.2f} ms" if torch_s else ""))
            print("  host ms per repetition: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in host.items()))
            if args.profile:
                print_kernel_profile(label, lambda: time_ours(llm, random_prompts(llm, batch, tokens, gen)))
            if args.timeline:
                print_timeline(llm, random_prompts(llm, batch, tokens, gen))
        if args.profile and ref is not None:
            print_kernel_profile("plain torch (eager)",
                                 lambda: time_torch(ref, random_prompts(first, batch, tokens, gen)))
        if not args.no_store:
            from jobs.microbench import record_microbench
            config = {"model": args.model, "batch": batch, "tokens": tokens, "reps": args.reps,
                      "dtype": str(first.dtype).removeprefix("torch."),
                      "max_num_batched_tokens": first.config.max_num_batched_tokens}
            run_id = record_microbench(microbenchmark_name(batch, tokens), config, results["ours"]["figures"],
                                       started, utcnow(), preflight=outcome, watched=watched.summary())
            print(f"  recorded run {run_id}")
    print(f"\n{'shape':>9} {'engine':>24} {'wall ms':>9} {'TTFT ms':>9} {'tok/s':>10} {'torch ms':>9} "
          f"{'graph ms':>9}")
    nan = float("nan")
    for shape, label, f in rows:
        print(f"{shape:>9} {label[:24]:>24} {f['prefill_s'] * 1e3:>9.2f} {f['ttft_p50_s'] * 1e3:>9.2f} "
              f"{f['prompt_tok_s']:>10.0f} {f.get('torch_prefill_s', nan) * 1e3:>9.2f} "
              f"{f.get('torch_graph_prefill_s', nan) * 1e3:>9.2f}")
    if args.ab:
        ratios = (f"{shape} {b['prefill_s'] / a['prefill_s']:.3f}"
                  for (shape, _, a), (_, _, b) in zip(rows[::2], rows[1::2]))
        print("\nB / A, median wall: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
