"""Per-request rows as a Parquet dataset: <root>/date=YYYY-MM-DD/run_id=<id>/requests.parquet.

The root is a local path or any URI jobs.storage serves (s3://bucket/prefix, gs://, ...).
A file appears whole or not at all, so readers see a run's rows whole or not at all:
locally it is written under a dot-prefixed temporary name (which readers skip) and renamed
into place; on an object store, which cannot rename, it appears when its upload completes.
A run's file is written once, under its run id; only a retried recording of the same run
(whose earlier attempt died before the SQL rows) writes it again. The file's footer, and a
local temporary's name, name the process that wrote it (jobs.tempfiles), so that what a
killed writer left can be told from what a live one is writing (jobs.store.leftovers).
"""
from __future__ import annotations

from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from jobs.storage import Location, location, write_table
from jobs.tempfiles import owner

WRITER_META = b"roadgate.writer"   # footer key: the owner() tag of the process that wrote the file


def root_location(root: str) -> Location:
    return location(root, "Parquet root")


def write_requests(root: str, run_id: str, day: date, table: pa.Table) -> str:
    """Writes one run's request rows; returns the file's URI (a local path for local roots)."""
    relative = f"date={day.isoformat()}/run_id={run_id}/requests.parquet"
    stamped = table.replace_schema_metadata({**(table.schema.metadata or {}), WRITER_META: owner()})
    write_table(root_location(root) / relative, stamped)
    prefix = root.rstrip("/") if "://" in root else str(Path(root).resolve())
    return f"{prefix}/{relative}"


def writer_of(requests: Location) -> str:
    """The owner tag of the process that wrote a requests file; "" when unknown."""
    try:
        with requests.open() as f:
            return (pq.read_schema(f).metadata or {}).get(WRITER_META, b"").decode()
    except (OSError, pa.ArrowInvalid):
        return ""


def requests_dataset(root: str) -> ds.Dataset:
    """All request rows under root, with `date` and `run_id` as partition columns."""
    fs, base = root_location(root).arrow()
    return ds.dataset(base, filesystem=fs, format="parquet", partitioning="hive")


def read_run_requests(root: str, run_id: str) -> pa.Table:
    dataset = requests_dataset(root)
    return dataset.to_table(filter=ds.field("run_id") == run_id)
