"""A store that cannot be used is one line and exit status 2, in seconds, before any engine runs."""
import multiprocessing
import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import jobs.bench
from jobs.cli import main
from jobs.errors import StoreUnavailable
from jobs.store import open_ready_store
from tests.pg_cluster import server_url

# (ROADGATE_DB_URL, a database on the tests' server as "pg:<name>", or a data dir under tmp_path
# given as "data:<relative path>"), the message's gist
BAD_STORES = [
    pytest.param("not a url", "malformed database URL", id="malformed"),
    pytest.param("nosuchdb://u@h/db", "unknown database driver 'nosuchdb'", id="unknown-driver"),
    pytest.param("mysql://u:secret@h/db", "the driver of 'mysql' is not installed", id="driver-not-installed"),
    pytest.param("postgresql://postgres@127.0.0.1:1/roadgate", "port 1 failed: Connection refused", id="unreachable"),
    pytest.param(f"pg:roadgate_missing_{uuid.uuid4().hex[:8]}", "does not exist", id="missing-database"),
    pytest.param("data:a-file", "is a file, not a directory", id="data-dir-is-a-file"),
]


def use_store(spec: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ROADGATE_DB_MIGRATE_URL", raising=False)
    monkeypatch.delenv("ROADGATE_PARQUET_ROOT", raising=False)
    if spec.startswith("data:"):
        (tmp_path / "a-file").write_text("not a directory")
        monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / spec.removeprefix("data:")))
        monkeypatch.delenv("ROADGATE_DB_URL", raising=False)
    else:   # "pg:<name>": a database the tests' PostgreSQL server does not have
        monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / "data"))
        monkeypatch.setenv("ROADGATE_DB_URL", f"{server_url()}/{spec[3:]}" if spec.startswith("pg:") else spec)


@pytest.mark.parametrize("spec, gist", BAD_STORES)
def test_bench_refuses_a_bad_store_before_any_engine_runs(spec, gist, tmp_path, monkeypatch, capsys):
    engines_run = []
    monkeypatch.setattr(jobs.bench, "run_engine", lambda *args, **kwargs: engines_run.append(args))
    use_store(spec, tmp_path, monkeypatch)
    import torch  # noqa: F401  (bench imports it first thing; its import is not the store's time)
    started = time.perf_counter()
    assert main(["bench", "--workload", "cpu-small", "--engine", "ours", "--backend", "torch"]) == 2
    assert time.perf_counter() - started < 15
    err = capsys.readouterr().err.strip()
    assert gist in err and len(err.splitlines()) == 1, err
    assert "secret" not in err and engines_run == []


@pytest.mark.parametrize("spec, gist", BAD_STORES)
def test_store_commands_refuse_a_bad_store_in_one_line(spec, gist, tmp_path, monkeypatch, capsys):
    use_store(spec, tmp_path, monkeypatch)
    assert main(["gates", "status"]) == 2
    err = capsys.readouterr().err.strip()
    assert gist in err and len(err.splitlines()) == 1, err


def test_a_bad_db_url_option_is_one_line(capsys):
    assert main(["db", "upgrade", "--db-url", "postgresql://postgres@127.0.0.1:1/roadgate"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def open_as_nobody(directory: str, queue) -> None:
    """In a child: open a store in `directory` as an unprivileged user (root may write anywhere)."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    try:
        open_ready_store(f"sqlite:///{directory}/roadgate.db", f"{directory}/requests")
        queue.put("opened")
    except StoreUnavailable as e:
        queue.put(str(e))


def test_a_read_only_data_directory_is_refused():
    with tempfile.TemporaryDirectory() as top:   # under /tmp: an unprivileged user can reach it
        os.chmod(top, 0o755)
        data = Path(top) / "data"
        data.mkdir(mode=0o555)
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=open_as_nobody, args=(str(data), queue))
        child.start()
        message = queue.get(timeout=60)
        child.join(60)
        assert message.endswith(f"{data} is not writable")
        assert list(data.iterdir()) == []


def test_a_sqlite_path_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(StoreUnavailable, match="is a directory"):
        open_ready_store(f"sqlite:///{tmp_path}", str(tmp_path / "requests"))
