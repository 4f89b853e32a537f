"""What killed writers left under the Parquet root, removed by the next run that records requests.

A writer killed mid-write leaves its temporary file; one killed between writing a run's
requests.parquet and committing the run's SQL rows leaves a file that no run names (an
orphan, as `roadgate db check` calls it). Both name their writer (jobs.tempfiles: in the
temporary's name, in the file's footer) and are removed once that process is gone, never
while it may still finish. Local roots only, as for db check.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from sqlalchemy import select

from jobs.store.db import Store
from jobs.store.models import Run
from jobs.store.parquet import writer_of
from jobs.tempfiles import owner_alive, remove_dead_temporaries


def remove_dead_leftovers(store: Store) -> None:
    root = store.parquet_root
    if "://" in root and not root.startswith("file://"):
        return
    run_dirs = list(Path(root.removeprefix("file://")).glob("date=*/run_id=*"))
    if not run_dirs:
        return
    with store.session() as session:
        recorded = set(session.scalars(select(Run.id)))
    for directory in run_dirs:
        run_id = directory.name.removeprefix("run_id=")
        if run_id in recorded:
            continue
        removed = remove_dead_temporaries(directory)
        requests = directory / "requests.parquet"
        if requests.exists():
            if owner_alive(writer_of(requests)):
                continue
            # Asked again once its writer is seen gone: it may have committed after `recorded` was read.
            with store.session() as session:
                if session.get(Run, run_id) is not None:
                    continue
            requests.unlink(missing_ok=True)
            removed += 1
        # Only a directory this emptied goes: one found empty may be a live writer's that has
        # not yet opened its temporary there (removing those failed concurrent benches' writes).
        if removed:
            with contextlib.suppress(OSError):   # not empty: a live writer's temporary is there
                directory.rmdir()
