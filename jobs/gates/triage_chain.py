"""From a suspected regression to its first bad commit: re-measure both ends, test the
shift, bisect the first-parent commits between them, record and report the verdict.

Every measurement is an ordinary `roadgate bench --ref SHA` run (recorded in the store
under that commit, with the GPU lease and preflight when `bench_args` asks for them), so
a verdict rests on runs anyone can look up.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text

from jobs import bench, git_ref
from jobs.errors import RefError, UsageError
from jobs.gates.bisect import BisectResult, bisect
from jobs.gates.confirm import ShiftTest, interleaved
from jobs.gates.triage import record_culprit, record_shift_check
from jobs.store.db import Store

SERIES_OF_RUN = text("SELECT series FROM metrics WHERE run_id = :run AND engine = :engine AND metric = :metric")
CHANGE_POINT = text(
    "SELECT cp.metric, cp.engine, b.git_sha AS good, a.git_sha AS bad, a.workload, a.config, m.better "
    "FROM change_points cp JOIN runs b ON b.id = cp.last_run_before_id JOIN runs a ON a.id = cp.first_run_after_id "
    "JOIN metrics m ON m.run_id = a.id AND m.engine = cp.engine AND m.metric = cp.metric WHERE cp.id = :id")


@dataclass
class Measured:
    """Figures of one commit, each from its own recorded run."""
    sha: str
    figures: dict[str, float] = field(default_factory=dict)     # run id -> value


@dataclass
class Triage:
    metric: str
    good: Measured
    bad: Measured
    series: str
    shift: ShiftTest
    shift_check_id: int
    bisected: BisectResult | None = None     # None: the shift was noise
    culprit_id: int | None = None


def bench_at(sha: str, bench_args: list[str], metric: str, engine: str, store: Store) -> tuple[str, float, str] | None:
    """One `roadgate bench --ref sha` run: (its run id, the engine's `metric`, its series), or
    None when that commit cannot be built or run (the bisect skips it)."""
    parser = argparse.ArgumentParser(prog="roadgate")
    bench.register(parser.add_subparsers(dest="command"))
    with tempfile.TemporaryDirectory(prefix="roadgate-triage-") as out:
        summary = Path(out) / "bench.json"
        args = parser.parse_args(["bench", *bench_args, "--ref", sha, "--json", str(summary)])
        try:
            if args.func(args) != 0:
                return None
        except UsageError:      # e.g. that commit's bench refused the workload it does not know
            return None
        (result,) = [e for e in json.loads(summary.read_text()) if e["engine"] == engine]
    with store.engine.connect() as conn:
        series = conn.execute(SERIES_OF_RUN, {"run": result["run_id"], "engine": engine, "metric": metric}).scalar()
    return result["run_id"], result["metrics"][metric]["value"], series


def triage(store: Store, good: str, bad: str, bench_args: list[str], metric: str, better: str,
           engine: str = "ours", repetitions: int = 5, runs_per_probe: int = 3, max_runs: int = 30,
           change_point_id: int | None = None) -> Triage:
    """Re-measure `good` and `bad` (interleaved, `repetitions` runs each), test the shift,
    and if it is confirmed bisect to the first bad commit within `max_runs` further runs."""
    commits = git_ref.first_parent_commits(good, bad)       # refused before any bench runs
    ends = {"before": Measured(commits[0]), "after": Measured(commits[-1])}
    series = None
    for side in interleaved(repetitions):
        measured = bench_at(ends[side].sha, bench_args, metric, engine, store)
        if measured is None:
            raise RefError(f"the {'good' if side == 'before' else 'bad'} end {ends[side].sha[:12]} "
                           "cannot be built or run: nothing to triage")
        run_id, value, series = measured
        ends[side].figures[run_id] = value
    good_end, bad_end = ends["before"], ends["after"]
    check_id, shift = record_shift_check(store, series, metric, better, good_end.sha, bad_end.sha,
                                         good_end.figures, bad_end.figures, change_point_id)
    found = Triage(metric, good_end, bad_end, series, shift, check_id)
    if not shift.confirmed:
        return found
    probe_runs: dict[str, list[str]] = {}

    def measure(sha: str) -> list[float] | None:
        figures = []
        for _ in range(runs_per_probe):
            measured = bench_at(sha, bench_args, metric, engine, store)
            if measured is None:
                return None
            probe_runs.setdefault(sha, []).append(measured[0])
            figures.append(measured[1])
        return figures

    found.bisected = bisect(commits, list(good_end.figures.values()), list(bad_end.figures.values()), measure,
                            max_runs, runs_per_probe)
    found.culprit_id = record_culprit(store, series, metric, found.bisected, list(good_end.figures.values()),
                                      list(bad_end.figures.values()), probe_runs, check_id)
    return found


def report(t: Triage) -> str:
    """The verdict as a short Markdown report."""
    s = t.shift
    lines = [f"# Regression triage: {t.metric}", "",
             f"* good end {t.good.sha[:12]}: median {s.median_before:.4g} over {s.n_before} runs",
             f"* bad end {t.bad.sha[:12]}: median {s.median_after:.4g} over {s.n_after} runs",
             f"* change {100 * s.change:+.1f}% (95% interval {100 * s.change_low:+.1f}% to {100 * s.change_high:+.1f}%), "
             f"Mann-Whitney p = {s.pvalue:.3g}, rank-biserial {s.rank_biserial:.2f}: "
             f"**{'confirmed' if s.confirmed else 'noise'}** (shift check {t.shift_check_id})"]
    if t.bisected:
        b = t.bisected
        verdict = (f"first bad commit **{b.first_bad[:12]}** (last good {b.last_good[:12]})" if b.found else
                   f"stopped ({b.stopped}) with {len(b.candidates)} candidates: "
                   + ", ".join(c[:12] for c in b.candidates))
        lines += ["", f"Bisect: {verdict}; {b.runs} bench runs (culprit {t.culprit_id}).", "",
                  "| commit | verdict | median |", "| --- | --- | --- |"]
        lines += [f"| {p.sha[:12]} | {p.verdict} | {statistics.median(p.figures):.4g} |" if p.figures
                  else f"| {p.sha[:12]} | skip | — |" for p in b.probes]
    return "\n".join(lines) + "\n"


TRIAGE_DEFAULTS = {"metric": "output_tok_s", "better": "higher", "engine": "ours", "backend": "auto",
                   "model": bench.DEFAULT_MODEL, "repetitions": 5, "runs_per_probe": 3, "max_runs": 30,
                   "preflight": True, "change_point_id": None}


def params_of_change_point(store: Store, change_point_id: int) -> dict:
    """What a change point's two runs say to triage: their commits, the workload, the metric
    and its direction, the engine with its backend, and the model."""
    with store.engine.connect() as conn:
        row = conn.execute(CHANGE_POINT, {"id": change_point_id}).first()
    if row is None:
        raise UsageError(f"no change point {change_point_id} in the results store")
    if not (row.good and row.bad):
        raise UsageError(f"change point {change_point_id}: its runs record no commit: nothing to bisect")
    # A JSON column read through plain SQL: text on SQLite, decoded on PostgreSQL.
    config = (json.loads(row.config) if isinstance(row.config, str) else row.config) or {}
    engine = (config.get("engines") or {}).get(row.engine, {})
    return {"good": row.good, "bad": row.bad, "workload": row.workload, "metric": row.metric, "better": row.better,
            "engine": row.engine, "backend": engine.get("backend", "auto"),
            "model": config.get("model", bench.DEFAULT_MODEL), "change_point_id": change_point_id}


def triage_params(raw: dict, store: Store | None = None) -> dict:
    """The bisect DAG's params with TRIAGE_DEFAULTS filled in, under what the change point
    they name says (given a store); UsageError names what is wrong."""
    given = {k: v for k, v in raw.items() if v is not None}
    from_change_point = params_of_change_point(store, given["change_point_id"]) \
        if store is not None and given.get("change_point_id") is not None else {}
    p = TRIAGE_DEFAULTS | from_change_point | given
    missing = [name for name in ("good", "bad", "workload") if not p.get(name)]
    if missing:
        raise UsageError(f"missing parameter(s): {', '.join(missing)}")
    unknown = sorted(set(p) - set(TRIAGE_DEFAULTS) - {"good", "bad", "workload"})
    if unknown:
        raise UsageError(f"unknown parameter(s): {', '.join(unknown)}")
    return p


def run_triage(params: dict) -> dict:
    """The bisect DAG's task: triage between params' `good` and `bad` commits on `workload`
    (the rest as TRIAGE_DEFAULTS), in the default results store; the Markdown report goes to
    the data directory's triage/ folder. Returns the verdict."""
    from jobs.atomic import atomic_write_texts
    from jobs.settings import data_dir
    from jobs.store import open_ready_store
    store = open_ready_store()
    p = triage_params(params, store)
    bench_args = ["--workload", p["workload"], "--engine", p["engine"], "--backend", p["backend"],
                  "--model", p["model"], *(["--preflight"] if p["preflight"] else [])]
    found = triage(store, p["good"], p["bad"], bench_args, p["metric"], p["better"], engine=p["engine"],
                   repetitions=p["repetitions"], runs_per_probe=p["runs_per_probe"], max_runs=p["max_runs"],
                   change_point_id=p["change_point_id"])
    path = data_dir() / "triage" / f"{found.shift_check_id}-{found.good.sha[:12]}..{found.bad.sha[:12]}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_texts({path: report(found)})
    b = found.bisected
    return {"shift_check_id": found.shift_check_id, "verdict": "confirmed" if found.shift.confirmed else "noise",
            "change": found.shift.change, "culprit_id": found.culprit_id, "stopped": b.stopped if b else None,
            "first_bad": b.first_bad if b and b.found else None, "report": str(path)}


def run_triages(params: dict, change_point_ids: list[int]) -> list[dict]:
    """The bisect DAG's task: each suspected change point in turn (the asset event's), or, with
    none (a run triggered by hand), what the params name; the verdicts in order."""
    if not change_point_ids:
        return [run_triage(params)]
    return [run_triage(params | {"change_point_id": change_point_id}) for change_point_id in change_point_ids]
