"""A micro-benchmark's figures land in the store and gate roadmap rows (SQLite and PostgreSQL)."""
from datetime import timedelta

import pytest
from sqlalchemy import select

from jobs import preflight
from jobs.gates.evaluate import evaluate_gates
from jobs.microbench import record_microbench
from jobs.preflight import PreflightOutcome
from jobs.store.models import Metric, Run
from tests.gates.test_evaluate import NOW, setup_rows
from tests.host_support import watched

HOST = {"host": "gpu-host", "gpu_name": "NVIDIA H200", "driver_version": "580", "cuda_version": "13.0",
        "hardware_class": "H200", "git_sha": "0" * 40, "git_dirty": False}
ROOFLINE = dict(id="ROAD-TEST-ROOFLINE", title="t", metric="roofline_ratio", engine="ours", comparison="<=",
                threshold=1.3, workload="decode-step-b256-c1024", hardware="H200", max_age_days=7,
                validity={"preflight_quiet": False})
MEMORY = dict(ROOFLINE, id="ROAD-TEST-MEMORY", metric="memory_other_frac", threshold=0.10)


def record(store, ratio: float, other: float, days_before: float = 1.0) -> str:
    at = NOW - timedelta(days=days_before)
    return record_microbench("decode-step-b256-c1024", {"batch": 256, "context": 1024},
                             {"decode_step_s": 0.0044, "roofline_ratio": ratio, "memory_other_frac": other},
                             at, at + timedelta(seconds=8), store=store, host=HOST)


def test_figures_land_as_one_microbench_run(store):
    run_id = record(store, 2.98, 0.041)
    with store.session() as s:
        run = s.get(Run, run_id)
        assert (run.kind, run.workload, run.hardware_class, run.preflight_status) == \
            ("microbench", "decode-step-b256-c1024", "H200", "skipped")
        figures = {m.metric: m.value for m in s.scalars(select(Metric).where(Metric.run_id == run_id))}
    assert figures == {"decode_step_s": 0.0044, "roofline_ratio": 2.98, "memory_other_frac": 0.041}


def test_microbench_rows_pass_or_gate_on_the_newest_run(store):
    setup_rows(store, ROOFLINE, MEMORY)
    record(store, 2.98, 0.041)
    verdicts = {e.roadmap_row_id: e.status for e in evaluate_gates(store, NOW)}
    assert verdicts == {"ROAD-TEST-ROOFLINE": "GATING", "ROAD-TEST-MEMORY": "PASS"}
    record(store, 1.25, 0.12, days_before=0.5)
    verdicts = {e.roadmap_row_id: e.status for e in evaluate_gates(store, NOW)}
    assert verdicts == {"ROAD-TEST-ROOFLINE": "PASS", "ROAD-TEST-MEMORY": "GATING"}


def test_an_unknown_microbenchmark_is_refused(store):
    with pytest.raises(ValueError, match="unknown micro-benchmark 'decode-step-b3-c7'"):
        record_microbench("decode-step-b3-c7", {}, {"roofline_ratio": 1.0}, NOW, NOW, store=store, host=HOST)


def test_a_watched_run_carries_the_hosts_verdict_and_a_quiet_host_row_judges_it(store):
    """A micro-benchmark with host time in its figures (prefill) records the preflight it waited
    on and the host monitor's summary; a row that asks for a quiet host passes only the run
    whose host was quiet before and throughout."""
    row = dict(ROOFLINE, id="ROAD-TEST-TTFT-QUIET", metric="ttft_p50_s", threshold=0.006,
               workload="prefill-1x4000", validity={})
    setup_rows(store, row)
    quiet = PreflightOutcome("quiet", 30.0, "load 0.1 below 1.0 for 30 s", thresholds=dict(preflight.DEFAULTS))

    def land(days_before: float, **watch) -> str:
        at = NOW - timedelta(days=days_before)
        return record_microbench("prefill-1x4000", {"batch": 1, "tokens": 4000}, {"ttft_p50_s": 0.0055},
                                 at, at + timedelta(seconds=8), store=store, host=HOST, **watch)

    def verdict() -> tuple[str, str]:
        [e] = evaluate_gates(store, NOW)
        return e.status, e.reason

    land(3.0)
    assert verdict() == ("INVALID", "preflight was 'skipped', not quiet")
    run_id = land(2.0, preflight=quiet, watched=watched(foreign_cpus=0.9))
    status, reason = verdict()
    assert status == "INVALID" and reason.startswith("ours: noisy during measurement (foreign CPUs mean 0.9")
    land(1.0, preflight=quiet, watched=watched(foreign_cpus=0.05))
    assert verdict()[0] == "PASS"
    with store.session() as s:
        run = s.get(Run, run_id)
        assert run.preflight_status == "quiet" and run.preflight["status"] == "quiet"
        assert run.validity["valid"] is False and run.validity["host"]["ours"]["foreign_cpus_mean"] == 0.9


def test_an_unwatched_run_stores_no_verdict(store):
    with store.session() as s:
        assert s.get(Run, record(store, 2.98, 0.041)).validity is None
