"""Benchmark job: run engines on one workload, in one process, and report comparable figures.

With --ref, the engines run from another commit's code (a temporary git worktree,
its own `roadgate bench --json` in a subprocess) and this code records the run
under that commit's sha, so a change point can be bisected to a commit.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa

from jobs import engines, host_monitor
from jobs.engines import ENGINES, EngineRun
from jobs.errors import RefError, StoreUnavailable, UsageError, WorkloadError
from jobs.host_facts import host_facts
from jobs.metrics import agreement, request_row, summarize
from jobs.settings import workloads_file
from jobs.store.models import utcnow
from jobs.validity import run_verdict
from jobs.workloads import DTYPES, Workload, get_workload, load_workloads, workload_names

DEFAULT_MODEL = "smollm2-135m-instruct"
# How engines are measured, part of every series: figures of different methods are not
# compared. 2: warm-up on the measured shapes for every engine, our prefix cache emptied
# before each measured repetition, the host watched throughout (1: runs before that).
MEASUREMENT_METHOD = 2
# The Python package each engine needs beyond the core install (the `peers` extra).
ENGINE_PACKAGES = {"hf": "transformers", "hf-static": "transformers", "llamacpp": "llama_cpp"}


@dataclass
class BenchResult:
    workload: Workload
    run: EngineRun
    rows: list[dict]                  # one per request
    metrics: dict[str, dict]          # name -> {value, count, p50, ...}
    engine_s: float | None = None     # time inside the engine adapter: load, warm-up and the timed run
    host: dict | None = None          # the host meanwhile (host_monitor summary); None: not watched
    gpu: dict | None = None           # the GPU lease it ran under (gpu_lease.Lease.record()); None: none
    preflight: dict | None = None     # its own preflight (a nightly cell's, PreflightOutcome.as_dict()); None: none


def run_engine(workload: Workload, engine: str, model: str = DEFAULT_MODEL, backend: str = "auto",
               device: str = "cpu", dtype: str = "auto", *, gpu_index: int | None = 0,
               host_inputs: host_monitor.Inputs | None = None,
               siblings: Callable[[], Iterable[int]] = tuple) -> BenchResult:
    """One engine on `workload`, the host watched throughout (`host_inputs`: a scripted host;
    `gpu_index`: the GPU to watch, None for none; `siblings`: the pids of the tasks run beside
    it by design, whose CPU is recorded apart from the foreign)."""
    dtype = workload.dtype if dtype == "auto" else dtype
    entered = time.perf_counter()
    # Watched from load to the last token, not just the timed part: the adapters do not
    # say when that starts, and a host busy at any point of it is a host to distrust.
    with host_monitor.watch(gpu_index, inputs=host_inputs, siblings=siblings) as host:
        run = engines.run_engine(engine, workload, model, backend, device, dtype)
    engine_s = time.perf_counter() - entered
    rows = [request_row(c) for c in run.completions]
    metrics = summarize(rows, run.wall_s)
    for name, value in run.extra_metrics.items():
        metrics[name] = {"value": value, "count": 1}
    return BenchResult(workload, run, rows, metrics, engine_s, host.summary())


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


def job_overhead(results: list[BenchResult], job_wall_s: float) -> dict[str, dict]:
    """The job's own time (workload, metrics, agreement, table...) = its wall minus the time inside engines."""
    outside = job_wall_s - sum(r.engine_s for r in results)
    return {"job_overhead_s": {"value": outside, "count": 1},
            "job_overhead_frac": {"value": outside / job_wall_s, "count": 1}}


