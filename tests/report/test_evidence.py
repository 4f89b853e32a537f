"""The evidence behind the docs: exported append-only beside them, and enough on its own to check them."""
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import text

from jobs.cli import main
from jobs.gates.evaluate import evaluate_gates
from jobs.report import check_docs, write_docs
from jobs.store import MetricRecord, open_store, record_run, upgrade
from jobs.store.evidence import add_exported_runs, export_evidence, import_evidence
from tests.report.history import NIGHTS, NOW, build_history
from tests.store_support import nightly

REPO = Path(__file__).resolve().parents[2]


def fresh_store(tmp_path: Path, name: str):
    store = open_store(f"sqlite:///{tmp_path / name}.db", str(tmp_path / f"{name}-requests"))
    upgrade(store.engine)
    return store


def test_exported_evidence_alone_checks_the_docs_and_is_only_ever_appended(store, tmp_path):
    build_history(store)
    chat = record_run(store, nightly(NIGHTS - 1, workload="chat-16x64", hardware_class="cpu-x"),
                      [MetricRecord("ours", "output_tok_s", 60.0, count=16)], pa.table({"request_index": [0, 1]}))
    evaluate_gates(store, NOW)
    docs, evidence = tmp_path / "docs", tmp_path / "docs" / "evidence"
    write_docs(store, docs)
    added = export_evidence(store, evidence)
    assert added["runs"] >= 3 and added["gate_evaluations"] == 4 and added["metrics"] > 0

    elsewhere = fresh_store(tmp_path, "clone")   # what a fresh clone has: the docs and their evidence
    import_evidence(evidence, elsewhere)
    assert check_docs(elsewhere, docs) == []
    with elsewhere.engine.connect() as conn:
        uri = conn.execute(text("SELECT parquet_uri FROM runs WHERE id = :id"), {"id": chat}).scalar()
    assert pq.read_table(uri).column("request_index").to_pylist() == [0, 1]

    before = {p.name: p.read_text() for p in evidence.glob("*.jsonl")}
    assert sum(export_evidence(store, evidence).values()) == 0          # nothing new: nothing written
    record_run(store, nightly(NIGHTS, workload="chat-16x64", hardware_class="cpu-x"),
               [MetricRecord("ours", "output_tok_s", 65.0, count=16)])
    evaluate_gates(store, NOW)
    write_docs(store, docs)
    assert export_evidence(store, evidence)["runs"] == 1
    for name, old in before.items():                                     # appended, never rewritten
        assert (evidence / name).read_text().startswith(old)
    again = fresh_store(tmp_path, "clone-2")
    import_evidence(evidence, again)
    assert check_docs(again, docs) == []


def test_named_runs_are_exported_with_their_metrics_and_requests_cited_or_not(store, tmp_path):
    first, second = (record_run(store, nightly(n, workload="chat-16x64", hardware_class="cpu-x"),
                                [MetricRecord("ours", "output_tok_s", 60.0 + n, count=16)],
                                pa.table({"request_index": [n]})) for n in (0, 1))
    evidence = tmp_path / "evidence"
    added = export_evidence(store, evidence, run_ids=[first])      # an older run of its series: not cited
    assert added["runs"] == 1 and added["metrics"] == 1
    elsewhere = fresh_store(tmp_path, "clone")
    import_evidence(evidence, elsewhere)
    with elsewhere.engine.connect() as conn:
        ids = conn.execute(text("SELECT id FROM runs")).scalars().all()
        uri = conn.execute(text("SELECT parquet_uri FROM runs WHERE id = :id"), {"id": first}).scalar()
    assert ids == [first] and second != first
    assert pq.read_table(uri).column("request_index").to_pylist() == [0]


def test_the_published_docs_agree_with_the_evidence_shipped_with_them(capsys):
    """What CI checks on every clone: docs/STATUS.md and docs/BENCHMARKS.md against docs/evidence."""
    assert main(["docs", "--check", "--out", str(REPO / "docs"), "--evidence", str(REPO / "docs" / "evidence")]) == 0
    assert "agree with the data" in capsys.readouterr().out


def test_a_gpu_hosts_runs_are_added_beside_the_published_ones_and_then_gate(store, tmp_path):
    """A run recorded in another store (a GPU host's, whose metric ids clash with ours) is
    exported, added beside the published evidence with its metrics and requests, and becomes
    its series' newest figure."""
    build_history(store)
    evaluate_gates(store, NOW)
    published = tmp_path / "evidence"
    export_evidence(store, published)
    host = fresh_store(tmp_path, "gpu-host")
    run = record_run(host, nightly(NIGHTS, workload="chat-16x64", hardware_class="cpu-x"),
                     [MetricRecord("ours", "output_tok_s", 70.0, count=16)], pa.table({"request_index": [7]}))
    shipped = tmp_path / "device-run"
    export_evidence(host, shipped, [run])

    local = fresh_store(tmp_path, "local")
    import_evidence(published, local)
    assert add_exported_runs(shipped, local) == [run]
    with local.engine.connect() as conn:
        values = conn.execute(text("SELECT value FROM metrics WHERE run_id = :id"), {"id": run}).scalars().all()
        uri = conn.execute(text("SELECT parquet_uri FROM runs WHERE id = :id"), {"id": run}).scalar()
        metric_ids = conn.execute(text("SELECT COUNT(DISTINCT id), COUNT(*) FROM metrics")).one()
    assert values == [70.0]
    assert pq.read_table(uri).column("request_index").to_pylist() == [7]
    assert metric_ids[0] == metric_ids[1]
    with local.engine.connect() as conn:   # the newest figure of its series now
        latest = conn.execute(text("SELECT run_id FROM v_latest_figures WHERE run_id = :id"), {"id": run}).first()
    assert latest is not None


def test_runs_of_several_stores_exported_into_one_folder_keep_all_their_metrics(tmp_path):
    """GPU-host stores number their metrics alike (1, 2, ...): a folder gathering runs of
    several (one performance-log entry, several device calls, published as they come) keeps
    every metric of each, and adding it again adds only the runs not added before."""
    shipped = tmp_path / "entry"
    runs = []
    for n, name in enumerate(("call-1", "call-2")):
        host = fresh_store(tmp_path, name)
        run = record_run(host, nightly(n, workload="chat-16x64", hardware_class="cpu-x"),
                         [MetricRecord("ours", "output_tok_s", 70.0 + n, count=16)], pa.table({"request_index": [n]}))
        assert export_evidence(host, shipped, [run])["metrics"] == 1
        assert export_evidence(host, shipped, [run])["metrics"] == 0     # and only once
        runs.append(run)
    local = fresh_store(tmp_path, "local")
    assert add_exported_runs(shipped, local) == runs
    # A later device call's run exported into the same folder: the folder added again adds it alone.
    host = fresh_store(tmp_path, "call-3")
    later = record_run(host, nightly(2, workload="chat-16x64", hardware_class="cpu-x"),
                       [MetricRecord("ours", "output_tok_s", 72.0, count=16)], pa.table({"request_index": [2]}))
    export_evidence(host, shipped, [later])
    assert add_exported_runs(shipped, local) == [later]
    with local.engine.connect() as conn:
        values = conn.execute(text("SELECT value FROM metrics ORDER BY value")).scalars().all()
    assert values == [70.0, 71.0, 72.0]
