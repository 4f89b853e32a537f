from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import func, select, text

from jobs.store import IngestError, MetricRecord, fingerprint, open_store, record_run
from jobs.store.models import Metric, Run
from jobs.store.parquet import read_run_requests, requests_dataset
from tests.store_support import metrics, nightly


def requests_table(n: int) -> pa.Table:
    return pa.table({"request_id": list(range(n)), "ttft_s": [0.01 * i for i in range(n)]})


def count(store, model) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(model))


def test_record_run_writes_parquet_partition_and_sql_rows(store):
    run_id = record_run(store, nightly(3), metrics(output_tok_s=100.0, ttft_p50_s=0.02), requests_table(10))
    with store.session() as session:
        run = session.get(Run, run_id)
        assert run.parquet_uri.endswith(f"date=2025-01-04/run_id={run_id}/requests.parquet")
        assert run.fingerprint == fingerprint("nano-bench", "H200", "NVIDIA H200", {"backend": "cuda"})
        units = {m.metric: (m.unit, m.better) for m in session.scalars(select(Metric))}
    assert units == {"output_tok_s": ("tok/s", "higher"), "ttft_p50_s": ("s", "lower")}
    assert read_run_requests(store.parquet_root, run_id).column("ttft_s").to_pylist()[3] == pytest.approx(0.03)
    assert not [p for p in Path(store.parquet_root).rglob("*") if p.name.startswith(".")]  # no temp files left


def test_runs_on_different_cpus_do_not_share_a_fingerprint(store):
    # Two 2-core EPYC hosts, AVX-512 BF16 and AVX2 only, ran the CPU workloads 3.5x apart.
    ids = [record_run(store, nightly(0, hardware_class="cpu", gpu_name=None, cpu_name=cpu),
                      metrics(output_tok_s=1.0))
           for cpu in ("AMD EPYC x2 avx512_bf16", "AMD EPYC x2 avx2", "AMD EPYC x2 avx2")]
    with store.session() as session:
        runs = [session.get(Run, i) for i in ids]
    assert runs[1].cpu_name == "AMD EPYC x2 avx2"
    assert runs[0].fingerprint != runs[1].fingerprint == runs[2].fingerprint


def test_a_run_keeps_the_hash_of_the_code_that_ran(store):
    run_id = record_run(store, nightly(0, code_hash="c0de" * 10), metrics(output_tok_s=1.0))
    with store.session() as session:
        assert session.get(Run, run_id).code_hash == "c0de" * 10


def test_parquet_root_may_be_a_uri(db_url, tmp_path):
    s = open_store(db_url, f"file://{tmp_path}/bucket")
    from jobs.store import upgrade
    upgrade(s.engine)
    run_id = record_run(s, nightly(0), metrics(output_tok_s=1.0), requests_table(4))
    assert requests_dataset(s.parquet_root).to_table().num_rows == 4
    assert read_run_requests(s.parquet_root, run_id).num_rows == 4


def test_recording_the_same_run_twice_records_it_once(store):
    first = record_run(store, nightly(0, id="5d1c5c40-0000-4000-8000-000000000001"), metrics(output_tok_s=1.0))
    again = record_run(store, nightly(0, id=first), metrics(output_tok_s=1.0))
    assert first == again and count(store, Run) == 1 and count(store, Metric) == 1


@pytest.mark.parametrize("run, metric, message", [
    (nightly(0, workload="nano-bnech"), "output_tok_s", "unknown workload 'nano-bnech'"),
    (nightly(0), "output_toks", "unknown metric 'output_toks'"),
    (nightly(0, preflight_status="loud"), "output_tok_s", "preflight_status"),
])
def test_bad_runs_are_refused_and_nothing_is_written(store, run, metric, message):
    with pytest.raises(IngestError, match=message):
        record_run(store, run, [MetricRecord("roadgate", metric, 1.0)], requests_table(3),
                   known_workloads={"nano-bench"})
    assert count(store, Run) == 0 and count(store, Metric) == 0
    assert not Path(store.parquet_root).exists()


def test_the_store_reads_no_workloads_file(store, tmp_path, monkeypatch):
    """The caller names the workloads it knows (bench: its registry); the store never parses the file."""
    monkeypatch.setenv("ROADGATE_WORKLOADS_FILE", str(tmp_path / "absent.yaml"))
    assert record_run(store, nightly(0), metrics(output_tok_s=1.0))


def test_views_read_the_current_history(store):
    a = record_run(store, nightly(0), metrics(output_tok_s=100.0))
    b = record_run(store, nightly(1), metrics(output_tok_s=110.0))
    other = record_run(store, nightly(1, config={"backend": "torch"}), metrics(output_tok_s=5.0))
    with store.engine.connect() as conn:
        latest = {r.id for r in conn.execute(text("SELECT id FROM v_latest_runs"))}
        history = conn.execute(text("SELECT run_id, value FROM v_metric_history ORDER BY started_at, value")).all()
    assert latest == {b, other}
    assert [tuple(r) for r in history] == [(a, 100.0), (other, 5.0), (b, 110.0)]


def test_the_bench_verdict_reaches_the_runs_view(store):
    """A run noisy during measurement after a quiet preflight is not shown as valid."""
    noisy = record_run(store, nightly(0, validity={"valid": False, "reasons": ["ours: noisy during measurement"]}),
                       metrics(output_tok_s=1.0))
    clean = record_run(store, nightly(1, validity={"valid": True, "reasons": []}), metrics(output_tok_s=1.0))
    unjudged = record_run(store, nightly(2), metrics(output_tok_s=1.0))   # no verdict: judged by its preflight
    with store.engine.connect() as conn:
        verdicts = dict(conn.execute(text("SELECT run_id, validity FROM v_run_validity")).all())
    assert verdicts == {noisy: "invalid measurement", clean: "valid", unjudged: "valid"}
