"""Benchmark preflight: is the host quiet enough to measure, and is the GPU ours alone.

`check` waits for a quiet window: every sample over `window_s` seconds (one every
`sample_every_s`) must show the CPU load below `load_threshold` and the GPU's
utilization at most `max_gpu_util` percent; a noisy sample restarts the window.
It gives up after `timeout_s`. A process of someone else's on the GPU ends the
check at once as contended. Without NVML or a GPU the GPU part is reported as
"no GPU" and passes as not applicable. The outcome records the thresholds it was
judged with; a run whose preflight was looser than DEFAULTS is no evidence, and the
host during the run itself is jobs/host_monitor.py's.

The GPU checked is the one the caller leased (jobs/gpu_lease.py): a benchmark holds its
lease for as long as it runs, so a preflight never checks a GPU that a running benchmark,
or a batch shard, has.

Every input (load, clock, sleep, GPU query) is injectable through `Inputs`;
`machine()` builds the real ones, so tests never read the host.

Exit codes of `roadgate preflight`:
  0  quiet      the host was quiet for the whole window
  2  usage      bad arguments
  3  contended  other tasks lease the GPU(s), or a foreign process is on the GPU
  4  noisy      the window never became quiet before the timeout
(1 is left to Python's own crashes, so a failing preflight is told apart from a noisy host.)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from jobs import gpu_lease
from jobs.errors import UsageError

EXIT_CODES = {"quiet": 0, "contended": 3, "noisy": 4}
# What `roadgate preflight` and `roadgate bench --preflight` wait for by default.
DEFAULTS = {"window_s": 30.0, "load_threshold": 1.0, "timeout_s": 600.0, "sample_every_s": 5.0, "max_gpu_util": 10.0}
EXIT_HELP = "exit codes: 0 quiet, 2 usage error, 3 contended (GPU leased by another task or foreign GPU process), 4 never quiet"


@dataclass
class GpuState:
    pids: list[int]             # processes using the GPU, ours included
    utilization_pct: float


@dataclass
class Inputs:
    load: Callable[[], float]                       # current load, in busy CPUs
    clock: Callable[[], float]                      # seconds, monotonic
    sleep: Callable[[float], None]
    gpu_query: Callable[[int | None], GpuState | None]   # None: no NVML or no GPU


@dataclass
class PreflightOutcome:
    status: str                 # quiet | noisy | contended
    waited_s: float
    reason: str
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, load)
    gpu: dict = field(default_factory=dict)
    # What it was judged with (window_s, load_threshold, max_gpu_util, sample_every_s): a run
    # whose preflight was looser than DEFAULTS is no evidence (jobs/validity.py).
    thresholds: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    @property
    def record_status(self) -> str:
        """The run record's preflight_status: it knows only quiet, noisy and skipped."""
        return "quiet" if self.status == "quiet" else "noisy"

    def as_dict(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


def check(window_s: float, load_threshold: float, timeout_s: float, sample_every_s: float,
          gpu_index: int | None = 0, *, max_gpu_util: float = DEFAULTS["max_gpu_util"],
          inputs: Inputs | None = None) -> PreflightOutcome:
    """`gpu_index`: the GPU to check (None: none, on a host without GPUs)."""
    if window_s < 0 or timeout_s < 0 or sample_every_s <= 0 or (gpu_index is not None and gpu_index < 0):
        raise ValueError("window and timeout must be >= 0, the sampling interval > 0, the GPU index >= 0")
    inputs = inputs or machine()
    thresholds = {"window_s": window_s, "load_threshold": load_threshold, "max_gpu_util": max_gpu_util,
                  "sample_every_s": sample_every_s}
    start = inputs.clock()
    samples: list[tuple[float, float]] = []
    quiet_since = None
    while True:
        t = round(inputs.clock() - start, 3)
        load = inputs.load()
        samples.append((t, round(load, 3)))
        gpu = inputs.gpu_query(gpu_index)
        gpu_report = _gpu_report(gpu_index, gpu)
        if gpu_report.get("foreign_pids"):
            return PreflightOutcome("contended", t, f"foreign processes on GPU {gpu_index}: "
                                    f"{gpu_report['foreign_pids']}", samples, gpu_report, thresholds)
        gpu_busy = gpu is not None and gpu.utilization_pct > max_gpu_util
        if load < load_threshold and not gpu_busy:
            quiet_since = t if quiet_since is None else quiet_since
            if t - quiet_since >= window_s:
                return PreflightOutcome("quiet", t, f"quiet for {t - quiet_since:g}s", samples, gpu_report,
                                        thresholds)
        else:
            quiet_since = None
        if t >= timeout_s:
            return PreflightOutcome("noisy", t, f"never quiet for {window_s:g}s within {timeout_s:g}s",
                                    samples, gpu_report, thresholds)
        # The last sample lands on the timeout itself, never past it.
        inputs.sleep(min(sample_every_s, timeout_s - t))


def on_a_leased_gpu(held: contextlib.ExitStack, gpu: int | None) -> tuple[gpu_lease.Lease, PreflightOutcome]:
    """What `--preflight` does before a measurement: lease GPU `gpu` (None: the lowest free one)
    for the rest of `held`, refused at once (a UsageError) when it is taken. The lease comes
    before this process initialises CUDA, so its engines run on the leased GPU as device 0.
    Then wait for a quiet host at DEFAULTS and print the outcome."""
    try:
        leased = held.enter_context(gpu_lease.lease(gpu, timeout_s=0))
    except (gpu_lease.Contended, ValueError) as e:
        raise UsageError(f"--preflight: {e}") from None
    outcome = check(**DEFAULTS, gpu_index=leased.index)
    print(f"preflight: {outcome.status} ({outcome.reason})")
    return leased, outcome


def _gpu_report(gpu_index: int | None, gpu: GpuState | None) -> dict:
    if gpu is None:
        return {"index": gpu_index, "present": False, "reason": "no GPU (check not applicable)"}
    # NVML reports host pids; inside a PID namespace our own pid differs and would look foreign.
    foreign = sorted(pid for pid in gpu.pids if pid != os.getpid())
    return {"index": gpu_index, "present": True, "utilization_pct": gpu.utilization_pct, "foreign_pids": foreign}


def machine(load: Callable[[], float] | None = None) -> Inputs:
    """The real host: busy CPUs from /proc/stat (or `load`), the monotonic clock, real sleep, NVML."""
    return Inputs(load=load or busy_cpus_sampler(), clock=time.monotonic, sleep=time.sleep, gpu_query=nvml_query)


def busy_cpus_sampler(left_out: Callable[[], int] = lambda: 0) -> Callable[[], float]:
    """Busy CPUs since the previous call: the load-average unit, but sampled, not a 1-minute average.
    `left_out`: the CPU ticks of processes not to count (a nightly cell's siblings) since its
    own previous call, or since it was made (jobs.host_monitor.busy_cpus_outside).

    Too short an interval (or no /proc/stat) falls back to the 1-minute load average, which
    counts every process.
    """
    previous = cpu_jiffies()

    def busy_cpus() -> float:
        nonlocal previous
        current = cpu_jiffies()
        if previous is None or current is None or current[1] - previous[1] < 10 * (os.cpu_count() or 1):
            return os.getloadavg()[0]
        busy, total = current[0] - previous[0] - left_out(), current[1] - previous[1]
        previous = current
        return max(busy, 0) / total * (os.cpu_count() or 1)

    return busy_cpus


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except OSError:
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def nvml_query(gpu_index: int | None) -> GpuState | None:
    with nvml_session(gpu_index) as query:
        return query() if query else None


@contextlib.contextmanager
def nvml_session(gpu_index: int | None) -> Iterator[Callable[[], GpuState] | None]:
    """NVML held open (its start-up costs some 35 ms, too much to pay on every sample of a
    run): a query of GPU `gpu_index`, or None without NVML, a GPU or an index."""
    if gpu_index is None:
        yield None
        return
    try:
        import pynvml  # nvidia-ml-py; optional, so CPU-only hosts run without it
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count and gpu_index >= count:
            raise ValueError(f"GPU {gpu_index} does not exist ({count} GPUs)")
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index) if count else None

        def query() -> GpuState:
            processes = (pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                         + pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
            utilization = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            return GpuState(pids=sorted({p.pid for p in processes}), utilization_pct=float(utilization))

        yield query if count else None
    finally:
        pynvml.nvmlShutdown()


def register(sub) -> None:
    p = sub.add_parser("preflight", help="wait for a quiet host and a free GPU; print the outcome as JSON",
                       description=__doc__.split("\n\n")[0], epilog=EXIT_HELP)
    p.add_argument("--window-s", type=float, default=DEFAULTS["window_s"], help="seconds the host must stay quiet")
    p.add_argument("--load-threshold", type=float, default=DEFAULTS["load_threshold"],
                   help="quiet below this many busy CPUs")
    p.add_argument("--timeout-s", type=float, default=DEFAULTS["timeout_s"], help="give up (exit 4) after this long")
    p.add_argument("--sample-every-s", type=float, default=DEFAULTS["sample_every_s"])
    p.add_argument("--gpu", type=int, help="the GPU to lease and check (default: the lowest free one)")
    p.add_argument("--max-gpu-util", type=float, default=DEFAULTS["max_gpu_util"], help="quiet at or below this GPU utilization (%%)")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:

    try:
        # Leased while checking, without waiting: a GPU that running tasks hold makes it contended.
        with gpu_lease.lease(args.gpu, timeout_s=0) as leased:
            outcome = check(args.window_s, args.load_threshold, args.timeout_s, args.sample_every_s, leased.index,
                            max_gpu_util=args.max_gpu_util, inputs=machine())
    except gpu_lease.Contended as e:
        outcome = PreflightOutcome("contended", 0.0, str(e), gpu={"index": args.gpu})
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(outcome.as_dict()))
    return outcome.exit_code
