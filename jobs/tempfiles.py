"""Temporary files named after the process that owns them, so that a later run can tell a
killed writer's leftover (remove it) from a live writer's file (leave it alone).

    .<target>.<host>~<pid>~<start>~<random>.tmp

`host` is the host name and the pid namespace (two containers may share a host name, not
their pids), `start` the process's start time: a pid reused by a newer process does not
keep a dead owner's files alive. Only Linux's /proc can say whether an owner lives; where
there is none, no owner is ever judged gone.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

OWNER = re.compile(r"(?P<host>[A-Za-z0-9-]+)~(?P<pid>\d+)~(?P<start>\d+)")
OWNED = re.compile(r"\.(?P<target>.+)\.(?P<owner>[A-Za-z0-9-]+~\d+~\d+)~[^.]+\.tmp")
_PROC = Path("/proc/self/stat").exists()


@functools.cache
def _host() -> str:
    namespace = os.stat("/proc/self/ns/pid").st_ino if Path("/proc/self/ns/pid").exists() else 0
    return f"{re.sub(r'[^A-Za-z0-9-]', '-', socket.gethostname())}-{namespace}"


def process_start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot); None when there is no such process,
    or only its zombie, which writes nothing more."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def owner() -> str:
    """This process, as temporary names carry it (computed per call: a fork is another owner)."""
    return f"{_host()}~{os.getpid()}~{process_start_time(os.getpid()) or 0}"


def owned_prefix(target: str) -> str:
    """The start of a temporary name for `target` owned by this process; tempfile.mkstemp
    adds the random part with this prefix and suffix=".tmp"."""
    return f".{target}.{owner()}~"


def owned_name(target: str) -> str:
    return f"{owned_prefix(target)}{uuid.uuid4().hex[:12]}.tmp"


def owner_alive(tag: str) -> bool:
    """Whether the process an owner() tag names may still be running."""
    match = OWNER.fullmatch(tag)
    if not match or not _PROC or match["host"] != _host():
        return True   # not ours to judge: another host's process, or no way to tell
    return process_start_time(int(match["pid"])) == match["start"]


def remove_dead_temporaries(directory: Path, target: str | None = None) -> int:
    """Removes the owned temporaries in `directory` (of `target` only, when given) whose owner
    is gone; a temporary directory goes with its contents. A live owner's are left alone.
    Returns how many it removed."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        match = OWNED.fullmatch(entry.name)
        if not match or (target is not None and match["target"] != target) or owner_alive(match["owner"]):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)
        removed += 1
    return removed
