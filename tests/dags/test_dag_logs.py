"""What `make demo` prints holds no error that is not one: a task that gathers mapped results
fetches them in one request; iterating them asks for the one past the last, which Airflow's
task SDK logs as "[error] XCom not found" (the nightly's ingest and the batch's commit did)."""
from __future__ import annotations

import json

from tests.conftest import chat_messages
from tests.dags.conftest import load_dag
from tests.tiny_model import tiny_model  # noqa: F401 (a fixture)


def test_gathering_mapped_results_logs_no_missing_xcom(tmp_path, results_store, tiny_model, capfd):  # noqa: F811
    from airflow.sdk import DagRunState

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "messages": m}) + "\n" for i, m in enumerate(chat_messages(2))))
    conf = {"model": str(tiny_model), "input_uri": str(prompts), "output_uri": str(tmp_path / "out"),
            "num_shards": 2, "backend": "torch", "sampling": {"max_tokens": 2}}
    assert load_dag("batch_generation").test(run_conf=conf).state == DagRunState.SUCCESS
    log = "".join(capfd.readouterr())
    assert "[DAG TEST] end task task_id=commit" in log   # the tasks' log is the one read here
    assert "XCom not found" not in log
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["rows"] == 2   # both shards gathered
