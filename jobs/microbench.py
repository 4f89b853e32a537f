"""Micro-benchmarks in the results store: figures of one part of the engine (a decode
step against its roofline, where the GPU memory goes, a prefill's time to first token)
that no request workload measures.

A micro-benchmark run is a run of kind "microbench" under a registered name
(jobs.registry.MICROBENCHMARKS), with its parameters in the config (the fingerprint)
and one metric row per figure, so roadmap rows can gate on it like on a bench run.

Most time GPU events around graph replays, which the host's load does not enter; they run
without a preflight (preflight_status "skipped"). A micro-benchmark whose figures include host
time (prefill's wall clock and time to first token: the scheduling and the launches before the
first kernel) passes the `preflight` it waited on and the host_monitor summary of its
measurement (`watched`), and its run carries the same host verdict as a bench run's
(jobs/validity.py): a reader sees whether the host was quiet, and a row that asks for a quiet
host can judge it. The shipped rows on micro-benchmarks say `preflight_quiet: false`: each holds
ours to a fixed figure, with no peer, so a busy host can only keep it GATING, never pass it.
"""
from __future__ import annotations

from datetime import datetime

from jobs.host_facts import host_facts
from jobs.preflight import PreflightOutcome
from jobs.registry import MICROBENCHMARKS
from jobs.store import MetricRecord, RunRecord, Store, open_store, record_run, upgrade
from jobs.validity import host_verdict
from jobs.workloads import DEFAULT_MAX_FOREIGN_CPUS

ENGINE = "ours"


def record_microbench(name: str, config: dict, figures: dict[str, float], started_at: datetime,
                      finished_at: datetime, store: Store | None = None, host: dict | None = None, *,
                      preflight: PreflightOutcome | None = None, watched: dict | None = None) -> str:
    """Land one micro-benchmark run (engine "ours") with its figures; return the run id.
    `preflight`: the outcome it waited on before measuring; `watched`: the host_monitor summary
    of the measurement. With neither, the run is stored as unwatched (preflight "skipped")."""
    if name not in MICROBENCHMARKS:
        raise ValueError(f"unknown micro-benchmark {name!r} (known: {', '.join(sorted(MICROBENCHMARKS))})")
    store = store or open_store()
    upgrade(store.engine)
    host = host or host_facts()
    preflight_status = preflight.record_status if preflight else "skipped"
    validity = None
    if preflight or watched:
        quiet_host = host_verdict([ENGINE], preflight_status, preflight.thresholds if preflight else None,
                                  {ENGINE: watched} if watched else {}, DEFAULT_MAX_FOREIGN_CPUS)
        validity = {"valid": not quiet_host["host_reasons"], "reasons": quiet_host["host_reasons"], **quiet_host}
    run = RunRecord(kind="microbench", workload=name, started_at=started_at, finished_at=finished_at,
                    config=config, preflight_status=preflight_status,
                    preflight=preflight.as_dict() if preflight else {}, validity=validity, **host)
    return record_run(store, run, [MetricRecord(ENGINE, metric, value, 1) for metric, value in figures.items()])