def record(results: list[BenchResult], started_at: datetime, finished_at: datetime, model: str,
           preflight=None, store=None, *, host: dict | None = None, job_metrics: dict | None = None,
           kind: str = "bench", **run_fields) -> str:
    """Land one bench invocation in the results store: a run (all engines, one
    fingerprint) with its validity verdict, a metric row per engine and metric,
    and the per-request rows.

    `host` is host_facts() of the machine and code that ran the engines (default: this
    one); `job_metrics` are recorded under the engine name "job"; `kind` is "bench-at-ref" for
    a re-measurement of another commit (kept out of history: v_metric_history); `run_fields` (id,
    airflow_dag_id, airflow_run_id) go into the RunRecord as given. `store` is a ready one
    (open_ready_store); by default the environment's is opened and migrated here."""
    from jobs.store import MetricRecord, RunRecord, open_ready_store, record_run
    store = store or open_ready_store()
    host = host or host_facts()
    workload = results[0].workload
    digest = engines.model_digest(model)
    identities = {r.run.engine: engines.identity(r.run.engine, r.run.config) for r in results} | {"job": {}}
    preflight_status = preflight.record_status if preflight else "skipped"
    run = RunRecord(kind=kind, workload=workload.name, started_at=started_at, finished_at=finished_at,
                    preflight_status=preflight_status,
                    preflight=preflight.as_dict() if preflight else {},
                    validity=run_verdict(workload, {r.run.engine: r.metrics for r in results}, preflight_status,
                                         preflight_thresholds=preflight.thresholds if preflight else None,
                                         host_by_engine={r.run.engine: r.host for r in results if r.host},
                                         preflight_by_engine={r.run.engine: r.preflight for r in results
                                                              if r.preflight}),
                    config={"model": model, "model_sha256": digest, "workload_version": workload.version,
                            "measurement_method": MEASUREMENT_METHOD,
                            "engines": {r.run.engine: r.run.config for r in results},
                            # Provenance, not identity: which device each engine had, and when.
                            "gpu_leases": {r.run.engine: r.gpu for r in results if r.gpu}},
                    identities={engine: {**config, "model_sha256": digest, "measurement_method": MEASUREMENT_METHOD}
                                for engine, config in identities.items()},
                    **host, **run_fields)
    by_engine = [(r.run.engine, r.metrics) for r in results] + [("job", job_metrics or {})]
    metrics = [MetricRecord(engine, name, m["value"], m.get("count"), m.get("p50"), m.get("p90"),
                            m.get("p99"), m.get("mean"), m.get("std"))
               for engine, engine_metrics in by_engine for name, m in engine_metrics.items()]
    rows = [{"engine": r.run.engine, **row} for r in results for row in r.rows]
    return record_run(store, run, metrics, pa.Table.from_pylist(rows) if rows else None,
                      known_workloads=workload_names())


