"""GPU leases (jobs/gpu_lease.py) on a CPU host with a simulated device count (ROADGATE_GPU_COUNT):
N processes lease N distinct GPUs, each with CUDA_VISIBLE_DEVICES naming its own; one more waits,
for a bounded time and saying who holds them, until one is released; a SIGKILLed holder leaks
nothing; a host without GPUs is one slot; the live holders of a group's leases are known by the
kernel's lock table, not by a lease file's words alone. tests/gpu/test_gpu_lease.py leases the real GPU."""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import gpu_lease

REPO = Path(__file__).resolve().parent.parent
HOLDER = """
import json, logging, os, sys
from jobs.gpu_lease import Contended, lease
logging.basicConfig(level=logging.INFO, format="%(message)s")
try:
    with lease(timeout_s=float(sys.argv[1]), poll_s=0.05, group=sys.argv[2] or None) as held:
        print(json.dumps({"index": held.index, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "order": os.environ.get("CUDA_DEVICE_ORDER")}), flush=True)
        sys.stdin.readline()   # held until the test releases it, or kills this process
except Contended as e:
    print(json.dumps({"contended": str(e)}), flush=True)
"""


class Holder:
    """A process of its own that leases a GPU of a simulated host and holds it until released or killed."""

    def __init__(self, lease_dir: Path, gpus: int, timeout_s: float = 30, group: str = ""):
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
        env |= {"ROADGATE_GPU_COUNT": str(gpus), "ROADGATE_GPU_LEASE_DIR": str(lease_dir)}
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(timeout_s), group], cwd=REPO, env=env,
                                     text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def outcome(self, within_s: float = 30) -> dict | None:
        """What it says once it holds a lease or gave up; None while it still waits after `within_s`."""
        ready, _, _ = select.select([self.proc.stdout], [], [], within_s)
        return json.loads(self.proc.stdout.readline()) if ready else None

    def release(self) -> str:
        """Let it end; its log (stderr)."""
        return self.proc.communicate("\n", timeout=30)[1]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)   # no cleanup runs, as when the OOM killer or a node takes it
        self.proc.communicate(timeout=30)


@pytest.fixture
def holders(tmp_path):
    """holders(gpus, timeout_s=30, group=""): a new Holder on a simulated host of `gpus` GPUs (one lease directory)."""
    started: list[Holder] = []

    def start(gpus: int, timeout_s: float = 30, group: str = "") -> Holder:
        started.append(Holder(tmp_path / "leases", gpus, timeout_s, group))
        return started[-1]
    yield start
    for h in started:
        if h.proc.poll() is None:
            h.kill()


def test_n_processes_lease_n_distinct_gpus_each_seeing_only_its_own(holders):
    outcomes = [h.outcome() for h in [holders(3) for _ in range(3)]]
    assert sorted(o["index"] for o in outcomes) == [0, 1, 2]
    assert all(o["visible"] == str(o["index"]) and o["order"] == "PCI_BUS_ID" for o in outcomes)


def test_one_more_waits_saying_who_holds_them_until_one_is_released(holders):
    first, second = holders(2), holders(2)
    held = {first.outcome()["index"]: first, second.outcome()["index"]: second}
    third = holders(2, timeout_s=60)
    assert third.outcome(within_s=1) is None   # waiting
    held[1].release()
    assert third.outcome() == {"index": 1, "visible": "1", "order": "PCI_BUS_ID"}
    log = third.release()
    assert (f"all 2 GPUs this process can use are leased: GPU 0 by pid {held[0].proc.pid} on " in log
            and f"GPU 1 by pid {held[1].proc.pid} on " in log and "waiting up to 60s for one to be released" in log)


def test_the_wait_is_bounded(holders):
    holder = holders(1)
    assert holder.outcome()["index"] == 0
    refused = holders(1, timeout_s=0.3).outcome()["contended"]
    assert refused.startswith(f"GPU 0 is leased by pid {holder.proc.pid} on ") and refused.endswith(
        "; waited 0.3s for one")


def test_a_sigkilled_holder_leaks_no_lease(holders):
    holder = holders(1)
    assert holder.outcome()["index"] == 0
    holder.kill()
    assert holders(1, timeout_s=0).outcome()["index"] == 0   # free at once: the kernel dropped the flock


