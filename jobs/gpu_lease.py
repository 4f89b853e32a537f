"""One GPU per task: an exclusive lease on one device of this host, held for the task's lifetime.

A GPU task (a batch shard, a nightly bench cell, the preflight's poke, `roadgate bench
--preflight`, `roadgate preflight`) leases the lowest free device before anything in its
process initialises CUDA, and sets CUDA_VISIBLE_DEVICES to it: N tasks on an N-GPU host
(a `gpu` pool of N slots) run on N distinct GPUs, each seeing its own as device 0.

* A lease is an flock on <lease dir>/gpu-<index>.lock. The kernel drops it when its holder
  exits or dies, so a SIGKILLed task never leaks its GPU. The lease directory is the host's
  own (ROADGATE_GPU_LEASE_DIR, default /tmp/roadgate-gpu-leases), not under the data
  directory, which many hosts may share while a GPU is one host's. Every user of the host
  shares it, so a bench run by hand and a worker's task exclude each other.
* The devices are ROADGATE_GPU_COUNT of them (a simulated count, for tests), else what NVML
  counts. Where it counts none (a CPU host, or no NVML to count with), the host is one slot,
  cpu.lock: GPU tasks there run one at a time, so benches still never overlap, and a GPU
  that could not be counted is never shared either.
* Tasks that run side by side by design (a nightly run's bench cells) lease under one `group`,
  which the lease file names after its holder. `holders(group)` gives the pids of the group's
  live holders, which the host monitor and a cell's preflight leave out of the foreign load: a
  file's words outlive their holder, so a pid counts only while the kernel's lock table
  (/proc/locks) shows that very pid holding the file's lock.
* CUDA reads CUDA_VISIBLE_DEVICES once, when it initialises, and a process cannot change
  devices afterwards. So the variable stays set when a lease ends, and a process whose
  CUDA_VISIBLE_DEVICES names devices already (an earlier lease, or an operator's choice)
  leases among those only; one that initialised CUDA before any lease (dag.test() runs every
  task in one process) can lease only the device it has as device 0.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Callable, Iterator

from jobs import settings

log = logging.getLogger(__name__)

# How long a task waits for a device by default: a nightly's worth, as its preflight sensor does.
WAIT_S = 6 * 3600.0
CUDA_ERROR_NOT_INITIALIZED = 3
# What a holder writes into its lease file (lease()): read back by waiters and by holders().
HOLDER_WORDS = re.compile(r"pid (?P<pid>\d+) on \S+ since \S+(?: for (?P<group>.+))?")


class Contended(Exception):
    """No device was free within the wait."""


@dataclass
class Lease:
    index: int | None           # NVML's index, which the lease makes CUDA's device 0; None: the CPU slot
    devices: int                # GPUs counted on this host (0: none)
    path: Path
    acquired_at: datetime
    released_at: datetime | None = None

    def record(self) -> dict:
        """What a run keeps of its lease: enough to show later that no two tasks held one device at once."""
        return {"index": self.index, "devices": self.devices, "host": socket.gethostname(), "pid": os.getpid(),
                "acquired_at": self.acquired_at.isoformat(),
                "released_at": self.released_at.isoformat() if self.released_at else None}


def device_count() -> int:
    """The GPUs of this host: ROADGATE_GPU_COUNT when set, else NVML's count; 0 without NVML."""
    simulated = settings.gpu_count()
    if simulated is not None:
        return simulated
    try:
        import pynvml  # nvidia-ml-py; optional, so CPU-only hosts run without it
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


def cuda_initialised() -> bool:
    """Whether this process has initialised the CUDA driver (torch and PyCUDA both go through
    it), asked without initialising it."""
    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False   # not even loaded
    return driver.cuDeviceGetCount(ctypes.byref(ctypes.c_int())) != CUDA_ERROR_NOT_INITIALIZED


