"""What killed writers left under the Parquet root, removed by the next run that records requests.

A writer killed mid-write leaves its temporary file; one killed between writing a run's
requests.parquet and committing the run's SQL rows leaves a file that no run names (an
orphan, as `roadgate db check` calls it). Both name their writer (jobs.tempfiles: in the
temporary's name, in the file's footer) and are removed once that process is gone, never
while it may still finish. On an object store there are no temporaries (an upload that dies
leaves no object), and a writer on another host is never judged gone (jobs.tempfiles).
"""
from __future__ import annotations

from sqlalchemy import select

from jobs.store.db import Store
from jobs.store.models import Run
from jobs.store.parquet import root_location, writer_of
from jobs.tempfiles import owner_alive


def remove_dead_leftovers(store: Store) -> None:
    root = root_location(store.parquet_root)
    run_dirs = [run_dir for day in root.glob("date=*") for run_dir in day.glob("run_id=*")]
    if not run_dirs:
        return
    with store.session() as session:
        recorded = set(session.scalars(select(Run.id)))
    for directory in run_dirs:
        run_id = directory.name.removeprefix("run_id=")
        if run_id in recorded:
            continue
        removed = directory.remove_dead_temporaries()
        requests = directory / "requests.parquet"
        if requests.exists():
            if owner_alive(writer_of(requests)):
                continue
            # Asked again once its writer is seen gone: it may have committed after `recorded` was read.
            with store.session() as session:
                if session.get(Run, run_id) is not None:
                    continue
            requests.delete()
            removed += 1
        # Only a directory this emptied goes: one found empty may be a live writer's that has
        # not yet opened its temporary there (removing those failed concurrent benches' writes);
        # one that is not empty (a live writer's temporary is there) stays.
        if removed:
            directory.remove_empty_dir()
