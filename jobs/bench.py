"""Benchmark job: run engines on one workload, in one process, and report comparable figures."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

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


def format_table(results: list[BenchResult]) -> str:
    head = f"{'workload':<20}{'engine':<16}{'out tok/s':>11}{'TTFT p50 ms':>13}{'TPOT p50 ms':>13}" \
           f"{'E2E p50 s':>11}{'agree':>7}{'wall s':>8}"
    lines = [head]
    for r in results:
        m = r.metrics
        name = r.run.engine + "/" + (r.run.config.get("backend") or r.run.config.get("device", ""))
        agree = m.get("agreement", {}).get("value")
        lines.append(f"{r.workload.name:<20}{name:<16}{m['output_tok_s']['value']:>11.1f}"
                     f"{1e3 * m['ttft_s'].get('p50', float('nan')):>13.2f}"
                     f"{1e3 * m['tpot_s'].get('p50', float('nan')):>13.3f}"
                     f"{m['e2e_s'].get('p50', float('nan')):>11.2f}"
                     f"{'' if agree is None else format(agree, '.2f'):>7}{m['wall_s']['value']:>8.2f}")
    return "\n".join(lines)


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
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    from jobs.cli import UsageError
    try:
        workload = get_workload(args.workload)
    except WorkloadError as e:
        raise UsageError(str(e)) from None
    results = [run_engine(workload, e, args.model, args.backend, args.device) for e in args.engine]
    if len(results) > 1:
        add_agreement(results, results[-1])
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"workload": workload.name, "engine": r.run.engine, "config": r.run.config,
                        "metrics": r.metrics} for r in results], f, indent=1)
    sys.stdout.flush()
    return 0
