"""Micro-benchmarks in the results store: figures of one part of the engine (a decode
step against its roofline, where the GPU memory goes) that no request workload measures.

A micro-benchmark run is a run of kind "microbench" under a registered name
(jobs.registry.MICROBENCHMARKS), with its parameters in the config (the fingerprint)
and one metric row per figure, so roadmap rows can gate on it like on a bench run.
It has no preflight of its own: it times GPU events around graph replays, which the
host's load does not enter (rows that gate on it say `preflight_quiet: false`).
"""
from __future__ import annotations

from datetime import datetime

from jobs.host_facts import host_facts
from jobs.registry import MICROBENCHMARKS
from jobs.store import MetricRecord, RunRecord, Store, open_store, record_run, upgrade


def record_microbench(name: str, config: dict, figures: dict[str, float], started_at: datetime,
                      finished_at: datetime, store: Store | None = None, host: dict | None = None) -> str:
    """Land one micro-benchmark run (engine "ours") with its figures; return the run id."""
    if name not in MICROBENCHMARKS:
        raise ValueError(f"unknown micro-benchmark {name!r} (known: {', '.join(sorted(MICROBENCHMARKS))})")
    store = store or open_store()
    upgrade(store.engine)
    host = host or host_facts()
    run = RunRecord(kind="microbench", workload=name, started_at=started_at, finished_at=finished_at,
                    config=config, preflight_status="skipped", **host)
    return record_run(store, run, [MetricRecord("ours", metric, value, 1) for metric, value in figures.items()])
