"""`roadgate db check`: files in the store's directories that no run accounts for.

Orphans are Parquet files under the Parquet root that no run's parquet_uri names
(ingest writes the file before the SQL rows, so a crash between the two leaves one);
temporary files are the dot-prefixed `.*.tmp` that parquet.py and jobs/atomic.py write
before renaming. Found files can be moved to <data dir>/quarantine/<time>/ at their
relative path; nothing is ever deleted. Files modified within `min_age_s` are left out:
a job may be writing them right now.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from jobs.store.db import Store
from jobs.store.models import Run, utcnow


@dataclass(frozen=True)
class Stray:
    kind: str        # "orphan" or "temporary"
    path: Path
    relative: Path   # where it goes under a quarantine folder


def local_root(uri: str) -> Path:
    if "://" in uri and not uri.startswith("file://"):
        raise ValueError(f"db check reads local Parquet roots only, not {uri}")
    return Path(uri.removeprefix("file://")).resolve()


def find_strays(store: Store, data_dir: Path, min_age_s: float) -> tuple[list[Stray], int]:
    """The stray files, and how many more were too recent to judge."""
    data_dir, root = data_dir.resolve(), local_root(store.parquet_root)
    quarantined = data_dir / "quarantine"
    with store.session() as session:
        uris = session.scalars(select(Run.parquet_uri).where(Run.parquet_uri.is_not(None)))
        referenced = {Path(uri.removeprefix("file://")).resolve() for uri in uris}
    bases = [data_dir] if data_dir in root.parents else [data_dir, root]
    found, recent, newest = [], 0, time.time() - min_age_s
    for path in sorted(p for base in bases for p in base.rglob("*") if p.is_file() and quarantined not in p.parents):
        temporary = path.name.startswith(".") and path.name.endswith(".tmp")
        orphan = root in path.parents and path.suffix == ".parquet" and path not in referenced
        if not (temporary or orphan):
            continue
        if path.stat().st_mtime > newest:
            recent += 1
            continue
        relative = path.relative_to(data_dir) if data_dir in path.parents else "parquet-root" / path.relative_to(root)
        found.append(Stray("temporary" if temporary else "orphan", path, relative))
    return found, recent


def quarantine(strays: list[Stray], data_dir: Path) -> Path:
    """Moves each stray file to <data dir>/quarantine/<UTC time>/<its relative path>; returns that folder."""
    folder = data_dir / "quarantine" / utcnow().strftime("%Y%m%dT%H%M%S.%fZ")
    for stray in strays:
        target = folder / stray.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(stray.path, target)
    return folder
