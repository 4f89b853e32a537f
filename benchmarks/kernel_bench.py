"""Kernel micro-benchmarks: decode attention against this card's device copy rate, the
small-batch linear layers (our fused gemv kernels against norm/activation + cuBLAS),
the decode GEMM at each of its tiles against cuBLAS, and a prefill's GEMMs in gemm_tma
against cuBLAS, as a CUDA graph runs them (plain edges: these are the kernels' own
times, not what programmatic launch overlaps).

Times each case as replays of a CUDA graph of 20 calls (CUDA events, after warm-up,
median of many replays); attention calls rotate over several KV caches so that
repeated runs do not time the L2 cache.
Usage: python3 benchmarks/kernel_bench.py [--only attention|linear|gemm|prefill_gemm]
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.copy_ceiling import copy_ceiling  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.ops.base import AttentionMetadata  # noqa: E402
from engine.ops.cuda_ops import CudaOps, gemm_tma_width  # noqa: E402


def decode_case(lens, nh=9, nkv=3, d=64, bs=16, dtype=torch.bfloat16, copies=4, capture_len=None):
    """Decode attention over rows of the given context lengths; `capture_len`: the
    longest context the work list is sized for (a captured graph's max_model_len)."""
    B, width = len(lens), math.ceil(max(lens) / bs)
    blocks = B * width
    tables = torch.stack([torch.randperm(blocks, dtype=torch.int32)[:width] for _ in range(B)]).cuda()
    caches = [(torch.randn(blocks, bs, nkv, d, dtype=dtype, device="cuda"),
               torch.randn(blocks, bs, nkv, d, dtype=dtype, device="cuda")) for _ in range(copies)]
    q = torch.randn(B, nh, d, dtype=dtype, device="cuda")
    meta = AttentionMetadata(
        query_start_loc=torch.arange(B + 1, dtype=torch.int32, device="cuda"),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device="cuda"), block_tables=tables,
        slot_mapping=torch.zeros(B, dtype=torch.int64, device="cuda"), max_query_len=1,
        max_seq_len=capture_len or max(lens), plan=None)   # the cuda ops plan nothing on the host
    nbytes = 2 * sum(lens) * nkv * d * caches[0][0].element_size() + 2 * q.numel() * q.element_size()
    return q, caches, meta, nbytes


def time_ms(fn, warmup=20, reps=200):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def graph_us(fn, stream, calls=20, reps=50) -> float:
    """Median µs per call of `fn(i)`, i = 0..calls-1, replayed inside one CUDA graph:
    the per-kernel cost a captured decode step pays, without host launch time (timed
    eagerly, a short kernel's figure was mostly the Python launch: the same attention
    kernel measured 45 and 74 µs at batch 1 in one device call)."""
    for i in range(3):
        fn(i)
    graph = torch.cuda.CUDAGraph()
    # `stream`: one of the ops' own (CudaOps.new_stream): PyCUDA launches only on streams it made.
    with torch.cuda.graph(graph, stream=stream):
        for i in range(calls):
            fn(i)
    return time_ms(graph.replay, warmup=5, reps=reps) * 1e3 / calls


