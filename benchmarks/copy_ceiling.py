"""The GPU's device-to-device copy rate: the bandwidth the decode roofline is drawn at.

GPU-HOST.md measured 4.26 TB/s (bytes read + written) on the H200 this way. A constant
would misstate any other card (an H100 copies at about 3 TB/s), so the benchmarks
measure the card they run on, in their own process, and record what they used.
"""
from __future__ import annotations

import statistics

import torch


def copy_ceiling(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Bytes read + written a second by a device-to-device copy of `nbytes`: the median of
    `reps` copies timed with CUDA events, after a warm-up. Frees what it allocates."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times)