def run_at_commit(workload: Workload, sha: str, model: str, args: argparse.Namespace
                  ) -> tuple[list[BenchResult], str]:
    """The engines as the code at commit `sha` runs them: its own `bench --json`, in a temporary
    worktree; with the content hash of that worktree's code (jobs.code_identity)."""
    from jobs.code_identity import code_hash
    from jobs.git_ref import worktree_at
    with worktree_at(sha) as tree, tempfile.TemporaryDirectory(prefix="roadgate-ref-out-") as out:
        summary = Path(out) / "bench.json"
        command = [sys.executable, "-m", "jobs.cli", "bench", "--workload", workload.name, "--model", model,
                   "--backend", args.backend, "--device", args.device, "--no-store", "--json", str(summary)]
        if args.dtype != "auto":   # older commits may not know the option; "auto" is their behaviour
            command += ["--dtype", args.dtype]
        command += [flag for engine in args.engine for flag in ("--engine", engine)]
        # Only the worktree on the path: its jobs and engine packages, not this checkout's.
        env = {**os.environ, "PYTHONPATH": str(tree)}
        # Its table would repeat the one printed here from its JSON; its stderr tells what went wrong.
        child = subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
        sys.stderr.write(child.stderr)
        if child.returncode != 0:
            last = (child.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RefRunError(f"bench at {args.ref} ({sha[:12]}) exited {child.returncode}: {last}",
                              child.returncode)
        engines, ref_code_hash = json.loads(summary.read_text()), code_hash(tree)
    return [BenchResult(workload, EngineRun(e["engine"], e["config"], [], e["metrics"]["wall_s"]["value"]),
                        e.get("requests", []), e["metrics"]) for e in engines], ref_code_hash


class RefRunError(RuntimeError):
    """The bench at another commit failed; its exit status says whether it refused its input (2)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


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


# ---------------------------------------------------------------- CLI

def register(sub) -> None:
    p = sub.add_parser("bench", help="run engines on a workload and report figures")
    p.add_argument("--workload", required=True, help=f"a workload of {workloads_file()}: {_workload_choices()}")
    p.add_argument("--engine", action="append", choices=sorted(ENGINES), required=True,
                   help="repeat to run several engines in one run (the last is the agreement reference)")
    p.add_argument("--model", help=f"alias, GGUF path, Hugging Face folder or dummy:<preset> (default: the "
                                   f"workload's model if it states one, else {DEFAULT_MODEL})")
    p.add_argument("--backend", default="auto", choices=["auto", "cuda", "torch"], help="our engine's backend")
    p.add_argument("--dtype", default="auto", choices=list(DTYPES),
                   help="weights and activations of ours and hf (auto: the workload's dtype if it names one, "
                        "else bfloat16 on a GPU, float32 on CPU); llama.cpp runs the GGUF's own types")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="the HF peer's device (llama.cpp always runs on CPU)")
    p.add_argument("--ref", help="run the engines from this git commit (a temporary worktree) and record the "
                                 "run under its sha")
    p.add_argument("--json", help="also write the summary metrics and request rows to this JSON file")
    p.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    p.add_argument("--preflight", action="store_true",
                   help="lease a GPU (refused when none is free), wait for a quiet host (roadgate preflight's "
                        "defaults) and run on that GPU; without it the run is stored with preflight 'skipped', "
                        "which gates treat as not quiet")
    p.add_argument("--gpu", type=int, help="with --preflight: the GPU to lease (default: the lowest free one)")
    p.set_defaults(func=run_cli)


def _workload_choices() -> str:
    # Only the help text: a malformed workloads file is refused, in one line, by the run itself.
    try:
        return ", ".join(sorted(load_workloads()))
    except WorkloadError:
        return "(the file cannot be read: `roadgate bench` says why)"


def check_inputs(args: argparse.Namespace) -> tuple[Workload, str | None, str]:
    """Everything that can be refused before any engine runs: the workload, the ref, the model,
    the peers. Returns the workload, the ref's commit and the model the run measures."""
    try:
        workload = get_workload(args.workload)
        workload.requests()   # its chat file read now, not after the first engine ran
        model = workload.model_for(args.model, DEFAULT_MODEL)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    if args.dtype not in ("auto", workload.dtype) and workload.dtype != "auto":
        raise UsageError(f"workload {workload.name!r} is measured in {workload.dtype}; --dtype {args.dtype} "
                         f"contradicts it")
    sha = None
    if args.ref:
        from jobs.git_ref import resolve_commit
        try:
            sha = resolve_commit(args.ref)
        except RefError as e:
            raise UsageError(str(e)) from None
    from engine.model_source import ModelSourceError, alias_path, resolve
    try:
        resolve(model)
    except ModelSourceError as e:
        raise UsageError(str(e)) from None
    if "llamacpp" in args.engine and alias_path(model).suffix != ".gguf":
        raise UsageError(f"model {model!r}: llama.cpp needs a GGUF file")
    for engine in dict.fromkeys(args.engine):
        package = ENGINE_PACKAGES.get(engine)
        if package and importlib.util.find_spec(package) is None:
            raise UsageError(f"engine {engine!r} needs the Python package {package!r}: pip install -e '.[peers]'")
    return workload, sha, model


def run_cli(args: argparse.Namespace) -> int:
    # Importing torch, the engines' library, is engine start-up (as loading the model is):
    # the job's own time starts after it.
    import torch  # noqa: F401
    job_start = time.perf_counter()
    workload, sha, model = check_inputs(args)
    store = None
    if not args.no_store:   # opened and migrated before any engine runs: a bad store must not cost a benchmark
        from jobs.store import open_ready_store
        try:
            store = open_ready_store()
        except StoreUnavailable as e:
            raise UsageError(str(e)) from None
    with contextlib.ExitStack() as held:
        outcome = leased = None
        if args.preflight:
            waiting = time.perf_counter()
            from jobs.preflight import on_a_leased_gpu
            leased, outcome = on_a_leased_gpu(held, args.gpu)
            job_start += time.perf_counter() - waiting   # waiting for quiet is not the job's own overhead
        started = utcnow()
        if sha:
            try:
                results, ref_code_hash = run_at_commit(workload, sha, model, args)
            except RefRunError as e:
                if e.returncode == 2:
                    raise UsageError(str(e)) from None
                print(f"roadgate bench: error: {e}", file=sys.stderr)
                return 1
        else:
            from engine import ModelOutputError, PromptError
            try:
                results = [run_engine(workload, e, model, args.backend, args.device, args.dtype,
                                      gpu_index=leased.index if leased else 0) for e in args.engine]
            except (PromptError, ModelOutputError) as e:   # the model cannot serve the workload; nothing recorded
                raise UsageError(f"model {model}: {e}") from None
    if leased:   # released now: the record says until when
        for r in results:
            r.gpu = leased.record()
    if len(results) > 1 and not sha:
        add_agreement(results, results[-1])
    print(format_table(results))
    # The engines' time at another commit is not split from its job's, so --ref runs report no overhead.
    job_metrics = None if sha else job_overhead(results, time.perf_counter() - job_start)
    run_id = None
    if not args.no_store:
        # A run at a ref is recorded under that commit's sha: its code is what ran.
        host = {**host_facts(), "git_sha": sha, "git_dirty": False, "code_hash": ref_code_hash} if sha else None
        run_id = record(results, started, utcnow(), model, outcome, store, host=host, job_metrics=job_metrics,
                        kind="bench-at-ref" if sha else "bench")
        print(f"recorded run {run_id}" + (f" (code at {args.ref}: {sha})" if sha else ""))
    if job_metrics:
        wall = time.perf_counter() - job_start
        inside = sum(r.engine_s for r in results)
        print(f"job: {wall:.2f}s wall, {inside:.2f}s inside engines, {wall - inside:.2f}s outside "
              f"({100 * (wall - inside) / wall:.1f}%, the store write included)")
    if args.json:
        from jobs.atomic import atomic_write_texts
        atomic_write_texts({Path(args.json): json.dumps(
            [{"workload": workload.name, "engine": r.run.engine, "run_id": run_id, "config": r.run.config,
              "metrics": r.metrics, "requests": r.rows} for r in results], indent=1)})
    sys.stdout.flush()
    return 0