def attention(ops):
    """Decode attention as a captured step runs it: the work list planned once, then 20
    launches; at the engine's slack (*) and a sweep of others, on equal contexts (where a
    fixed partition loses to a tail split), mixed ones like nano-bench's, and batch 1."""
    stream = ops.new_stream()
    gen = torch.Generator().manual_seed(0)
    cases = [("B=256 ctx=1025", [1025] * 256, 8192), ("B=256 ctx=1024", [1024] * 256, None),
             ("B=256 ctx 100..2048", torch.randint(100, 2049, (256,), generator=gen).tolist(), 8192),
             ("B=64 ctx=1024", [1024] * 64, None), ("B=256 ctx=4096", [4096] * 256, None),
             ("B=1 ctx=257", [257], 8192), ("B=1 ctx=4096", [4096], 8192)]
    default = ops.decode_slack
    ceiling = copy_ceiling()
    print(f"this card's device copy rate: {ceiling / 1e12:.2f} TB/s (bytes read + written)")
    print(f"{'case (9q/3kv, d=64, bf16)':<34} {'slack':>6} {'median us':>10} {'GB/s':>8} {'% of copy ceiling':>18}")
    for label, lens, capture_len in cases:
        q, caches, meta, nbytes = decode_case(lens, capture_len=capture_len)
        out = torch.empty_like(q)
        for slack in [default] + [x for x in (1.0, 1.25, 1.5, 2.0) if x != default]:
            ops.decode_slack = slack
            step = dataclasses.replace(meta, device_plan=None)

            def call(i):   # calls rotate over the cache copies: a small case's cache would otherwise sit in L2
                ops._decode(q, *caches[i % len(caches)], step, 64 ** -0.5, out, "bf16", len(lens), 9, 3, 64, 16)
            us = graph_us(call, stream)
            gbs = nbytes / (us * 1e-6) / 1e9
            print(f"{label + (' *' if slack == default else ''):<34} {slack:>6.2f} {us:>10.1f} {gbs:>8.0f} "
                  f"{100 * gbs * 1e9 / ceiling:>17.1f}%")
    ops.decode_slack = default


def linear(ops):
    """SmolLM2-135M's four projections at decode batch sizes, bf16, as our ops take them
    (the op before each fused into the gemv kernels up to 8 rows; past them the op's kernel,
    then our GEMM) against that op + cuBLAS; `ops` must take the gemv kernels at every row
    count they serve (gemv_max_rows=8) and our GEMM up to 256 rows."""
    print(f"{'layer (rows x K -> N)':<36} {'ours us':>12} {'norm/act + cuBLAS us':>21}")
    dt = torch.bfloat16
    stream = ops.new_stream()
    for M in (1, 2, 4, 8, 16, 64, 256):
        for name, K, N in (("norm+qkv", 576, 960), ("o", 576, 576), ("norm+gate_up", 576, 3072),
                           ("silu+down", 1536, 576)):
            w = torch.randn(N, K, dtype=dt, device="cuda")
            res, norm_w = torch.randn(M, K, device="cuda"), torch.rand(K, dtype=dt, device="cuda")
            if name.startswith("norm"):
                x = torch.randn(M, K, dtype=dt, device="cuda")
                ours = lambda i: ops.norm_linear(x, res, norm_w, 1e-5, w)  # noqa: E731
                op = lambda: ops.rms_norm(x, norm_w, 1e-5, res)[0]  # noqa: E731
            elif name.startswith("silu"):
                x = torch.randn(M, 2 * K, dtype=dt, device="cuda")
                ours = lambda i: ops.silu_linear(x, w)  # noqa: E731
                op = lambda: ops.silu_and_mul(x)  # noqa: E731
            else:
                x = torch.randn(M, K, dtype=dt, device="cuda")
                ours = lambda i: ops.linear(x, w)  # noqa: E731
                op = lambda: x  # noqa: E731
            print(f"{f'{name} ({M} x {K} -> {N})':<36} {graph_us(ours, stream):>12.2f} "
                  f"{graph_us(lambda i: F.linear(op(), w), stream):>21.2f}")
    for M in (1, 256):
        hidden = torch.randn(M, 576, dtype=dt, device="cuda")
        head = torch.randn(49152, 576, dtype=dt, device="cuda")
        head32 = head.float()
        print(f"{f'lm_head ({M} x 576 -> 49152) bf16->f32':<36} {graph_us(lambda i: ops.logits(hidden, head), stream):>12.2f} "
              f"{graph_us(lambda i: F.linear(hidden.float(), head32), stream):>21.2f}  (right: the float32 head)")


