"""Private PostgreSQL and Redis servers, started from this machine's binaries, never ones
someone else started: PostgreSQL from Debian's `postgresql` package (initdb, pg_ctl),
Redis from `redis-server` (`make system-packages` installs both as root). Each listens on
127.0.0.1 on a free port. PostgreSQL will not run as root: as root its directory belongs to
the `postgres` user (so every folder above it must be searchable by that user).

The Airflow deployment (cluster.deployment) and the store tests (tests/pg_cluster.py) use them.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cluster.processes import Daemon


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(ready, timeout_s: float, what: str, check_alive=lambda: None) -> None:
    """Poll `ready()` until it is true; `check_alive()` raises when waiting is pointless."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout_s:.0f} s")
        time.sleep(0.25)


def postgres_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb"):
        return Path(shutil.which("initdb")).parent
    raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are missing: `apt-get install postgresql` "
                       "(`make system-packages` does it as root)")


def _as_owner() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass(frozen=True)
class PostgresServer:
    data: str
    port: int

    @property
    def url(self) -> str:
        """The server, without a database (append "/<database>")."""
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    @classmethod
    def start(cls, home: Path, log: Path, *, durable: bool = True) -> PostgresServer:
        """Start the cluster under `home` (created by initdb on first use) on a free port.
        `durable=False` turns fsync off, for throwaway data."""
        binaries, port, data = postgres_binaries(), free_port(), home / "data"
        home.mkdir(parents=True, exist_ok=True)
        log.touch()
        if os.geteuid() == 0:
            for path in (home, log):
                shutil.chown(path, "postgres", "postgres")

        def run(*command: str) -> None:
            subprocess.run([*_as_owner(), *command], check=True, capture_output=True, text=True)

        if not (data / "PG_VERSION").exists():
            run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync")
        # Enough connections for every Airflow component's pool, and for the store tests' concurrent writers.
        options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c max_connections=300"
        if not durable:
            options += " -c fsync=off"
        run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start")
        return cls(str(data), port)

    def stop(self, mode: str = "fast") -> None:
        """`fast` rolls back open transactions and shuts down cleanly; `immediate` just exits."""
        subprocess.run([*_as_owner(), str(postgres_binaries() / "pg_ctl"), "-D", self.data, "-m", mode, "-w", "stop"],
                       capture_output=True)

    def as_dict(self) -> dict:
        return asdict(self)


def create_databases(server_url: str, *names: str) -> None:
    """Create the databases missing on the server `server_url` names (a URL without a database)."""
    import psycopg
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as conn:
        existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
        for name in names:
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(directory: Path, log: Path) -> tuple[Daemon, str]:
    """A Redis that keeps nothing on disk (a broker's queues die with the deployment): (process, URL)."""
    binary = shutil.which("redis-server")
    if not binary:
        raise RuntimeError("redis-server is missing: `apt-get install redis-server` (`make system-packages` does it as root)")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    daemon = Daemon.spawn("redis", [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
                                    "--save", "", "--appendonly", "no"], dict(os.environ), log)

    def check_alive() -> None:
        if not daemon.alive():
            raise RuntimeError(f"redis-server exited; see {log}")

    wait_until(lambda: _redis_answers(port), 30, "redis-server", check_alive)
    return daemon, f"redis://127.0.0.1:{port}/0"
