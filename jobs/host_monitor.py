"""Is the host ours while an engine is measured? Samples taken during the measurement.

The preflight (jobs/preflight.py) waits for a quiet host before a run; this watches
the run itself. `watch()` samples in a background thread every `every_s` seconds, and
once more when the measurement ends, so a short measurement has a sample too:

* foreign CPUs: the host's busy CPU time (/proc/stat: user, nice, system, irq, softirq,
  steal) minus the CPU time of this process and its descendants (/proc/<pid>/stat:
  utime, stime, and cutime, cstime of the children they reaped), in CPUs busy over the
  interval. Subtracting our tree from the kernel's total, rather than adding up every
  other process, counts what a sum over /proc/<pid> misses: processes that start and
  end between two samples, kernel threads, interrupts, and steal (another guest on our
  cores), all of which take CPU from the engine.
* sibling CPUs: the process trees of the tasks that run beside this one by design (a
  nightly run's other bench cells, on the other GPUs of the host: `siblings`, the live holders
  of their GPU leases) are left out of the foreign CPUs and recorded apart. A sibling counts
  from the sample it is first seen at and until the last one it is seen at; its CPU outside
  those (under one interval each side) reads foreign.
* on a GPU host (NVML): the GPU's processes outside our tree, and its utilization
  (ours included, so it is recorded, not judged).

Every input is injectable through `Inputs`; `machine()` builds the real ones, so tests
never read the host. A descendant orphaned out of our tree takes its CPU time with it
and reads as foreign: the error is toward noisy, never toward quiet.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from jobs.preflight import GpuState, busy_cpus_sampler, cpu_jiffies, nvml_session

# Often enough to catch a burst of a few seconds; one sample reads every /proc/<pid>/stat
# (2-6 ms with 90-180 processes, measured, the GIL held), about 1% of one core at this rate.
EVERY_S = 0.5


@dataclass
class Inputs:
    host_jiffies: Callable[[], tuple[int, int] | None]   # (busy, total) over all CPUs since boot; None: no /proc
    tree: Callable[[], tuple[int, set[int]]]              # (CPU jiffies of our process tree, its pids)
    gpu_query: Callable[[], GpuState | None]              # None: no NVML or no GPU
    clock: Callable[[], float]                            # seconds, monotonic
    cpus: int
    # CPU jiffies of each sibling's process tree, by the sibling's pid; {}: none runs beside us
    siblings: Callable[[], dict[int, int]] = dict


class SiblingTicks:
    """Each call: the CPU ticks the siblings' trees used since the previous call (or since it was
    made), over the siblings seen both times."""

    def __init__(self, trees: Callable[[], dict[int, int]]):
        self.trees = trees
        self.previous = trees()

    def __call__(self) -> int:
        current = self.trees()
        used = sum(ticks - self.previous[pid] for pid, ticks in current.items() if pid in self.previous)
        self.previous = current
        return used


class Sampler:
    """Foreign load between consecutive readings; `sample()` takes one."""

    def __init__(self, inputs: Inputs):
        self.inputs = inputs
        self.start = inputs.clock()
        self.previous = inputs.host_jiffies(), inputs.tree()[0]
        self.sibling_ticks = SiblingTicks(inputs.siblings)
        self.samples: list[tuple[float, float, list[int], float | None, float]] = []
        self.foreign_jiffies = self.sibling_jiffies = self.elapsed_jiffies = 0.0

    def sample(self) -> None:
        host, (own, pids) = self.inputs.host_jiffies(), self.inputs.tree()
        (before, own_before) = self.previous
        if host is None or before is None:
            return
        elapsed = (host[1] - before[1]) / self.inputs.cpus   # clock ticks each CPU had
        if elapsed < 1:
            return   # shorter than a tick tells nothing; the next sample covers it
        self.previous = host, own
        siblings = self.sibling_ticks()
        foreign = (host[0] - before[0]) - (own - own_before) - siblings
        # Sums, not clamped per sample: the readings are not atomic, so a tick
        # counted on one side of a sample is counted on the other side of the next.
        self.foreign_jiffies += foreign
        self.sibling_jiffies += siblings
        self.elapsed_jiffies += elapsed
        gpu = self.inputs.gpu_query()
        self.samples.append((round(self.inputs.clock() - self.start, 3), round(max(foreign, 0) / elapsed, 3),
                             sorted(set(gpu.pids) - pids) if gpu else [], gpu.utilization_pct if gpu else None,
                             round(max(siblings, 0) / elapsed, 3)))

    def summary(self) -> dict:
        """What runs.validity keeps per engine: every sample (t, foreign CPUs, foreign GPU pids,
        GPU utilization %, sibling CPUs), the maximum and time-weighted mean of the foreign
        CPUs, and the time-weighted mean of the siblings' (not judged: a reader's to see)."""
        def mean(jiffies: float) -> float | None:
            return round(max(jiffies, 0) / self.elapsed_jiffies, 3) if self.elapsed_jiffies else None
        return {"samples": [list(s) for s in self.samples],
                "foreign_cpus_max": max((s[1] for s in self.samples), default=None),
                "foreign_cpus_mean": mean(self.foreign_jiffies),
                "sibling_cpus_mean": mean(self.sibling_jiffies),
                "foreign_gpu_pids": sorted({pid for s in self.samples for pid in s[2]}),
                "gpu_present": any(s[3] is not None for s in self.samples)}


@contextlib.contextmanager
def watch(gpu_index: int | None = 0, every_s: float = EVERY_S, inputs: Inputs | None = None,
          siblings: Callable[[], Iterable[int]] = tuple) -> Iterator[Sampler]:
    """Sample the host while the body runs; the yielded Sampler's summary() is complete on exit.
    `siblings`: the pids of the tasks running beside this one by design, asked at each sample."""
    with contextlib.ExitStack() as held:
        sampler = Sampler(inputs or held.enter_context(machine(gpu_index, siblings)))
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                sampler.sample()

        thread = threading.Thread(target=loop, name="host-monitor", daemon=True)
        thread.start()
        try:
            yield sampler
        finally:
            stop.set()
            thread.join()
            sampler.sample()   # the tail since the last sample


@contextlib.contextmanager
def machine(gpu_index: int | None = 0, siblings: Callable[[], Iterable[int]] = tuple) -> Iterator[Inputs]:
    """The real host: /proc for the CPUs, our process tree and the trees of `siblings` (pids),
    NVML (held open meanwhile) for the GPU."""
    with nvml_session(gpu_index) as gpu:
        yield Inputs(host_jiffies=cpu_jiffies, tree=lambda: process_trees([os.getpid()])[os.getpid()],
                     gpu_query=gpu or (lambda: None), clock=time.monotonic, cpus=os.cpu_count() or 1,
                     siblings=lambda: sibling_tree_ticks(siblings()))


def busy_cpus_outside(siblings: Callable[[], Iterable[int]]) -> Callable[[], float]:
    """A preflight's load (jobs.preflight.Inputs.load) that leaves out the process trees of
    `siblings` (pids, asked at each sample), as the monitor's foreign CPUs do."""
    return busy_cpus_sampler(SiblingTicks(lambda: sibling_tree_ticks(siblings())))


