"""Corrections and notes: new rows that point at old ones; history is never edited."""
from __future__ import annotations

import dataclasses

import pyarrow as pa
from sqlalchemy import select

from jobs.store.db import Store
from jobs.store.ingest import IngestError, MetricRecord, RunRecord, metric_values, record_run
from jobs.store.models import Annotation, Metric, Run


def _refuse_if_superseded(session, model, row_id) -> None:
    if session.get(model, row_id) is None:
        raise IngestError(f"no {model.__tablename__} row {row_id!r} to correct")
    newer = session.scalar(select(model.id).where(model.supersedes_id == row_id))
    if newer is not None:
        raise IngestError(f"{model.__tablename__} row {row_id!r} is already superseded by {newer!r}; correct that one")


def supersede_run(store: Store, old_run_id: str, run: RunRecord, metrics: list[MetricRecord],
                  reason: str, requests: pa.Table | None = None) -> str:
    """Records `run` as the corrected version of `old_run_id`; returns the new run's id."""
    with store.session() as session:
        _refuse_if_superseded(session, Run, old_run_id)
    correction = dataclasses.replace(run, supersedes_id=old_run_id, supersede_reason=reason)
    return record_run(store, correction, metrics, requests)


def supersede_metric(store: Store, old_metric_id: int, corrected: MetricRecord, reason: str) -> int:
    """Appends a corrected value for one metric of a run; returns the new metric's id."""
    with store.session() as session, session.begin():
        _refuse_if_superseded(session, Metric, old_metric_id)
        old = session.get(Metric, old_metric_id)
        new = Metric(**metric_values(corrected, old.run_id, old.series), supersedes_id=old_metric_id, supersede_reason=reason)
        session.add(new)
        session.flush()
        return new.id


def annotate(store: Store, author: str, text: str, run_id: str | None = None, roadmap_row_id: str | None = None) -> int:
    with store.session() as session, session.begin():
        note = Annotation(author=author, text=text, run_id=run_id, roadmap_row_id=roadmap_row_id)
        session.add(note)
        session.flush()
        return note.id
