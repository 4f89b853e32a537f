"""The nightly DAG, end to end on CPU through Airflow's dag.test(), the real model and a
real SQLite results store; then the gate evaluation DAG sees the run that landed."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.dags.conftest import load_dag

pytestmark = pytest.mark.slow


def nightly_engines() -> list[str]:
    from jobs.engines import ENGINES
    # llama.cpp joins as soon as its adapter is registered in jobs.engines.
    return ["ours", "hf"] + (["llamacpp"] if "llamacpp" in ENGINES else [])


def roadmap_for_this_host(tmp_path: Path) -> Path:
    """The shipped roadmap with its CPU rows judged on this host's CPU class (they name the
    class they were set on; on another, the gate rightly finds no evidence)."""
    import yaml

    from jobs.host_facts import cpu_class
    from jobs.settings import SHIPPED_DATA
    doc = yaml.safe_load((SHIPPED_DATA / "roadmap.yaml").read_text())
    for row in doc["rows"]:
        if row["hardware"].startswith("cpu-"):
            row["hardware"] = cpu_class()
    path = tmp_path / "roadmap.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_nightly_dag_runs_end_to_end_on_cpu_and_gate_evaluation_sees_the_new_run(results_store, capfd, tmp_path,
                                                                                 monkeypatch):
    from airflow.models.asset import AssetEvent
    from airflow.sdk import DagRunState
    from airflow.utils.session import create_session

    from jobs.nightly import land_bench_results, resolve_config
    from jobs.store.models import GateEvaluation, Metric, Run
    from roadgate_common import RESULTS

    engines = nightly_engines()
    # The sensor samples the real host; a busy test machine still counts as quiet here.
    conf = {"profile": "cpu", "engines": engines, "workloads": ["cpu-small"],
            "preflight": {"window_s": 0, "load_threshold": 1e9}}
    dr = load_dag("nightly_benchmark").test(run_conf=conf)
    assert dr.state == DagRunState.SUCCESS
    # Its log is not read here: after other DAG runs in this process Airflow's task log goes to an
    # earlier test's streams. tests/dags/test_dag_logs.py reads one in a process of its own.

    with results_store.session() as s:
        runs = s.scalars(select(Run)).all()
        assert len(runs) == 1
        run = runs[0]
        assert (run.kind, run.workload, run.preflight_status) == ("bench", "cpu-small", "quiet")
        assert (run.airflow_dag_id, run.airflow_run_id) == ("nightly_benchmark", dr.run_id)
        assert set(run.config["engines"]) == set(engines)
        assert re.fullmatch("[0-9a-f]{40}", run.code_hash)   # the code that ran, from its files
        names = {(m.engine, m.metric) for m in s.scalars(select(Metric).where(Metric.run_id == run.id))}
    for engine in engines:
        assert {(engine, "output_tok_s"), (engine, "ttft_p50_s"), (engine, "wall_s")} <= names
    assert ("ours", "agreement") in names and ("hf", "agreement") not in names   # hf is the reference

    # The landing task declared the results asset, naming the run it landed.
    with create_session() as session:
        events = session.scalars(select(AssetEvent).where(AssetEvent.source_dag_id == "nightly_benchmark",
                                                          AssetEvent.source_run_id == dr.run_id)).all()
        assert [e.extra["run_ids"] for e in events] == [[run.id]]
        assert events[0].asset.uri == RESULTS.uri

    # Landing the same staged cells again records nothing twice.
    [staging] = (Path(os.environ["ROADGATE_DATA_DIR"]) / "staging").iterdir()
    staged = [{"workload": "cpu-small", "engine": p.stem, "path": str(p)} for p in (staging / "cpu-small").iterdir()]
    assert sorted(c["engine"] for c in staged) == sorted(engines)
    assert land_bench_results(staged, resolve_config(conf), None, "nightly_benchmark", dr.run_id) == [run.id]
    with results_store.session() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1

    # The nightly ends at its landing: it evaluated no gate and rendered no dashboard.
    dashboard = Path(os.environ["ROADGATE_DATA_DIR"]) / "report" / "index.html"
    with results_store.session() as s:
        assert s.scalar(select(func.count()).select_from(GateEvaluation)) == 0
    assert not dashboard.exists()

    # The gate evaluation the asset schedules (and `make demo` runs after the nightly): one
    # evaluation batch, judged on the new run, its status printed, and the dashboard listing the run.
    capfd.readouterr()
    monkeypatch.setenv("ROADGATE_ROADMAP_FILE", str(roadmap_for_this_host(tmp_path)))
    gates_dr = load_dag("gate_evaluation").test()
    assert gates_dr.state == DagRunState.SUCCESS
    with results_store.session() as s:
        assert len(s.scalars(select(GateEvaluation.batch_id).distinct()).all()) == 1
        newest = s.scalars(select(GateEvaluation).where(GateEvaluation.roadmap_row_id == "ROAD-ENGINE-CPU-SMALL-AGREEMENT")
                           .order_by(GateEvaluation.id.desc())).first()
    assert newest.run_id == run.id and newest.status in ("PASS", "GATING")
    printed = capfd.readouterr().out
    assert "ROAD-ENGINE-CPU-SMALL-AGREEMENT" in printed and f"dashboard: {dashboard}" in printed
    assert f'<tr data-run="{run.id}">' in dashboard.read_text()
