"""Each view the report reads returns what the constructed history implies, on SQLite and PostgreSQL."""
from datetime import timedelta

import pytest
from sqlalchemy import text

from jobs.report.queries import (BOARD, CHANGE_POINTS, HISTORY, LATENCIES, LATEST_FIGURES, RECENT_RUNS,
                                 evidence_superseded)
from jobs.store import MetricRecord, supersede_metric
from jobs.store.views import dashboard_names, dashboard_sql
from tests.report.history import CODE_HASH, NIGHTS, STATUS, STEP, build_history, ours_tok_s
from tests.store_support import EPOCH


def read(store, query, **params):
    with store.engine.connect() as conn:
        return conn.execute(query, params).all()


def test_roadmap_board(built):
    store, h = built
    board = {r.roadmap_row_id: r for r in read(store, BOARD)}
    assert {k: r.status for k, r in board.items()} == STATUS
    tput, ttft, cpu = board["ROAD-T-TPUT"], board["ROAD-T-TTFT"], board["ROAD-T-CPU"]
    assert (tput.value, tput.target, tput.peer_value, tput.unit) == (ours_tok_s(NIGHTS - 1), pytest.approx(1100.0),
                                                                    1000.0, "tok/s")
    assert (tput.run_id, tput.run_started_at, tput.max_age_days) == (h.nano_runs[-1], EPOCH + timedelta(days=NIGHTS - 1), 3.0)
    assert (ttft.run_id, ttft.value, ttft.unit) == (h.latency_failed_run, 0.5, "s")  # the failed run is the newest
    assert (cpu.run_id, cpu.value, cpu.unit, cpu.run_started_at) == (None, None, None, None)
    assert not any(evidence_superseded(r) for r in board.values())


def test_roadmap_history(built):
    store, h = built
    points = {}
    for p in read(store, HISTORY):
        points.setdefault(p.roadmap_row_id, []).append(p)
    assert set(points) == {"ROAD-T-TPUT", "ROAD-T-TTFT", "ROAD-T-AGREE"}  # the CPU row has no measurements
    assert [(p.value, p.target) for p in points["ROAD-T-AGREE"]] == [(0.98 if n % 2 == 0 else 1.0, 0.95)
                                                                      for n in range(NIGHTS)]
    tput = points["ROAD-T-TPUT"]
    assert [p.run_id for p in tput] == h.nano_runs
    assert [p.value for p in tput] == [ours_tok_s(n) for n in range(NIGHTS)]
    assert [p.target for p in tput] == pytest.approx([1100.0] * NIGHTS)  # 1.1 x hf's 1000 on the same fingerprint
    ttft = points["ROAD-T-TTFT"]
    assert [(p.run_id, p.value, p.target) for p in ttft] == [
        (h.latency_ok_run, 0.015, 0.02), (h.latency_failed_run, 0.5, 0.02)]


def test_change_points(built):
    store, h = built
    (cp,) = read(store, CHANGE_POINTS)
    assert (cp.workload, cp.engine, cp.metric, cp.is_regression) == ("nano-bench", "ours", "output_tok_s", True)
    assert (cp.last_run_before_id, cp.first_run_after_id) == (h.nano_runs[STEP - 1], h.nano_runs[STEP])
    assert cp.after_started_at == EPOCH + timedelta(days=STEP)


def test_latency_distributions(built):
    store, h = built
    rows = {(r.workload, r.engine, r.latency): (r.run_id, r.count, r.p50, r.p90, r.p99, r.mean)
            for r in read(store, LATENCIES)}
    last = h.nano_runs[-1]
    assert rows == {
        ("nano-bench", "ours", "ttft"): (last, 256, 0.010, pytest.approx(0.015), 0.03, pytest.approx(0.012)),
        ("nano-bench", "ours", "tpot"): (last, 256, 0.002, pytest.approx(0.003), 0.006, pytest.approx(0.0024)),
        ("nano-bench", "ours", "itl"): (last, 256, 0.002, pytest.approx(0.003), 0.006, pytest.approx(0.0024)),
        ("nano-bench", "hf", "ttft"): (last, 256, 0.030, pytest.approx(0.045), pytest.approx(0.09), pytest.approx(0.036)),
        ("nano-bench", "hf", "tpot"): (last, 256, 0.004, pytest.approx(0.006), 0.012, pytest.approx(0.0048)),
        ("nano-bench", "hf", "itl"): (last, 256, 0.004, pytest.approx(0.006), 0.012, pytest.approx(0.0048)),
        # The newest latency-b1 run failed: the distribution comes from the one before.
        ("latency-b1", "ours", "ttft"): (h.latency_ok_run, 256, 0.015, pytest.approx(0.0225), pytest.approx(0.045),
                                         pytest.approx(0.018)),
    }


