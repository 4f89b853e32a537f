import pytest
from sqlalchemy import text

from jobs.store import IngestError, MetricRecord, annotate, record_run, supersede_metric, supersede_run
from tests.store_support import metrics, nightly


def rows(store, sql):
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


def test_a_superseded_run_is_hidden_in_views_and_kept_in_history(store):
    old = record_run(store, nightly(0), metrics(output_tok_s=100.0))
    new = supersede_run(store, old, nightly(0), metrics(output_tok_s=90.0), reason="clock skew on gpu-1")
    assert rows(store, "SELECT run_id, value FROM v_metric_history") == [(new, 90.0)]
    assert rows(store, "SELECT id FROM v_latest_runs") == [(new,)]
    assert sorted(rows(store, "SELECT id, supersedes_id, supersede_reason FROM runs")) == sorted(
        [(old, None, None), (new, old, "clock skew on gpu-1")])
    assert len(rows(store, "SELECT id FROM metrics")) == 2


def test_a_superseded_metric_is_hidden_and_kept(store):
    run_id = record_run(store, nightly(0), metrics(output_tok_s=100.0, ttft_p50_s=0.5))
    (old_id,) = rows(store, "SELECT id FROM metrics WHERE metric = 'ttft_p50_s'")[0]
    new_id = supersede_metric(store, old_id, MetricRecord("roadgate", "ttft_p50_s", 0.05, count=256), "unit was ms")
    assert sorted(rows(store, "SELECT metric_id, metric, value FROM v_metric_history")) == sorted(
        [(1, "output_tok_s", 100.0), (new_id, "ttft_p50_s", 0.05)])
    assert rows(store, f"SELECT value, supersede_reason FROM metrics WHERE id = {new_id}") == [(0.05, "unit was ms")]
    assert rows(store, f"SELECT value FROM metrics WHERE id = {old_id}") == [(0.5,)]
    annotate(store, "alice", "ttft was recorded in ms before this fix", run_id=run_id)
    assert rows(store, "SELECT author FROM annotations") == [("alice",)]


def test_only_the_newest_version_can_be_corrected(store):
    old = record_run(store, nightly(0), metrics(output_tok_s=100.0))
    supersede_run(store, old, nightly(0), metrics(output_tok_s=90.0), reason="first fix")
    with pytest.raises(IngestError, match="already superseded"):
        supersede_run(store, old, nightly(0), metrics(output_tok_s=80.0), reason="second fix")
    with pytest.raises(IngestError, match="no runs row"):
        supersede_run(store, "no-such-run", nightly(0), [], reason="x")
