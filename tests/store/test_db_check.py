"""`roadgate db check` finds orphan Parquet and leftover temporary files, and quarantines them: moved, never deleted."""
import hashlib
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.cli import main
from jobs.store import open_ready_store, record_run
from tests.store_support import metrics, nightly

HOURS_AGO = time.time() - 2 * 3600


def files(root: Path) -> list[str]:
    """Every file's content hash, whatever its path: what a move keeps and a delete loses."""
    return sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
                  and not p.name.startswith("roadgate.db"))


def plant(path: Path, content: bytes | None = None, old: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        pq.write_table(pa.table({"request_id": [7]}), path)
    else:
        path.write_bytes(content)
    if old:
        os.utime(path, (HOURS_AGO, HOURS_AGO))
    return path


@pytest.fixture
def data(db_url, tmp_path, monkeypatch):
    """A data dir with one recorded run, two hours old like everything planted in it."""
    data = tmp_path / "data"
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(data))
    monkeypatch.setenv("ROADGATE_DB_URL", db_url)
    monkeypatch.delenv("ROADGATE_DB_MIGRATE_URL", raising=False)
    monkeypatch.delenv("ROADGATE_PARQUET_ROOT", raising=False)
    store = open_ready_store()
    record_run(store, nightly(0), metrics(output_tok_s=1.0), pa.table({"request_id": [0, 1, 2]}))
    store.engine.dispose()
    (referenced,) = (data / "requests").rglob("requests.parquet")
    os.utime(referenced, (HOURS_AGO, HOURS_AGO))
    return data, referenced


def test_a_clean_store_has_nothing_to_report(data, capsys):
    assert main(["db", "check"]) == 0
    assert "no stray files" in capsys.readouterr().out


def test_strays_are_found_and_quarantined_without_touching_anything_else(data, capsys):
    data, referenced = data
    referenced_bytes, referenced_mtime = referenced.read_bytes(), referenced.stat().st_mtime
    orphan = plant(data / "requests" / "date=2025-01-01" / "run_id=crashed-before-sql" / "requests.parquet")
    parquet_tmp = plant(referenced.parent / ".requests.0123abcd.tmp", b"half a parquet file")
    atomic_tmp = plant(data / "report" / ".index.html.k2j4h5.tmp", b"<html>half")
    in_flight = plant(data / "requests" / "date=2025-01-02" / "run_id=being-written" / "requests.parquet", old=False)
    batch_output = plant(data / "example_batch" / "part-00000-of-00001.parquet")   # not the store's: no orphan
    everything = files(data)

    assert main(["db", "check"]) == 1
    out = capsys.readouterr().out
    for path in (orphan, parquet_tmp, atomic_tmp):
        assert str(path) in out
    assert str(in_flight) not in out and str(batch_output) not in out and str(referenced) not in out
    assert files(data) == everything and orphan.exists()   # listing moves nothing

    assert main(["db", "check", "--quarantine"]) == 1
    (folder,) = (data / "quarantine").iterdir()
    for path in (orphan, parquet_tmp, atomic_tmp):
        assert not path.exists() and (folder / path.relative_to(data)).is_file()
    assert files(data) == everything                       # moved, none deleted
    assert referenced.read_bytes() == referenced_bytes and referenced.stat().st_mtime == referenced_mtime
    assert in_flight.exists() and batch_output.exists()
    capsys.readouterr()

    assert main(["db", "check"]) == 0                      # the quarantine is not searched again
    assert "1 files newer than 60 minutes left alone" in capsys.readouterr().out
