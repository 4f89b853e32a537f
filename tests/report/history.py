"""A constructed history the report tests read back: what each view must return follows from it.

Four roadmap rows: a throughput row judged against the peer engine (40 nightly
runs with a planted step down at night STEP, so one change point), an agreement
row on the same runs that passes, a latency row on another workload whose newest
run failed, and a row never measured.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import yaml

from jobs.gates.evaluate import evaluate_gates
from jobs.gates.regressions import detect_regressions
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.store import MetricRecord, record_run
from tests.store_support import EPOCH, nightly

NIGHTS, STEP = 40, 25
NOW = EPOCH + timedelta(days=NIGHTS, hours=1)
VALIDITY = {"min_samples": 100}
ROWS = [
    dict(id="ROAD-T-TPUT", title="nano-bench throughput at least 1.1x hf", metric="output_tok_s", engine="ours",
         comparison=">=", threshold={"ratio": 1.1, "peer": "hf"}, workload="nano-bench", hardware="H200",
         max_age_days=3, validity=VALIDITY),
    dict(id="ROAD-T-TTFT", title="batch-1 TTFT at most 20 ms | on one H200", metric="ttft_p50_s", engine="ours",
         comparison="<=", threshold=0.02, workload="latency-b1", hardware="H200", max_age_days=3, validity=VALIDITY),
    dict(id="ROAD-T-AGREE", title="ours agrees with hf on nano-bench", metric="agreement", engine="ours",
         comparison=">=", threshold=0.95, workload="nano-bench", hardware="H200", max_age_days=3, validity=VALIDITY),
    dict(id="ROAD-T-CPU", title="CPU agreement", metric="agreement", engine="ours", comparison=">=", threshold=0.99,
         workload="cpu-small", hardware="cpu", max_age_days=14, validity={"preflight_quiet": False}),
]
CODE_HASH = "c0de" * 10   # the noisy run's; the others record none, as runs before migration 0004
STATUS = {"ROAD-T-TPUT": "GATING", "ROAD-T-TTFT": "INVALID", "ROAD-T-AGREE": "PASS", "ROAD-T-CPU": "NO_DATA"}


def latency(engine: str, kind: str, p50: float) -> list[MetricRecord]:
    """The two metric rows bench writes per latency kind, both carrying the distribution's summary."""
    stats = dict(count=256, p50=p50, p90=p50 * 1.5, p99=p50 * 3, mean=p50 * 1.2, std=p50 / 2)
    return [MetricRecord(engine, f"{kind}_p50_s", p50, **stats), MetricRecord(engine, f"{kind}_p99_s", p50 * 3, **stats)]


def ours_tok_s(night: int) -> float:
    wobble = (-4.0, 3.0, -1.0, 5.0, -2.0)[night % 5]
    return (1200.0 if night < STEP else 1000.0) + wobble


@dataclass
class History:
    nano_runs: list[str] = field(default_factory=list)  # nano-bench runs, night by night
    latency_ok_run: str = ""
    latency_failed_run: str = ""
    noisy_run: str = ""


def build_history(store) -> History:
    sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": ROWS}, allow_unicode=True)))
    h = History()
    for night in range(NIGHTS):
        metrics = ([MetricRecord("ours", "output_tok_s", ours_tok_s(night), count=256),
                    MetricRecord("hf", "output_tok_s", 1000.0, count=256),
                    MetricRecord("ours", "agreement", 1.0 if night % 2 else 0.98, count=256)]
                   + latency("ours", "ttft", 0.010) + latency("ours", "tpot", 0.002) + latency("ours", "itl", 0.002)
                   + latency("hf", "ttft", 0.030) + latency("hf", "tpot", 0.004) + latency("hf", "itl", 0.004))
        h.nano_runs.append(record_run(store, nightly(night), metrics))
    h.latency_ok_run = record_run(store, nightly(NIGHTS - 2, workload="latency-b1"), latency("ours", "ttft", 0.015))
    h.latency_failed_run = record_run(store, nightly(NIGHTS - 1, workload="latency-b1", status="failed"),
                                      latency("ours", "ttft", 0.5))
    h.noisy_run = record_run(store, nightly(NIGHTS - 1, workload="chat-16x64", preflight_status="noisy",
                                            code_hash=CODE_HASH),
                             [MetricRecord("ours", "output_tok_s", 50.0, count=16)])
    detect_regressions(store)
    evaluate_gates(store, NOW)
    return h
