"""Kernel micro-benchmarks: decode attention against the device copy ceiling.

Times each case with CUDA events after warm-up, median of many runs, rotating
over several KV caches so that repeated runs do not time the L2 cache.
Usage: python3 benchmarks/kernels.py
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.ops.base import AttentionMetadata  # noqa: E402
from engine.ops.cuda_ops import CudaOps  # noqa: E402

COPY_CEILING = 4.26e12  # bytes/s, device-to-device copy measured on the H200 (GPU-HOST.md)


def decode_case(B, ctx, nh=9, nkv=3, d=64, bs=16, dtype=torch.bfloat16, copies=4):
    blocks = B * math.ceil(ctx / bs)
    tables = torch.stack([torch.randperm(blocks, dtype=torch.int32)[:math.ceil(ctx / bs)] for _ in range(B)]).cuda()
    caches = [(torch.randn(blocks, bs, nkv, d, dtype=dtype, device="cuda"),
               torch.randn(blocks, bs, nkv, d, dtype=dtype, device="cuda")) for _ in range(copies)]
    q = torch.randn(B, nh, d, dtype=dtype, device="cuda")
    meta = AttentionMetadata(
        query_start_loc=torch.arange(B + 1, dtype=torch.int32, device="cuda"),
        seq_lens=torch.full((B,), ctx, dtype=torch.int32, device="cuda"), block_tables=tables,
        slot_mapping=torch.zeros(B, dtype=torch.int64, device="cuda"), max_query_len=1, max_seq_len=ctx,
        query_lens_host=[1] * B, seq_lens_host=[ctx] * B)
    nbytes = 2 * B * ctx * nkv * d * caches[0][0].element_size() + 2 * q.numel() * q.element_size()
    return q, caches, meta, nbytes


def time_ms(fn, n_caches, warmup=20, reps=200):
    for i in range(warmup):
        fn(i % n_caches)
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i % n_caches)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ops = CudaOps()
    print(f"{'case':<44} {'partition':>9} {'median us':>10} {'GB/s':>8} {'% of copy ceiling':>18}")
    for B, ctx in [(256, 1024), (1, 256), (64, 1024), (256, 4096)]:
        q, caches, meta, nbytes = decode_case(B, ctx)
        out = torch.empty_like(q)
        default = ops.decode_partition(B, 3, ctx)
        # The engine's choice first, then a sweep of split sizes.
        for partition in [default] + [p for p in (64, 128, 256, 512, 1024) if p != default and p <= ctx]:
            ms = time_ms(lambda i: ops._decode(q, caches[i][0], caches[i][1], meta, 64 ** -0.5, out, "bf16",
                                               B, 9, 3, 64, 16, partition), len(caches))
            gbs = nbytes / (ms * 1e-3) / 1e9
            label = f"decode attn B={B} ctx={ctx} (9q/3kv, d=64)" + (" *" if partition == default else "")
            print(f"{label:<44} {partition:>9} {ms * 1e3:>10.1f} {gbs:>8.0f} "
                  f"{100 * gbs * 1e9 / COPY_CEILING:>17.1f}%")


if __name__ == "__main__":
    main()