def usable_devices(count: int) -> list[int]:
    """The devices this process may lease (see the module's docstring); [] where there are none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if count == 0 or visible is None:
        devices = list(range(count))
    else:
        try:
            devices = [int(v) for v in visible.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r}: a GPU lease needs device indices") from None
        if any(not 0 <= d < count for d in devices):
            raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} names a GPU this host lacks (it has {count})")
    return devices[:1] if cuda_initialised() else devices


@contextlib.contextmanager
def lease(index: int | None = None, timeout_s: float = WAIT_S, *, group: str | None = None, poll_s: float = 1.0,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Iterator[Lease]:
    """Hold device `index`, or the lowest free one, exclusively; wait up to `timeout_s` for
    one, then raise Contended. On a host without GPUs, its one CPU slot. `group`: the tasks
    this one runs beside by design (see holders())."""
    count = device_count()
    devices = usable_devices(count)
    if index is not None:
        if index not in devices:
            raise ValueError(f"GPU {index} is not one this process can use (it can use {devices or 'none'})")
        devices = [index]
    lease_dir = settings.gpu_lease_dir()
    lease_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):   # one of another user's: they opened it to all (as /tmp is)
        lease_dir.chmod(0o1777)
    paths = {d: lease_dir / f"gpu-{d}.lock" for d in devices} or {None: lease_dir / "cpu.lock"}
    with contextlib.ExitStack() as files:
        slots = {d: files.enter_context(_open(path)) for d, path in paths.items()}
        device = _take(slots, timeout_s, poll_s, clock, sleep)
        f, path = slots[device], paths[device]
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {_utcnow().isoformat()}"
                + (f" for {group}" if group else ""))
        f.flush()
        if device is None:
            log.info("no GPU on this host: leased its one slot (%s); GPU tasks here run one at a time", path)
        else:
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"   # CUDA numbers the devices as NVML does
            os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
            log.info("leased GPU %d of %d (%s); CUDA_VISIBLE_DEVICES=%d", device, count, path, device)
        held = Lease(device, count, path, _utcnow())
        try:
            yield held
        finally:
            held.released_at = _utcnow()
            # Closing the file (the ExitStack) releases the flock.


def holders(group: str) -> set[int]:
    """The pids of the other processes of this host that hold a lease taken for `group`: those
    whose lease file names them and the group while the kernel shows that pid holding its lock
    (a dead holder's lock is freed, its words are not). No pid where /proc/locks cannot be read,
    nor one it shows as 0: a holder in another pid namespace (another container of the docker
    runner)."""
    locked = _flock_holders()
    found = set()
    for path in settings.gpu_lease_dir().glob("*.lock"):
        try:
            words, stat = path.read_text().strip(), path.stat()
        except OSError:
            continue   # not there, or not ours to read: no sibling of ours
        named = HOLDER_WORDS.fullmatch(words)
        if named and named["group"] == group and \
                locked.get((os.major(stat.st_dev), os.minor(stat.st_dev), stat.st_ino)) == int(named["pid"]):
            found.add(int(named["pid"]))
    return found - {os.getpid()}


def _flock_holders() -> dict[tuple[int, int, int], int]:
    """(device major, minor, inode) -> the pid holding an exclusive flock on that file."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return {}
    held = {}
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146475 0 EOF"; a waiter's line has "->" after the number.
        fields = line.split()
        if fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"]:
            major, minor, inode = fields[5].split(":")
            held[int(major, 16), int(minor, 16), int(inode)] = int(fields[4])
    return held


def holding_a_gpu(task: Callable[..., dict]) -> Callable[..., dict]:
    """`task` run under a lease taken before it starts (its default wait), the lease's record
    added to its result under "gpu"."""
    @functools.wraps(task)
    def leased(*args, **kwargs) -> dict:
        with lease() as held:
            result = task(*args, **kwargs)
        return {**result, "gpu": held.record()}
    return leased


def _open(path: Path) -> IO[str]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):   # not the umask's mode: other users' tasks lease it too
        os.fchmod(fd, 0o666)
    return os.fdopen(fd, "r+")


def _take(slots: dict[int | None, IO[str]], timeout_s: float, poll_s: float, clock: Callable[[], float],
          sleep: Callable[[float], None]) -> int | None:
    """The first slot that could be locked, trying every `poll_s` until `timeout_s` is over."""
    deadline = clock() + timeout_s
    waiting = False
    while True:
        for device, f in slots.items():
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return device
            except BlockingIOError:
                pass
        taken = _taken(slots)
        if clock() >= deadline:
            raise Contended(f"{taken}; waited {timeout_s:g}s for one")
        if not waiting:
            log.info("%s; waiting up to %gs for one to be released", taken, timeout_s)
            waiting = True
        sleep(poll_s)


def _taken(slots: dict[int | None, IO[str]]) -> str:
    """Who holds the slots, as far as their files say (a holder writes itself there)."""
    def holder(f: IO[str]) -> str:
        f.seek(0)
        return f.read().strip() or "a holder that has not yet said who"
    if None in slots:
        return f"the host's one slot (no GPU) is leased by {holder(slots[None])}"
    if len(slots) == 1:
        ((device, f),) = slots.items()
        return f"GPU {device} is leased by {holder(f)}"
    held = ", ".join(f"GPU {d} by {holder(f)}" for d, f in slots.items())
    return f"all {len(slots)} GPUs this process can use are leased: {held}"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)   # the store keeps naive UTC
