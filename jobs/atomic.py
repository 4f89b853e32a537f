"""Files that appear whole or not at all: write to a temporary name, then rename."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.tempfiles import owned_name, owned_prefix, remove_dead_temporaries


@contextlib.contextmanager
def atomic_parquet_writer(path: str | Path, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
    """A ParquetWriter whose file shows up at `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temporaries(path.parent, path.name)   # a killed writer's attempt at this file
    # Not mkstemp, which makes 0600 files: parts and outputs are read by other workers, so
    # they get the mode the process's umask gives, as any file it creates would.
    tmp = str(path.parent / owned_name(path.name))
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            yield writer
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_texts(contents: dict[Path, str]) -> None:
    """Writes each file under a temporary name first, then renames them all into place.

    Nothing is renamed until every file is written and synced, so a failure leaves
    the old files as they were (a crash between two renames can still mix old and new).
    """
    written: list[tuple[str, Path]] = []
    try:
        for path, text in contents.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_dead_temporaries(path.parent, path.name)
            fd, tmp = tempfile.mkstemp(prefix=owned_prefix(path.name), suffix=".tmp", dir=path.parent)
            written.append((tmp, path))
            os.fchmod(fd, 0o644)  # mkstemp makes 0600; these files are for readers
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        for tmp, path in written:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in written:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
