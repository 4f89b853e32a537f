"""Per-request rows as a Parquet dataset: <root>/date=YYYY-MM-DD/run_id=<id>/requests.parquet.

The root is a local path or any URI pyarrow has a filesystem for (s3://, gs://, ...).
A file is written under a dot-prefixed temporary name and then moved into place,
so readers (which skip dot files) see a run's rows whole or not at all. Both the
temporary's name and the file's footer name the process that wrote it (jobs.tempfiles),
so that what a killed writer left can be told from what a live one is writing.
"""
from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.tempfiles import owned_name, owner

WRITER_META = b"roadgate.writer"   # footer key: the owner() tag of the process that wrote the file


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), str(Path(root).resolve())


def write_requests(root: str, run_id: str, day: date, table: pa.Table) -> str:
    """Writes one run's request rows; returns the file's URI (a local path for local roots)."""
    fs, base = _filesystem(root)
    relative = f"date={day.isoformat()}/run_id={run_id}"
    directory = f"{base}/{relative}"
    fs.create_dir(directory, recursive=True)
    temporary = f"{directory}/{owned_name('requests')}"
    stamped = table.replace_schema_metadata({**(table.schema.metadata or {}), WRITER_META: owner()})
    pq.write_table(stamped, temporary, filesystem=fs)
    fs.move(temporary, f"{directory}/requests.parquet")
    prefix = root.rstrip("/") if "://" in root else base
    return f"{prefix}/{relative}/requests.parquet"


def writer_of(path: Path) -> str:
    """The owner tag of the process that wrote a requests file; "" when unknown."""
    try:
        return (pq.read_schema(path).metadata or {}).get(WRITER_META, b"").decode()
    except (OSError, pa.ArrowInvalid):
        return ""


def requests_dataset(root: str) -> ds.Dataset:
    """All request rows under root, with `date` and `run_id` as partition columns."""
    fs, base = _filesystem(root)
    return ds.dataset(base, filesystem=fs, format="parquet", partitioning="hive")


def read_run_requests(root: str, run_id: str) -> pa.Table:
    dataset = requests_dataset(root)
    return dataset.to_table(filter=ds.field("run_id") == run_id)