def sibling_tree_ticks(siblings: Iterable[int]) -> dict[int, int]:
    """CPU clock ticks of the process tree of each sibling still running, by its pid; but
    one whose tree holds this process or lies inside its tree: that CPU is ours, not to be
    left out twice."""
    roots = set(siblings)
    if not roots:
        return {}
    me = os.getpid()
    trees = process_trees(roots | {me})
    ours = trees[me][1]
    return {root: ticks for root, (ticks, pids) in trees.items() if root not in ours and me not in pids}


def process_trees(roots: Iterable[int], proc: Path = Path("/proc")) -> dict[int, tuple[int, set[int]]]:
    """For each of `roots` still running: the CPU clock ticks of it and its descendants (their
    reaped children included), and their pids. One pass over /proc for all of them."""
    ppid_and_ticks = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue   # it ended while we looked
            # After "pid (comm) ": state, ppid, ... utime, stime, cutime, cstime are fields 14-17.
            fields = stat[stat.rindex(")") + 2:].split()
            ppid_and_ticks[int(entry.name)] = int(fields[1]), sum(int(v) for v in fields[11:15])
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in ppid_and_ticks.items():
        children.setdefault(ppid, []).append(pid)
    trees = {}
    for root in set(roots) & set(ppid_and_ticks):
        tree, todo = set(), [root]
        while todo:
            pid = todo.pop()
            tree.add(pid)
            todo += children.get(pid, [])
        trees[root] = sum(ppid_and_ticks[pid][1] for pid in tree), tree
    return trees
