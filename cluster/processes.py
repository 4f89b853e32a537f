"""Long-running processes a deployment starts and a later command stops.

Each runs in a session of its own, so its pid is its process group and a signal reaches
every process it forked. A record names the pid and the process's start time, so a pid the
kernel has since given to another process is never signalled.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs.tempfiles import process_start_time

# Processes this interpreter started: polled so that they are reaped when they exit.
_CHILDREN: dict[int, subprocess.Popen] = {}


def _descendants(pid: int) -> list[tuple[int, str]]:
    """Every live process below `pid`, with its start time."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        if (started := process_start_time(child)) is not None:
            found.append((child, started))
        todo.extend(parents.get(child, []))
    return found


@dataclass(frozen=True)
class Daemon:
    name: str
    pid: int
    started: str

    @classmethod
    def spawn(cls, name: str, argv: list[str], env: dict[str, str], log: Path) -> Daemon:
        with open(log, "ab") as out:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        _CHILDREN[process.pid] = process
        return cls(name, process.pid, process_start_time(process.pid) or "")

    @classmethod
    def from_dict(cls, d: dict) -> Daemon:
        return cls(**d)

    def as_dict(self) -> dict:
        return asdict(self)

    def alive(self) -> bool:
        if child := _CHILDREN.get(self.pid):
            child.poll()
        return process_start_time(self.pid) == self.started

    def kill(self) -> None:
        """SIGKILL, as when the machine dies: the process group and the group of every process
        below it (Airflow runs each task in a process group of its own), so nothing of it lives on."""
        _signal_groups(signal.SIGKILL, self.tree())

    def tree(self) -> list[tuple[int, str]]:
        """This process and every one below it, with their start times; empty once it is gone."""
        return [(self.pid, self.started), *_descendants(self.pid)] if self.alive() else []


def _signal_groups(sig: int, tree: list[tuple[int, str]]) -> None:
    """Signal the process group of each process of `tree` still alive (all in their daemon's session)."""
    for pid, started in tree:
        if process_start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), sig)


def stop_all(daemons: list[Daemon], timeout_s: float = 30.0) -> None:
    """SIGTERM to every daemon's group at once, then SIGKILL to whatever of their trees
    outlives `timeout_s` (a Celery worker waits for its running tasks, however long)."""
    trees = [daemon.tree() for daemon in daemons]
    for tree in trees:
        _signal_groups(signal.SIGTERM, tree[:1])
    everything = [process for tree in trees for process in tree]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(process_start_time(p) == s for p, s in everything):
        for daemon in daemons:
            daemon.alive()   # reaps our own children
        time.sleep(0.2)
    for tree in trees:
        _signal_groups(signal.SIGKILL, tree)
    for daemon in daemons:
        daemon.alive()
