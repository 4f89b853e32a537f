"""Benchmark job: run engines on one workload, in one process, and report comparable figures."""
from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from jobs.engines import ENGINES, EngineRun, engine_module
from jobs.metrics import agreement, request_row, summarize
from jobs.workloads import Workload, WorkloadError, get_workload

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass
class BenchResult:
    workload: Workload
    run: EngineRun
    rows: list[dict]                  # one per request
    metrics: dict[str, dict]          # name -> {value, count, p50, ...}


def run_engine(workload: Workload, engine: str, model: str = DEFAULT_MODEL, backend: str = "auto",
               device: str = "cpu") -> BenchResult:
    module = engine_module(engine)
    if engine == "ours":
        run = module.run(workload, model, backend=backend)
    else:
        run = module.run(workload, model, device=device)
    rows = [request_row(c) for c in run.completions]
    metrics = summarize(rows, run.wall_s)
    for name, value in run.extra_metrics.items():
        metrics[name] = {"value": value, "count": 1}
    return BenchResult(workload, run, rows, metrics)


def add_agreement(results: list[BenchResult], reference: BenchResult) -> None:
    """For greedy workloads: how many requests match the reference engine token for token."""
    if not reference.workload.greedy:
        return
    ref_tokens = [r["output_token_ids"] for r in reference.rows]
    for res in results:
        if res is reference:
            continue
        a = agreement([r["output_token_ids"] for r in res.rows], ref_tokens)
        res.metrics["agreement"] = {"value": a["agreement"], "count": len(res.rows),
                                    "first_divergence_p50": a["first_divergence_p50"]}


def record(results: list[BenchResult], started_at: datetime, finished_at: datetime, model: str,
           preflight=None, store=None, *, host: dict | None = None, **run_fields) -> str:
    """Land one bench invocation in the results store: a run (all engines, one
    fingerprint), a metric row per engine and metric, and the per-request rows.

    `host` is host_facts() of the machine that ran the engines (default: this one);
    `run_fields` (id, airflow_dag_id, airflow_run_id) go into the RunRecord as given."""
    from jobs.store import MetricRecord, RunRecord, open_store, record_run, upgrade
    store = store or open_store()
    upgrade(store.engine)
    host = host or host_facts()
    run = RunRecord(kind="bench", workload=results[0].workload.name, hardware_class=host["hardware_class"],
                    started_at=started_at, finished_at=finished_at,
                    preflight_status=preflight.record_status if preflight else "skipped",
                    preflight=preflight.as_dict() if preflight else {},
                    config={"model": model, "workload_version": results[0].workload.version,
                            "engines": {r.run.engine: r.run.config for r in results}},
                    git_sha=host["git_sha"], git_dirty=host["git_dirty"], host=host["host"],
                    gpu_name=host["gpu_name"], driver_version=host["driver_version"],
                    cuda_version=host["cuda_version"], **run_fields)
    metrics = [MetricRecord(r.run.engine, name, m["value"], m.get("count"), m.get("p50"), m.get("p90"),
                            m.get("p99"), m.get("mean"), m.get("std"))
               for r in results for name, m in r.metrics.items()]
    rows = [{"engine": r.run.engine, **row} for r in results for row in r.rows]
    return record_run(store, run, metrics, pa.Table.from_pylist(rows))


def host_facts() -> dict:
    """What the run ran on: host, GPU, driver, CUDA, and the code's git state."""
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    driver = None
    if gpu:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10).stdout.strip() or None
    sha = dirty = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        repo = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
        if out.returncode == 0:
            sha = out.stdout.strip()
            dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                        capture_output=True, text=True).stdout.strip())
    return {"host": socket.gethostname(), "gpu_name": gpu, "driver_version": driver,
            "cuda_version": torch.version.cuda if gpu else None,
            # Roadmap rows name hardware classes like "H200"; CPU hosts are "cpu".
            "hardware_class": gpu.split()[-1] if gpu else "cpu", "git_sha": sha, "git_dirty": dirty}


def format_table(results: list[BenchResult]) -> str:
    head = f"{'workload':<20}{'engine':<16}{'out tok/s':>11}{'TTFT p50 ms':>13}{'TPOT p50 ms':>13}" \
           f"{'E2E p50 s':>11}{'agree':>7}{'wall s':>8}"
    lines = [head]
    for r in results:
        m = r.metrics
        name = r.run.engine + "/" + (r.run.config.get("backend") or r.run.config.get("device", ""))
        agree = m.get("agreement", {}).get("value")
        nan = {"value": float("nan")}
        lines.append(f"{r.workload.name:<20}{name:<16}{m['output_tok_s']['value']:>11.1f}"
                     f"{1e3 * m.get('ttft_p50_s', nan)['value']:>13.2f}"
                     f"{1e3 * m.get('tpot_p50_s', nan)['value']:>13.3f}"
                     f"{m.get('e2e_p50_s', nan)['value']:>11.2f}"
                     f"{'' if agree is None else format(agree, '.2f'):>7}{m['wall_s']['value']:>8.2f}")
    return "\n".join(lines)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)   # the store keeps naive UTC


# ---------------------------------------------------------------- CLI

def register(sub) -> None:
    p = sub.add_parser("bench", help="run engines on a workload and report figures")
    p.add_argument("--workload", required=True)
    p.add_argument("--engine", action="append", choices=sorted(ENGINES), required=True,
                   help="repeat to run several engines in one run (the last is the agreement reference)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--backend", default="auto", choices=["auto", "cuda", "torch"], help="our engine's backend")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="the peers' device")
    p.add_argument("--json", help="also write the summary metrics to this JSON file")
    p.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    p.add_argument("--preflight", action="store_true",
                   help="wait for a quiet host first (roadgate preflight's defaults) and hold the GPU lock; "
                        "without it the run is stored with preflight 'skipped', which gates treat as not quiet")
    p.add_argument("--gpu", type=int, default=0, help="GPU index for the preflight and its lock")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    from jobs.cli import UsageError
    try:
        workload = get_workload(args.workload)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    with contextlib.ExitStack() as held:
        outcome = None
        if args.preflight:
            from jobs import preflight
            try:
                held.enter_context(preflight.gpu_lock(args.gpu))
            except preflight.Contended as e:
                raise UsageError(f"GPU {args.gpu} is contended: {e}") from None
            outcome = preflight.check(**preflight.DEFAULTS, gpu_index=args.gpu)
            print(f"preflight: {outcome.status} ({outcome.reason})")
        started = _utcnow()
        results = [run_engine(workload, e, args.model, args.backend, args.device) for e in args.engine]
    if len(results) > 1:
        add_agreement(results, results[-1])
    print(format_table(results))
    if not args.no_store:
        print(f"recorded run {record(results, started, _utcnow(), args.model, outcome)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"workload": workload.name, "engine": r.run.engine, "config": r.run.config,
                        "metrics": r.metrics} for r in results], f, indent=1)
    sys.stdout.flush()
    return 0