def gemm(ops):
    """SmolLM2-135M's four projections (bf16) at decode batch sizes: our GEMM at each tile
    (* the one gemm_tile picks) against cuBLAS."""
    dt = torch.bfloat16
    stream = ops.new_stream()
    print(f"{'GEMM (rows x K -> N), us':<28} " + " ".join(f"{str(t):>12}" for t in ops.gemm_tiles)
          + f" {'cuBLAS':>8}")
    for M in (8, 16, 32, 64, 128, 256):
        for K, N in ((576, 960), (576, 576), (576, 3072), (1536, 576)):
            w = torch.randn(N, K, dtype=dt, device="cuda")
            x = torch.randn(M, K, dtype=dt, device="cuda")
            picked = ops.gemm_tile(M, N, K)
            cells = [f"{graph_us(lambda i: ops.gemm(x, w, t), stream):>11.2f}"
                     f"{'*' if t == picked else ' '}"
                     for t in ops.gemm_tiles]
            print(f"{f'{M} x {K} -> {N}':<28} " + " ".join(cells) + f" {graph_us(lambda i: F.linear(x, w), stream):>8.2f}")


def prefill_gemm(ops):
    """A prefill step's projections (SmolLM2-135M, bf16) in gemm_tma against cuBLAS; gate|up
    with SiLU-and-mul as gemm_tma's epilogue against cuBLAS then silu_and_mul. `ops` must
    have gemm_tma on (prefill_gemm_tma)."""
    if ops.prefill_gemm_tma == "off":
        print("prefill GEMM: skipped, gemm_tma needs an sm_90a GPU (TMA, clusters, wgmma)")
        return
    dt = torch.bfloat16
    stream = ops.new_stream()
    print(f"{'prefill GEMM (rows x K -> N)':<40} {'gemm_tma us':>12} {'TFLOP/s':>8} {'cuBLAS us':>10} {'TFLOP/s':>8}"
          "   gemm_tma at 256 | 192, silu 256 | 128 (* the one gemm_tma_width takes)")
    for M in (2048, 4096, 8192):
        for name, K, N, silu in (("qkv", 576, 960, False), ("o", 576, 576, False),
                                 ("gate_up + silu_and_mul", 576, 3072, True), ("down", 1536, 576, False)):
            w = torch.randn(N, K, dtype=dt, device="cuda") * K ** -0.5
            x = torch.randn(M, K, dtype=dt, device="cuda")
            taken = gemm_tma_width(M, N // (2 if silu else 1), ops.num_sms, silu)   # the rule's choice
            ours = graph_us(lambda i: ops.gemm_tma(x, w, silu=silu, width=taken), stream)
            widths = " | ".join(f"{graph_us(lambda i: ops.gemm_tma(x, w, silu=silu, width=wd), stream):.2f}"
                                f"{'*' if wd == taken else ''}" for wd in ((256, 128) if silu else (256, 192)))
            if silu:
                cublas = graph_us(lambda i: ops.silu_and_mul(F.linear(x, w)), stream)
            else:
                cublas = graph_us(lambda i: F.linear(x, w), stream)
            flops = 2 * M * K * N
            print(f"{f'{name} ({M} x {K} -> {N})':<40} {ours:>12.2f} {flops / ours / 1e6:>8.0f} {cublas:>10.2f} "
                  f"{flops / cublas / 1e6:>8.0f}   {widths}")


SECTIONS = ("attention", "linear", "gemm", "prefill_gemm")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=SECTIONS)
    args = ap.parse_args()
    for section in [args.only] if args.only else SECTIONS:
        if section == "attention":
            attention(CudaOps())
        elif section == "linear":
            linear(CudaOps(EngineConfig.from_env(model="", backend="cuda", gemv_max_rows=8, gemm_max_rows=256)))
        elif section == "gemm":
            gemm(CudaOps())
        else:
            prefill_gemm(CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_gemm_tma="all")))


if __name__ == "__main__":
    main()
