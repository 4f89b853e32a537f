"""Per-request rows as a Parquet dataset: <root>/date=YYYY-MM-DD/run_id=<id>/requests.parquet.

The root is a local path or any URI pyarrow has a filesystem for (s3://, gs://, ...).
A file is written under a dot-prefixed temporary name and then moved into place,
so readers (which skip dot files) see a run's rows whole or not at all.
"""
from __future__ import annotations

import uuid
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq


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
    temporary = f"{directory}/.requests.{uuid.uuid4().hex}.tmp"
    pq.write_table(table, temporary, filesystem=fs)
    fs.move(temporary, f"{directory}/requests.parquet")
    prefix = root.rstrip("/") if "://" in root else base
    return f"{prefix}/{relative}/requests.parquet"


def requests_dataset(root: str) -> ds.Dataset:
    """All request rows under root, with `date` and `run_id` as partition columns."""
    fs, base = _filesystem(root)
    return ds.dataset(base, filesystem=fs, format="parquet", partitioning="hive")


def read_run_requests(root: str, run_id: str) -> pa.Table:
    dataset = requests_dataset(root)
    return dataset.to_table(filter=ds.field("run_id") == run_id)