def test_run_validity(built):
    store, h = built
    runs = read(store, RECENT_RUNS, limit=1000)
    assert len(runs) == NIGHTS + 3
    assert [r.started_at for r in runs] == sorted((r.started_at for r in runs), reverse=True)
    by_id = {r.run_id: r for r in runs}
    assert by_id[h.latency_failed_run].validity == "failed"
    assert by_id[h.noisy_run].validity == "noisy host"
    assert (by_id[h.noisy_run].code_hash, by_id[h.latency_ok_run].code_hash) == (CODE_HASH, None)
    first, second = by_id[h.nano_runs[0]], by_id[h.nano_runs[1]]
    assert (first.validity, first.agreement, first.metric_count) == ("valid", 0.98, 15)
    assert (second.agreement, by_id[h.latency_ok_run].agreement) == (1.0, None)
    assert len(read(store, RECENT_RUNS, limit=5)) == 5


def test_latest_figures(built):
    store, h = built
    figures = read(store, LATEST_FIGURES)
    runs = {(f.workload, f.engine): f.run_id for f in figures}
    assert runs == {("nano-bench", "ours"): h.nano_runs[-1], ("nano-bench", "hf"): h.nano_runs[-1],
                    ("latency-b1", "ours"): h.latency_ok_run,  # not the failed one
                    ("chat-16x64", "ours"): h.noisy_run}
    values = {(f.workload, f.engine, f.metric): f.value for f in figures}
    assert values[("nano-bench", "ours", "output_tok_s")] == ours_tok_s(NIGHTS - 1)
    assert values[("latency-b1", "ours", "ttft_p50_s")] == 0.015
    assert len([f for f in figures if (f.workload, f.engine) == ("nano-bench", "ours")]) == 8  # all of its metrics


def test_a_correction_after_evaluation_marks_the_board_and_moves_the_figures(store):
    h = build_history(store)
    with store.engine.connect() as conn:
        old_id = conn.execute(text("SELECT metric_id FROM v_metric_history WHERE run_id = :r AND engine = 'ours' "
                                   "AND metric = 'output_tok_s'"), {"r": h.nano_runs[-1]}).scalar_one()
    new_id = supersede_metric(store, old_id, MetricRecord("ours", "output_tok_s", 900.0, count=256), "bad clock")
    board = {r.roadmap_row_id: r for r in read(store, BOARD)}
    assert evidence_superseded(board["ROAD-T-TPUT"]) and not evidence_superseded(board["ROAD-T-TTFT"])
    assert board["ROAD-T-CPU"].evidence_current is None
    latest = {(f.engine, f.metric): (f.metric_id, f.value) for f in read(store, LATEST_FIGURES)
              if f.workload == "nano-bench"}
    assert latest[("ours", "output_tok_s")] == (new_id, 900.0)
    assert [p.value for p in read(store, HISTORY) if p.roadmap_row_id == "ROAD-T-TPUT"][-1] == 900.0


DASHBOARD_PARAMS = {
    "metric_trend": dict(workload="nano-bench", hardware_class="H200", engine="ours", metric="output_tok_s"),
    "roadmap_history": dict(roadmap_row_id="ROAD-T-TPUT"),
}
DASHBOARD_ROWS = {"roadmap_status": 4, "roadmap_history": NIGHTS, "metric_trend": NIGHTS, "recent_regressions": 1,
                  "latency_distributions": 7, "recent_runs": NIGHTS + 3, "latest_figures": 18}


def test_every_named_dashboard_query_returns_what_the_history_implies(built):
    store, _ = built
    assert dashboard_names() == sorted(DASHBOARD_ROWS)
    with store.engine.connect() as conn:
        counts = {name: len(conn.execute(text(dashboard_sql(name)), DASHBOARD_PARAMS.get(name, {})).all())
                  for name in dashboard_names()}
    assert counts == DASHBOARD_ROWS
