"""SQL schema of the results store (SQLAlchemy 2 declarative models).

Runs, metrics, gate evaluations, change points, shift checks, culprits and annotations are history:
rows are only ever inserted (see append_only.py). A correction is a new row
whose `supersedes_id` names the row it replaces; the views hide replaced rows.
Roadmap rows mirror the versioned YAML file, whose history lives in git.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """Naive UTC: SQLite has no time zones, so every timestamp is stored as naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class AppendOnly:
    """Marker: instances of these models may be inserted, never updated or deleted."""


class Run(AppendOnly, Base):
    __tablename__ = "runs"

    # Client-generated UUID: concurrency-safe, and a retried ingest is recognised.
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(32))
    workload: Mapped[str] = mapped_column(String(64))
    hardware_class: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    git_sha: Mapped[str | None] = mapped_column(String(40))
    git_dirty: Mapped[bool | None] = mapped_column(Boolean)
    host: Mapped[str | None] = mapped_column(String(255))
    gpu_name: Mapped[str | None] = mapped_column(String(255))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_version: Mapped[str | None] = mapped_column(String(64))
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    preflight_status: Mapped[str] = mapped_column(String(16))  # quiet | noisy | skipped
    preflight: Mapped[dict] = mapped_column(JSON, default=dict)
    # The bench job's verdict on its own measurement (jobs/validity.py); NULL where none was made.
    validity: Mapped[dict | None] = mapped_column(JSON)
    # validity["valid"], for the views (portable SQL reads no JSON); NULL before 0006 or without a verdict.
    valid: Mapped[bool | None] = mapped_column(Boolean)
    # The host CPU (model, cores, widest vector ISA): part of the fingerprint, since two
    # "cpu" hosts (and a GPU host's launch loop) differ by several times. NULL before 0003.
    cpu_name: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))
    # `git write-tree` of engine/, jobs/, cuda_src/ and dags/ as they were on disk (jobs.code_identity):
    # names the code that ran even from a copied or dirty tree. NULL before 0004.
    code_hash: Mapped[str | None] = mapped_column(String(40))
    parquet_uri: Mapped[str | None] = mapped_column(Text)
    airflow_dag_id: Mapped[str | None] = mapped_column(String(250))
    airflow_run_id: Mapped[str | None] = mapped_column(String(250))
    supersedes_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    supersede_reason: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        Index("ix_runs_workload_hardware_started", "workload", "hardware_class", "started_at"),
        Index("ix_runs_fingerprint_started", "fingerprint", "started_at"),
        Index("ix_runs_supersedes_id", "supersedes_id"),
    )


class Metric(AppendOnly, Base):
    __tablename__ = "metrics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    engine: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(64))
    unit: Mapped[str] = mapped_column(String(32))
    better: Mapped[str] = mapped_column(String(8))  # higher | lower
    value: Mapped[float] = mapped_column(Float)
    count: Mapped[int | None] = mapped_column(Integer)
    p50: Mapped[float | None] = mapped_column(Float)
    p90: Mapped[float | None] = mapped_column(Float)
    p99: Mapped[float | None] = mapped_column(Float)
    mean: Mapped[float | None] = mapped_column(Float)
    std: Mapped[float | None] = mapped_column(Float)
    # The series this figure belongs to (series.key); NULL before 0004, derived in v_metric_history.
    series: Mapped[str | None] = mapped_column(String(32))
    supersedes_id: Mapped[int | None] = mapped_column(ForeignKey("metrics.id"))
    supersede_reason: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        Index("ix_metrics_run_engine_metric", "run_id", "engine", "metric"),
        Index("ix_metrics_supersedes_id", "supersedes_id"),
        Index("ix_metrics_series", "series"),
    )


class Series(AppendOnly, Base):
    """What identifies a result: a figure is compared only within its series (Conbench's rule).

    The key hashes the identity: workload name and version, hardware (GPU model, or the CPU
    with its cores and vector ISA), engine, the engine's identifying configuration and the
    measurement method. Everything else a run records is provenance."""
    __tablename__ = "series"

    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    workload: Mapped[str] = mapped_column(String(64))
    hardware: Mapped[str] = mapped_column(String(255))
    engine: Mapped[str] = mapped_column(String(64))
    identity: Mapped[dict] = mapped_column(JSON)
    first_recorded_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class RoadmapRow(Base):
    __tablename__ = "roadmap_rows"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    metric: Mapped[str] = mapped_column(String(64))
    engine: Mapped[str] = mapped_column(String(64))
    comparison: Mapped[str] = mapped_column(String(2))  # >= | <=
    threshold: Mapped[float] = mapped_column(Float)
    peer_engine: Mapped[str | None] = mapped_column(String(64))  # set: threshold is a ratio to this engine
    workload: Mapped[str] = mapped_column(String(64))
    hardware_class: Mapped[str] = mapped_column(String(64))
    max_age_days: Mapped[float] = mapped_column(Float)
    validity: Mapped[dict] = mapped_column(JSON, default=dict)
    synced_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(DateTime)  # gone from the YAML file


