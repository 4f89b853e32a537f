"""The ingest API the bench job calls: one run, its summary metrics, its request rows.

Parquet is written first, then the run and its metrics in one SQL transaction:
a crash leaves at worst an unreferenced Parquet file, never SQL rows pointing
at missing data. Run ids are UUIDs chosen by the caller (or here), so a retried
ingest of the same run is recognised and records nothing twice.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from jobs.registry import METRICS
from jobs.store.db import Store
from jobs.store.leftovers import remove_dead_leftovers
from jobs.store.models import Metric, Run, Series, utcnow
from jobs.store.parquet import write_requests

PREFLIGHT_STATUSES = ("quiet", "noisy", "skipped")


class IngestError(ValueError):
    """The run cannot be recorded as given; nothing was written."""


@dataclass
class RunRecord:
    kind: str  # bench | generate | ...
    workload: str
    hardware_class: str  # e.g. H200, cpu: what roadmap rows name
    started_at: datetime  # naive UTC
    finished_at: datetime | None = None
    status: str = "ok"
    config: dict = field(default_factory=dict)  # engine config; part of the fingerprint
    preflight_status: str = "quiet"
    preflight: dict = field(default_factory=dict)
    validity: dict | None = None  # the bench job's verdict on its measurement (jobs/validity.py)
    git_sha: str | None = None
    git_dirty: bool | None = None
    code_hash: str | None = None  # the code that ran, from its files (jobs.code_identity)
    host: str | None = None
    gpu_name: str | None = None
    cpu_name: str | None = None  # e.g. "AMD EPYC family 23 model 49 x2 avx2" (jobs.host_facts.cpu_name)
    driver_version: str | None = None
    cuda_version: str | None = None
    airflow_dag_id: str | None = None
    airflow_run_id: str | None = None
    # engine -> what identifies its figures beyond workload and hardware (Conbench's "series"):
    # its identifying configuration; an engine not named here is identified by the whole config.
    identities: dict = field(default_factory=dict)
    id: str | None = None  # set it to make a retried ingest idempotent
    supersedes_id: str | None = None
    supersede_reason: str | None = None


@dataclass
class MetricRecord:
    engine: str
    metric: str
    value: float
    count: int | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    std: float | None = None


def fingerprint(workload: str, hardware_class: str, gpu_name: str | None, config: dict,
                cpu_name: str | None = None) -> str:
    """Stable hash of what makes results comparable: workload, hardware, engine config.
    The CPU enters only where it is known (runs before it was recorded keep their hash)."""
    hardware = {"class": hardware_class, "gpu": gpu_name, **({"cpu": cpu_name} if cpu_name else {})}
    key = {"workload": workload, "hardware": hardware, "config": config}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]


def series_identity(run: RunRecord, engine: str) -> dict:
    """What identifies `engine`'s figures in `run`: workload name and version, hardware
    (the GPU model, else the CPU with its cores and vector ISA), engine, and the engine's
    identifying configuration. Versions, derived sizes and host names are provenance."""
    return {"workload": run.workload, "workload_version": run.config.get("workload_version"),
            "hardware": run.gpu_name or run.cpu_name or run.hardware_class, "engine": engine,
            "config": run.identities.get(engine, run.config)}


def series_key(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _validate(run: RunRecord, metrics: list[MetricRecord], known_workloads: Collection[str] | None) -> None:
    # Bench runs are compared by workload, so theirs must be one the caller's registry knows;
    # other kinds (a batch generation) name what they ran in free text.
    if run.id is not None and not _is_uuid(run.id):
        raise IngestError(f"run id {run.id!r} is not a UUID (it names the run's Parquet directory)")
    for column in Run.__table__.columns:   # PostgreSQL refuses a value longer than its column, after the work
        value, length = getattr(run, column.name, None), getattr(column.type, "length", None)
        if isinstance(value, str) and length and len(value) > length:
            raise IngestError(f"run field {column.name!r} is {len(value)} characters long; the store keeps {length}")
    if run.kind == "bench" and known_workloads is not None and run.workload not in known_workloads:
        raise IngestError(f"unknown workload {run.workload!r} (known: {', '.join(sorted(known_workloads))})")
    if run.preflight_status not in PREFLIGHT_STATUSES:
        raise IngestError(f"preflight_status must be one of {PREFLIGHT_STATUSES}, got {run.preflight_status!r}")
    if bool(run.supersedes_id) != bool(run.supersede_reason):
        raise IngestError("a correction needs both supersedes_id and supersede_reason")
    for m in metrics:
        if m.metric not in METRICS:
            raise IngestError(f"unknown metric {m.metric!r} for engine {m.engine!r}")


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


def _run_row(run: RunRecord, run_id: str, parquet_uri: str | None) -> Run:
    return Run(
        id=run_id, kind=run.kind, status=run.status, workload=run.workload, hardware_class=run.hardware_class,
        started_at=run.started_at, finished_at=run.finished_at, git_sha=run.git_sha, git_dirty=run.git_dirty,
        code_hash=run.code_hash, host=run.host, gpu_name=run.gpu_name, cpu_name=run.cpu_name,
        driver_version=run.driver_version, cuda_version=run.cuda_version,
        config=run.config, preflight_status=run.preflight_status, preflight=run.preflight, validity=run.validity,
        valid=run.validity.get("valid") if run.validity else None,
        fingerprint=fingerprint(run.workload, run.hardware_class, run.gpu_name, run.config, run.cpu_name),
        parquet_uri=parquet_uri, airflow_dag_id=run.airflow_dag_id, airflow_run_id=run.airflow_run_id,
        supersedes_id=run.supersedes_id, supersede_reason=run.supersede_reason,
    )


def metric_values(m: MetricRecord, run_id: str, series: str | None = None) -> dict:
    spec = METRICS[m.metric]
    return dict(
        run_id=run_id, engine=m.engine, metric=m.metric, unit=spec.unit, better=spec.better, value=m.value,
        count=m.count, p50=m.p50, p90=m.p90, p99=m.p99, mean=m.mean, std=m.std, series=series,
        recorded_at=utcnow(),
    )


def _describe_new_series(store: Store, identities: dict[str, dict]) -> None:
    """Describe each series the first time a figure of it is recorded. Its own transaction:
    a concurrent writer that describes the same series first makes this one a no-op."""
    with contextlib.suppress(IntegrityError), store.session() as session, session.begin():
        known = set(session.scalars(select(Series.key).where(Series.key.in_(list(identities)))))
        session.add_all(Series(key=key, workload=i["workload"], hardware=i["hardware"], engine=i["engine"],
                               identity=i) for key, i in identities.items() if key not in known)


def record_run(store: Store, run: RunRecord, metrics: list[MetricRecord], requests: pa.Table | None = None, *,
               known_workloads: Collection[str] | None = None) -> str:
    """Records a run; returns its id. Recording the same run id again changes nothing.
    `known_workloads`: the names a bench run's workload must be one of (the caller's registry,
    jobs.workloads.workload_names()); None: not checked. The store reads no workloads file."""
    _validate(run, metrics, known_workloads)
    run_id = run.id or str(uuid.uuid4())
    with store.session() as session:
        if session.get(Run, run_id) is not None:
            return run_id
    parquet_uri = None
    if requests is not None:
        remove_dead_leftovers(store)   # what killed runs left where this one writes
        parquet_uri = write_requests(store.parquet_root, run_id, run.started_at.date(), requests)
    identities = {engine: series_identity(run, engine) for engine in dict.fromkeys(m.engine for m in metrics)}
    keys = {engine: series_key(identity) for engine, identity in identities.items()}
    _describe_new_series(store, {keys[e]: identity for e, identity in identities.items()})
    try:
        with store.session() as session, session.begin():
            session.add(_run_row(run, run_id, parquet_uri))
            session.flush()  # the run first: metrics reference it
            if metrics:  # one executemany: the ORM would fetch each new id back, several times slower
                session.execute(insert(Metric), [metric_values(m, run_id, keys[m.engine]) for m in metrics])
    except IntegrityError:
        with store.session() as session:
            if session.get(Run, run_id) is None:
                raise
    return run_id
