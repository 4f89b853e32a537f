"""Host cost of launching one kernel from Python, eager: what an eager prefill pays per
kernel (a captured decode graph pays it once, at capture). The rms_norm kernel on one row,
launched 2,000 times back to back, host time per launch; and the whole op (allocation and
checks included); medians of 5 rounds, after a warm-up.

    python3 benchmarks/launch_cost.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.ops.cuda_ops import CudaOps  # noqa: E402

LAUNCHES, ROUNDS = 2000, 5


def host_us(call) -> float:
    for _ in range(200):
        call()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(LAUNCHES):
            call()
        rounds.append((time.perf_counter() - start) / LAUNCHES * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main() -> None:
    ops = CudaOps()
    x = torch.randn(1, 576, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(576, device="cuda", dtype=torch.bfloat16)
    out, residual = torch.empty_like(x), torch.empty(x.shape, dtype=torch.float32, device="cuda")
    kernel = ops._k["rms_norm", "bf16"]   # the launcher itself, without the op around it
    launch = host_us(lambda: kernel(1, 128, x, None, weight, out, residual, 1, 576, 1e-5))
    op = host_us(lambda: ops.rms_norm(x, weight, 1e-5, None))
    print(f"kernel launch (rms_norm, 1 row, eager): {launch:.2f} us host time per launch; "
          f"the whole op: {op:.2f} us (medians of {ROUNDS} rounds of {LAUNCHES})")


if __name__ == "__main__":
    main()