def test_a_groups_holders_are_the_live_ones_the_kernel_shows_holding_their_lease(holders, tmp_path, monkeypatch):
    monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path / "leases"))
    night, other_night, alone = holders(4, group="cells of night 1"), holders(4, group="cells of night 2"), holders(4)
    assert all(h.outcome() for h in (night, other_night, alone))
    assert gpu_lease.holders("cells of night 1") == {night.proc.pid}
    assert gpu_lease.holders("cells of night 2") == {other_night.proc.pid}
    leased_by_night = [p for p in (tmp_path / "leases").iterdir() if f"pid {night.proc.pid} " in p.read_text()]
    night.kill()
    # Its file still names it and the group, but the kernel freed its lock: a dead holder, or a
    # process that took its pid since, is no sibling.
    assert len(leased_by_night) == 1 and "for cells of night 1" in leased_by_night[0].read_text()
    assert gpu_lease.holders("cells of night 1") == set()
    # The lease file a new holder has not yet written to names the last one: not a holder either.
    with hold(tmp_path / "leases", leased_by_night[0].name):
        assert gpu_lease.holders("cells of night 1") == set()


def test_this_process_is_not_a_holder_of_its_own_group(simulated_gpus, tmp_path, monkeypatch):
    simulated_gpus(1)
    monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path))
    with gpu_lease.lease(group="cells of night 1") as held:
        assert f"pid {os.getpid()} " in held.path.read_text()
        assert gpu_lease.holders("cells of night 1") == set()


def test_a_host_without_gpus_is_one_slot_and_leaves_cuda_alone(holders):
    holder = holders(0)
    assert holder.outcome() == {"index": None, "visible": None, "order": None}
    refused = holders(0, timeout_s=0).outcome()["contended"]
    assert refused.startswith(f"the host's one slot (no GPU) is leased by pid {holder.proc.pid} on ")


# ---------------------------------------------------------------- in this process

@pytest.fixture
def host(simulated_gpus, tmp_path, monkeypatch):
    """host(n): this process on a simulated host of n GPUs, with a lease directory of its own; returns it."""
    def simulate(n: int) -> Path:
        simulated_gpus(n)
        monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path))
        return tmp_path
    return simulate


def hold(lease_dir: Path, name: str):
    """Another holder of a lease file (flock conflicts between two opens of it even in one process)."""
    f = open(lease_dir / name, "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return f


def test_a_process_stays_on_the_gpu_it_leased(host):
    host(3)
    with gpu_lease.lease(1) as held:
        assert (held.index, held.devices, os.environ["CUDA_VISIBLE_DEVICES"]) == (1, 3, "1")
    # CUDA may have started on GPU 1 meanwhile, and could not move: the process leases GPU 1 or none.
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(ValueError, match=r"GPU 0 is not one this process can use \(it can use \[1\]\)"):
        with gpu_lease.lease(0):
            pass
    with gpu_lease.lease() as again:
        assert again.index == 1


def test_an_operators_cuda_visible_devices_limits_the_choice(host, monkeypatch):
    lease_dir = host(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with hold(lease_dir, "gpu-2.lock"), gpu_lease.lease(timeout_s=0) as held:
        assert held.index == 3 and os.environ["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.parametrize("visible, message", [
    ("GPU-5d3c8a2e", "a GPU lease needs device indices"),
    ("0,7", "names a GPU this host lacks \\(it has 4\\)"),
])
def test_cuda_visible_devices_it_cannot_lease_by_is_refused(host, monkeypatch, visible, message):
    host(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(ValueError, match=message):
        with gpu_lease.lease():
            pass


def test_a_gpu_the_host_lacks_or_a_bad_count_is_refused(host, monkeypatch):
    host(2)
    with pytest.raises(ValueError, match="GPU 5 is not one this process can use"):
        with gpu_lease.lease(5):
            pass
    monkeypatch.setenv("ROADGATE_GPU_COUNT", "two")
    with pytest.raises(ValueError, match="ROADGATE_GPU_COUNT must be a whole number"):
        gpu_lease.device_count()


def test_a_waiter_says_so_once_and_gives_up_at_its_timeout(host, caplog):
    lease_dir = host(1)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
    with hold(lease_dir, "gpu-0.lock"), caplog.at_level("INFO", logger="jobs.gpu_lease"):
        with pytest.raises(gpu_lease.Contended, match="waited 5s for one"):
            with gpu_lease.lease(timeout_s=5, poll_s=1, clock=lambda: now[0], sleep=sleep):
                pass
    assert now[0] == 5
    (waiting,) = [r.getMessage() for r in caplog.records]
    assert waiting.endswith("waiting up to 5s for one to be released")


def test_a_task_holding_a_gpu_returns_its_lease_record(host):
    host(0)

    @gpu_lease.holding_a_gpu
    def task(x: int) -> dict:
        return {"x": x}
    result = task(7)
    gpu = result.pop("gpu")
    assert result == {"x": 7} and (gpu["index"], gpu["devices"], gpu["pid"]) == (None, 0, os.getpid())
    assert gpu["acquired_at"] <= gpu["released_at"]


def test_cuda_is_not_initialised_on_a_cpu_host():
    assert gpu_lease.cuda_initialised() is False
