"""Scripted hosts for jobs.host_monitor: CPU and GPU readings made up from a clock, nothing read from /proc or NVML."""
from __future__ import annotations

import os
import time
from typing import Callable

from jobs.host_monitor import Inputs, Sampler
from jobs.preflight import GpuState

TICKS_PER_S = 1_000_000   # finer than the kernel's 100, so sums over real sleeps round to nothing


def steady_host(foreign_cpus: float = 0.0, own_cpus: float = 1.0, cpus: int = 2, gpu: GpuState | None = None,
                clock: Callable[[], float] = time.monotonic) -> Inputs:
    """A host that keeps `own_cpus` busy in our process tree and `foreign_cpus` outside it."""
    start, at = clock(), [0.0]

    def host_jiffies() -> tuple[int, int]:
        at[0] = clock() - start   # our tree is read as of the same instant
        return round((own_cpus + foreign_cpus) * TICKS_PER_S * at[0]), round(cpus * TICKS_PER_S * at[0])

    return Inputs(host_jiffies=host_jiffies, tree=lambda: (round(own_cpus * TICKS_PER_S * at[0]), {os.getpid()}),
                  gpu_query=lambda: gpu, clock=clock, cpus=cpus)


def watched(foreign_cpus: float = 0.0, gpu: GpuState | None = None, seconds: int = 4) -> dict:
    """The summary a measurement of `seconds` on a steady host records, sampled every second."""
    now = [0.0]
    sampler = Sampler(steady_host(foreign_cpus, gpu=gpu, clock=lambda: now[0]))
    for _ in range(seconds):
        now[0] += 1
        sampler.sample()
    return sampler.summary()
