"""The nightly benchmark as plain functions; dags/nightly_benchmark.py only wires them.

    resolve_config -> plan_bench_matrix -> wait_for_quiet_host (a sensor's poke)
    -> run_bench_cell per (engine, workload) -> land_bench_results

The landing updates the results asset; dags/gate_evaluation.py, scheduled on it, calls
evaluate_gates_now -> publish_report.

Each cell runs one engine on one workload on a GPU it leases (on a host of several GPUs,
after a preflight of its own on that GPU), and stages its result (per-request rows and summary metrics, one Parquet
file, its lease and preflight with them) under the DAG run's staging directory. The cells
of one DAG run lease as one group (jobs.gpu_lease.holders): on a host of several GPUs they
run side by side by design, so each leaves the others' CPU out of its preflight's load and
records it apart from the foreign CPUs while it is measured (jobs.host_monitor).
Landing groups the cells by workload, measures agreement against the reference
engine and records one run per workload, all its engines on one fingerprint, as
`roadgate bench` does in one process. Run ids derive from the DAG run, so landing
twice records nothing twice, and a retried cell whose result is staged is skipped.
"""
from __future__ import annotations

import functools
import json
import logging
import re
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from jobs import gpu_lease, preflight
from jobs.atomic import atomic_parquet_writer
from jobs.errors import WorkloadError
from jobs.settings import SHIPPED_DATA, data_dir
from jobs.workloads import get_workload

if TYPE_CHECKING:
    from jobs import host_monitor

log = logging.getLogger(__name__)

NIGHTLY_FILE = SHIPPED_DATA / "nightly.yaml"
PROFILES = ("auto", "cpu", "gpu")
BACKENDS = ("auto", "cuda", "torch")
DEVICES = ("cpu", "cuda")
PREFLIGHT_KEYS = ("window_s", "load_threshold", "sample_every_s", "max_gpu_util")
# Namespace for run ids derived from DAG runs (uuid5), so a re-landed result is recognised.
RUN_ID_NAMESPACE = uuid.UUID("5b0c8f4e-8d1c-4f57-9a53-6a1f0e0c2b7d")
STAGED_META_KEY = b"roadgate.bench_cell"


class NightlyConfigError(ValueError):
    """The nightly configuration (file or a run's conf) is bad; the message names the field."""


@dataclass(frozen=True)
class NightlyConfig:
    profile: str
    workloads: tuple[str, ...]
    engines: tuple[str, ...]
    reference: str | None
    model: str
    backend: str
    device: str
    preflight: dict = field(default_factory=dict)
    # Workloads that only some engines run (a peer would take hours on them): workload ->
    # those engines (of `engines`; a run's conf that leaves them all out runs none on it).
    # Every other workload runs every engine.
    workload_engines: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {**asdict(self), "workloads": list(self.workloads), "engines": list(self.engines)}

    @classmethod
    def from_dict(cls, d: dict) -> "NightlyConfig":
        return cls(**{**d, "workloads": tuple(d["workloads"]), "engines": tuple(d["engines"])})


def _gpu_present() -> bool:
    import torch
    return torch.cuda.is_available()


