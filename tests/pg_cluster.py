"""The PostgreSQL server the tests use: their own, never one someone else started.

ROADGATE_TEST_PG_URL (e.g. postgresql://postgres@127.0.0.1:5432) names a server to use
instead. Otherwise the first test that needs PostgreSQL starts a private, throwaway
cluster (cluster.servers: Debian's `postgresql` binaries, a free port on 127.0.0.1, owned
by the `postgres` user when the tests run as root) in a fresh directory under /tmp, and
stops and removes it when the test process exits.
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

from cluster.servers import PostgresServer


@functools.cache
def server_url() -> str:
    """A server URL without a database (append "/<database>")."""
    return os.environ.get("ROADGATE_TEST_PG_URL") or _start_private_cluster()


def _start_private_cluster() -> str:
    # Under /tmp, not pytest's tmp_path: the `postgres` user must be able to reach it.
    home = Path(tempfile.mkdtemp(prefix="roadgate-test-pg-"))
    server = PostgresServer.start(home, home / "server.log", durable=False)

    def stop() -> None:
        server.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)

    atexit.register(stop)
    os.environ["ROADGATE_TEST_PG_URL"] = server.url   # child processes of the tests use this server, not one of their own
    return server.url