class GateEvaluation(AppendOnly, Base):
    __tablename__ = "gate_evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    batch_id: Mapped[str] = mapped_column(String(36))  # one `gates evaluate` call
    roadmap_row_id: Mapped[str] = mapped_column(ForeignKey("roadmap_rows.id"))
    evaluated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    status: Mapped[str] = mapped_column(String(8))  # PASS | GATING | STALE | INVALID | NO_DATA
    reason: Mapped[str] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    metric_id: Mapped[int | None] = mapped_column(ForeignKey("metrics.id"))
    value: Mapped[float | None] = mapped_column(Float)
    peer_value: Mapped[float | None] = mapped_column(Float)
    target: Mapped[float | None] = mapped_column(Float)  # the absolute value the threshold came to

    __table_args__ = (Index("ix_gate_evaluations_row", "roadmap_row_id", "id"),)


class ChangePoint(AppendOnly, Base):
    __tablename__ = "change_points"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    engine: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(64))
    series: Mapped[str | None] = mapped_column(String(32))  # NULL before 0004
    # The change happened between these two runs of the series.
    last_run_before_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    first_run_after_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    mean_before: Mapped[float] = mapped_column(Float)
    mean_after: Mapped[float] = mapped_column(Float)
    change_percent: Mapped[float] = mapped_column(Float)
    pvalue: Mapped[float] = mapped_column(Float)
    is_regression: Mapped[bool] = mapped_column(Boolean)
    detected_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    __table_args__ = (
        UniqueConstraint("fingerprint", "engine", "metric", "first_run_after_id", name="uq_change_points_series_run"),
    )


class Annotation(AppendOnly, Base):
    __tablename__ = "annotations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    roadmap_row_id: Mapped[str | None] = mapped_column(ForeignKey("roadmap_rows.id"))
    author: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ShiftCheck(AppendOnly, Base):
    """A change point's shift measured again and tested (jobs.gates.confirm): confirmed, or
    noise. The change point itself stays; a later check of it is a new row."""
    __tablename__ = "shift_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    change_point_id: Mapped[int | None] = mapped_column(ForeignKey("change_points.id"))  # NULL: asked by hand
    series: Mapped[str] = mapped_column(String(32))
    metric: Mapped[str] = mapped_column(String(64))
    better: Mapped[str] = mapped_column(String(8))
    before_sha: Mapped[str] = mapped_column(String(40))
    after_sha: Mapped[str] = mapped_column(String(40))
    before_run_ids: Mapped[list] = mapped_column(JSON)      # the re-measurements, stored as ordinary runs
    after_run_ids: Mapped[list] = mapped_column(JSON)
    median_before: Mapped[float] = mapped_column(Float)
    median_after: Mapped[float] = mapped_column(Float)
    change: Mapped[float] = mapped_column(Float)            # median_after / median_before - 1
    change_low: Mapped[float] = mapped_column(Float)        # its bootstrap 95% interval
    change_high: Mapped[float] = mapped_column(Float)
    pvalue: Mapped[float] = mapped_column(Float)            # one-sided Mann-Whitney U
    rank_biserial: Mapped[float] = mapped_column(Float)
    verdict: Mapped[str] = mapped_column(String(16))        # confirmed | noise
    checked_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Culprit(AppendOnly, Base):
    """A bisect's verdict (jobs.gates.bisect): the first bad commit of a confirmed shift, or,
    where it stopped early, the commits that may still be it."""
    __tablename__ = "culprits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    shift_check_id: Mapped[int | None] = mapped_column(ForeignKey("shift_checks.id"))  # NULL: good/bad by hand
    series: Mapped[str] = mapped_column(String(32))
    metric: Mapped[str] = mapped_column(String(64))
    last_good_sha: Mapped[str] = mapped_column(String(40))
    first_bad_sha: Mapped[str] = mapped_column(String(40))
    stopped: Mapped[str] = mapped_column(String(16))        # found | budget | skipped
    candidates: Mapped[list] = mapped_column(JSON)          # shas that may be the first bad one
    median_good: Mapped[float] = mapped_column(Float)
    median_bad: Mapped[float] = mapped_column(Float)
    probes: Mapped[list] = mapped_column(JSON)              # [{sha, verdict, figures, run_ids}] in order
    runs: Mapped[int] = mapped_column(Integer)              # bench runs spent
    decided_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class StoreState(Base):
    """Facts about the store itself, not history (jobs.store.migrate): the digest of the views
    it holds (an upgrade with nothing to do does no DDL) and the role the tool writes as."""
    __tablename__ = "store_state"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


APPEND_ONLY_TABLES = tuple(sorted(
    mapper.local_table.name for mapper in Base.registry.mappers if issubclass(mapper.class_, AppendOnly)
))