def resolve_config(overrides: dict | None = None, path: Path = NIGHTLY_FILE,
                   gpu_present=_gpu_present) -> NightlyConfig:
    """The shipped defaults for this host's profile, with a run's `overrides` on top."""
    from jobs.engines import ENGINES

    try:
        base = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise NightlyConfigError(f"{path}: cannot read the nightly configuration ({e})") from None
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    known = {f.name for f in fields(NightlyConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise NightlyConfigError(f"unknown nightly setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    profile = overrides.get("profile", "auto")
    if profile not in PROFILES:
        raise NightlyConfigError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if profile == "auto":
        profile = "gpu" if gpu_present() else "cpu"
    merged = {k: v for k, v in base.items() if k != "profiles"} | base["profiles"][profile] | overrides
    merged["profile"] = profile
    merged["preflight"] = base.get("preflight", {}) | overrides.get("preflight", {})

    engines = list(merged["engines"])
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        raise NightlyConfigError(f"unknown engine(s) {', '.join(bad)}; registered: {', '.join(sorted(ENGINES))}")
    if not engines or len(set(engines)) != len(engines):
        raise NightlyConfigError(f"engines must be a non-empty list without repeats, got {engines}")
    workloads = list(merged["workloads"])
    if not workloads:
        raise NightlyConfigError("workloads must be a non-empty list")
    for w in workloads:
        try:
            get_workload(w)
        except WorkloadError as e:
            raise NightlyConfigError(str(e)) from None
    workload_engines = merged.get("workload_engines") or {}
    if not isinstance(workload_engines, dict) or any(
            not isinstance(v, list) or not v or set(v) - set(ENGINES) for v in workload_engines.values()):
        raise NightlyConfigError(f"workload_engines must map workloads to non-empty lists of registered engines "
                                 f"({', '.join(sorted(ENGINES))}), got {workload_engines!r}")
    reference = merged.get("reference")
    if reference is not None and reference not in engines:
        if "reference" in overrides:
            raise NightlyConfigError(f"reference engine {reference!r} is not among the engines {engines}")
        reference = None   # the default reference is not in this run: no agreement measured
    if merged["backend"] not in BACKENDS:
        raise NightlyConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {merged['backend']!r}")
    if merged["device"] not in DEVICES:
        raise NightlyConfigError(f"device must be one of {', '.join(DEVICES)}, got {merged['device']!r}")
    bad_preflight = sorted(set(merged["preflight"]) - set(PREFLIGHT_KEYS))
    if bad_preflight:
        raise NightlyConfigError(f"unknown preflight setting(s) {', '.join(bad_preflight)}; known: {', '.join(PREFLIGHT_KEYS)}")
    return NightlyConfig(profile=profile, workloads=tuple(workloads), engines=tuple(engines), reference=reference,
                         model=merged["model"], backend=merged["backend"], device=merged["device"],
                         preflight=dict(merged["preflight"]), workload_engines=dict(workload_engines))


def plan_bench_matrix(config: NightlyConfig) -> list[dict]:
    """One cell per (engine, workload) that runs: what the DAG maps its bench task over."""
    return [{"engine": e, "workload": w} for w in config.workloads for e in config.engines
            if e in config.workload_engines.get(w, config.engines)]


def wait_for_quiet_host(config: NightlyConfig, inputs=None, waited_s: float = 0.0,
                        limit_s: float | None = None) -> dict | None:
    """One poke of the preflight sensor: sample one quiet window on a GPU it leases without
    waiting (every GPU leased by running tasks reads as busy). The outcome as a dict when
    quiet, else None. Each poke logs one status line: what it measured against what it
    needs, how long the run has waited (`waited_s`) of how long it will (`limit_s`), and how
    to override."""
    p = config.preflight
    try:
        with gpu_lease.lease(timeout_s=0) as leased:
            outcome = _check_quiet(config, leased.index, p["window_s"], inputs)
    except gpu_lease.Contended as e:
        log.info("preflight: %s; %s", e, _waiting(waited_s, limit_s))
        return None
    if outcome.status == "quiet":
        log.info("preflight: quiet (%s)", outcome.reason)
        return outcome.as_dict()
    log.info("preflight: %s", busy_status(outcome, p, waited_s, limit_s))
    return None


def _check_quiet(config: NightlyConfig, gpu_index: int | None, timeout_s: float,
                 inputs: preflight.Inputs | None) -> preflight.PreflightOutcome:
    """jobs.preflight's check of GPU `gpu_index` and the host at the nightly's thresholds."""
    p = config.preflight
    return preflight.check(window_s=p["window_s"], load_threshold=p["load_threshold"], timeout_s=timeout_s,
                           sample_every_s=p["sample_every_s"], gpu_index=gpu_index, max_gpu_util=p["max_gpu_util"],
                           inputs=inputs)


def busy_status(outcome, thresholds: dict, waited_s: float, limit_s: float | None) -> str:
    """Why a poke found the host busy, in one line a person waiting on it can act on."""
    loads = [load for _, load in outcome.samples] or [0.0]
    gpu = outcome.gpu.get("utilization_pct")
    measured = (f"{outcome.status}: load {max(loads):.2f} busy CPUs at most over the window (quiet below "
                f"{thresholds['load_threshold']:g})")
    if gpu is not None:
        measured += f", GPU {gpu:g}% (quiet at or below {thresholds['max_gpu_util']:g}%)"
    override = json.dumps({"preflight": {"load_threshold": round(max(loads) + 1)}})
    return (f"{measured}; {_waiting(waited_s, limit_s)}; to measure anyway (the run is stored, never "
            f"evidence): trigger with --conf '{override}'")


def _waiting(waited_s: float, limit_s: float | None) -> str:
    limit = f" of {_duration(limit_s)}" if limit_s else ""
    return f"waited {_duration(waited_s)}{limit}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def staging_dir(dag_id: str, run_id: str, root: Path | None = None) -> Path:
    """Where one DAG run's cells leave their results (under the data dir, shared by the workers)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{dag_id}__{run_id}")
    return (root or data_dir() / "staging") / safe


def run_bench_cell(cell: dict, config: NightlyConfig, staging: Path, lease_wait_s: float = gpu_lease.WAIT_S,
                   host_inputs: host_monitor.Inputs | None = None,
                   preflight_inputs: preflight.Inputs | None = None) -> dict:
    """Run one engine on one workload on a GPU it leases (waiting up to `lease_wait_s` for
    one), on a host of several GPUs once that GPU and the host are quiet, the host watched
    meanwhile; stage the result with the lease's and the preflight's records. `host_inputs`,
    `preflight_inputs`: a scripted host for the monitor and the preflight.

    The preflight waits up to preflight.DEFAULTS' timeout for a quiet window, the run's
    other cells left out of the load; a cell that never finds one is measured anyway, and
    its run is stored, never evidence (jobs/validity.py).

    A cell whose result is already staged (a retried task) is not run again."""
    from jobs import host_monitor
    from jobs.bench import run_engine
    from jobs.host_facts import host_facts
    from jobs.store.models import utcnow

    path = Path(staging) / cell["workload"] / f"{cell['engine']}.parquet"
    if path.exists():
        log.info("%s on %s already staged at %s; not run again", cell["engine"], cell["workload"], path)
        return {**cell, "path": str(path), "wall_s": _read_staged(path)[0]["wall_s"]}
    workload = get_workload(cell["workload"])
    # One DAG run's cells share its staging directory: its name is their group.
    group = f"the bench cells of {Path(staging).name}"
    siblings = functools.partial(gpu_lease.holders, group)
    with gpu_lease.lease(timeout_s=lease_wait_s, group=group) as leased:
        # Cells run side by side only on a host of several GPUs. On one, they run one after
        # another inside the quiet window the run's sensor found, each watched while measured,
        # and a preflight each (30 s or more) would only lengthen the run.
        quiet = None
        if gpu_lease.device_count() > 1:
            quiet = _check_quiet(config, leased.index, preflight.DEFAULTS["timeout_s"],
                                 preflight_inputs or preflight.machine(load=host_monitor.busy_cpus_outside(siblings)))
            log.info("%s on %s, preflight on its GPU: %s (%s)", cell["engine"], workload.name, quiet.status,
                     quiet.reason)
        started = utcnow()
        result = run_engine(workload, cell["engine"], workload.model_for(None, config.model), config.backend,
                            config.device, gpu_index=leased.index, host_inputs=host_inputs, siblings=siblings)
        finished = utcnow()
    meta = {"engine": cell["engine"], "workload": workload.name, "config": result.run.config,
            "metrics": result.metrics, "wall_s": result.run.wall_s, "started_at": started.isoformat(),
            "finished_at": finished.isoformat(), "host": host_facts(), "host_during": result.host,
            "gpu": leased.record(), "preflight": quiet.as_dict() if quiet else None}
    table = pa.Table.from_pylist(result.rows)
    table = table.replace_schema_metadata({STAGED_META_KEY: json.dumps(meta)})
    with atomic_parquet_writer(path, table.schema) as writer:
        writer.write_table(table)
    return {**cell, "path": str(path), "wall_s": result.run.wall_s}


def _read_staged(path: Path) -> tuple[dict, list[dict]]:
    table = pq.read_table(path)
    return json.loads(table.schema.metadata[STAGED_META_KEY]), table.to_pylist()


def land_bench_results(staged: list[dict], config: NightlyConfig, preflight_outcome: dict | None,
                       dag_id: str, run_id: str, store=None) -> list[str]:
    """Record one run per workload from the staged cells; returns the run ids.

    The run ids derive from (dag_id, run_id, workload): landing again changes nothing."""
    from jobs.bench import BenchResult, add_agreement, record
    from jobs.engines import EngineRun

    outcome = None
    if preflight_outcome is not None:
        outcome = preflight.PreflightOutcome(**{k: v for k, v in preflight_outcome.items() if k != "exit_code"})
    by_workload: dict[str, list[tuple[dict, list[dict]]]] = {}
    for cell in staged:
        by_workload.setdefault(cell["workload"], []).append(_read_staged(Path(cell["path"])))
    run_ids = []
    for name, cells in sorted(by_workload.items()):
        workload = get_workload(name)
        hardware = {m["host"]["hardware_class"] for m, _ in cells}
        if len(hardware) != 1:
            raise ValueError(f"workload {name!r}: engines ran on different hardware {sorted(hardware)}; "
                             "their figures are not comparable in one run")
        # A cell staged by code that did not watch the host has no "host_during": not monitored.
        results = [BenchResult(workload, EngineRun(m["engine"], m["config"], [], m["wall_s"]), rows, m["metrics"],
                               host=m.get("host_during"), gpu=m.get("gpu"), preflight=m.get("preflight"))
                   for m, rows in cells]
        reference = next((r for r in results if r.run.engine == config.reference), None)
        if reference is not None:
            add_agreement(results, reference)
        run_uuid = str(uuid.uuid5(RUN_ID_NAMESPACE, f"{dag_id}/{run_id}/{name}"))
        started = min(datetime.fromisoformat(m["started_at"]) for m, _ in cells)
        finished = max(datetime.fromisoformat(m["finished_at"]) for m, _ in cells)
        run_ids.append(record(results, started, finished, workload.model_for(None, config.model), outcome, store,
                              host=cells[0][0]["host"], id=run_uuid, airflow_dag_id=dag_id, airflow_run_id=run_id))
    return run_ids


def evaluate_gates_now(store=None, roadmap_path: str | None = None) -> list[dict]:
    """Sync the roadmap file, append one evaluation per row; the verdicts as dicts."""
    from jobs.gates.evaluate import evaluate_gates
    from jobs.gates.roadmap import load_roadmap, sync_roadmap
    from jobs.store import open_store, upgrade

    store = store or open_store()
    upgrade(store.engine)
    sync_roadmap(store, load_roadmap(roadmap_path))
    return [{"roadmap_row_id": e.roadmap_row_id, "status": e.status, "reason": e.reason, "run_id": e.run_id,
             "value": e.value, "target": e.target} for e in evaluate_gates(store)]


def find_new_regressions(store=None) -> list[int]:
    """Change-point detection over the whole history; the ids of the new change points in the
    regression direction: what the bisect_regression DAG is asked to triage."""
    from jobs.gates.regressions import detect_regressions
    from jobs.store import open_ready_store

    return [cp.id for cp in detect_regressions(store or open_ready_store()) if cp.is_regression]


def publish_report(store=None, out_dir: str | Path | None = None) -> str:
    """The nightly report: the static HTML dashboard (jobs.report) under `out_dir`
    (default <data dir>/report); the gate status table is printed for the task log.
    Returns the dashboard's path."""
    from jobs.report import render_dashboard
    from jobs.store import open_store
    from jobs.store_cli import print_gate_status

    store = store or open_store()
    print_gate_status(store)
    page = render_dashboard(store, Path(out_dir) if out_dir else data_dir() / "report")
    print(f"dashboard: {page}")
    return str(page)