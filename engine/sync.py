"""The one place the engine waits for the device, so host syncs are counted, not guessed.

Two kinds of wait, counted apart:
  * a sync: the host waits while no later work is queued, so the GPU drains and
    idles until the host launches again;
  * a lagged read: the host waits for step N's tokens while step N+1 is already
    queued behind it, so the GPU stays busy.
"""
from __future__ import annotations

import time

import torch


class HostSyncCounter:
    def __init__(self) -> None:
        self.count = 0          # syncs
        self.lagged_reads = 0
        self.wait_s = 0.0       # host seconds spent blocked in either

    def wait(self, event: torch.cuda.Event, work_queued_behind: bool) -> None:
        if work_queued_behind:
            self.lagged_reads += 1
        else:
            self.count += 1
        start = time.perf_counter()
        event.synchronize()
        self.wait_s += time.perf_counter() - start
