"""The PostgreSQL server the tests use: their own, never one someone else started.

ROADGATE_TEST_PG_URL (e.g. postgresql://postgres@127.0.0.1:5432) names a server to use
instead. Otherwise the first test that needs PostgreSQL starts a private, throwaway
cluster from the installed server binaries (Debian's `postgresql` package: `make setup`
installs it when missing, as root): a fresh data directory under /tmp, a free port on
127.0.0.1, owned by the `postgres` user when the tests run as root (initdb refuses root),
and stopped and removed when the test process exits.
"""
from __future__ import annotations

import atexit
import functools
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


@functools.cache
def server_url() -> str:
    """A server URL without a database (append "/<database>")."""
    return os.environ.get("ROADGATE_TEST_PG_URL") or _start_private_cluster()


def _server_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb"):
        return Path(shutil.which("initdb")).parent
    raise RuntimeError("the tests need PostgreSQL's server binaries (initdb, pg_ctl): `apt-get install "
                       "postgresql` (make setup does it as root), or set ROADGATE_TEST_PG_URL to a server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_private_cluster() -> str:
    binaries, port = _server_binaries(), _free_port()
    home = Path(tempfile.mkdtemp(prefix="roadgate-test-pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:   # PostgreSQL will not run as root: the cluster belongs to `postgres`
        shutil.chown(home, "postgres", "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    data = home / "data"

    def run(*command: str) -> None:
        subprocess.run([*as_owner, *command], check=True, capture_output=True, text=True)

    run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync")
    # Throwaway data: no fsync. Enough connections for the concurrency tests' eight writers and pools.
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
    run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(home / "server.log"), "-w", "start")

    def stop() -> None:
        subprocess.run([*as_owner, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(home, ignore_errors=True)

    atexit.register(stop)
    url = f"postgresql://postgres@127.0.0.1:{port}"
    os.environ["ROADGATE_TEST_PG_URL"] = url   # child processes of the tests use this server, not one of their own
    return url
