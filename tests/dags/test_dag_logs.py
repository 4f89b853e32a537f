"""What `make demo` prints holds no error that is not one: a task that gathers mapped results
fetches them in one request; iterating them asks for the one past the last, which Airflow's
task SDK logs as "[error] XCom not found" (the nightly's ingest and the batch's commit did)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import chat_messages
from tests.dags.conftest import DAGS, REPO
from tests.tiny_model import tiny_model  # noqa: F401 (a fixture)


# In a process of its own: a DAG run earlier in the session leaves Airflow's log handlers bound
# to that test's captured streams, so this run's log would not be the one read here.
RUN_DAG = ("import json, sys\n"
           "from airflow.sdk import DagRunState\n"
           "from tests.dags.conftest import load_dag\n"
           "sys.exit(load_dag('batch_generation').test(run_conf=json.loads(sys.argv[1])).state != DagRunState.SUCCESS)\n")


def test_gathering_mapped_results_logs_no_missing_xcom(tmp_path, results_store, tiny_model):  # noqa: F811
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "messages": m}) + "\n" for i, m in enumerate(chat_messages(2))))
    conf = {"model": str(tiny_model), "input_uri": str(prompts), "output_uri": str(tmp_path / "out"),
            "num_shards": 2, "backend": "torch", "sampling": {"max_tokens": 2}}
    run = subprocess.run([sys.executable, "-c", RUN_DAG, json.dumps(conf)], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": f"{REPO}:{DAGS}"})
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    assert "[DAG TEST] end task task_id=commit" in log   # the tasks' log is the one read here
    assert "XCom not found" not in log
    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["rows"] == 2   # both shards gathered
