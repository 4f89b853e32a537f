"""The batch generation DAG through Airflow's dag.test(): bad params are refused before
any task runs; a shard task killed mid-write (SIGKILL) and run again leaves every input
row in the committed output exactly once, and re-running the DAG run changes nothing."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from tests.conftest import CHAT_PROMPTS
from tests.dags.conftest import REPO, load_dag

pytestmark = pytest.mark.slow


def batch_conf(tmp_path: Path, rows: int = 12) -> dict:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(CHAT_PROMPTS.read_text().splitlines(keepends=True)[:rows]))
    return {"input_uri": str(prompts), "output_uri": str(tmp_path / "out"), "num_shards": 3, "backend": "torch",
            "row_group_size": 2, "sampling": {"max_tokens": 4, "temperature": 0.0, "seed": 0}}


@pytest.mark.parametrize("bad, message", [
    ({"input_uri": None}, "input_uri"),
    ({"num_shards": 0}, "num_shards: 0 is less than the minimum of 1"),
    ({"backend": "tpu"}, "backend"),
    ({"sampling": {"max_tokens": 4, "temprature": 0.5}}, "'temprature' was unexpected"),
    ({"sampling": {"max_tokens": 4, "top_p": 1.5}}, "top_p"),
])
def test_invalid_params_are_refused_before_any_task_runs(tmp_path, results_store, bad, message):
    from airflow.models import DagRun
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.utils.session import create_session

    conf = batch_conf(tmp_path) | bad
    conf = {k: v for k, v in conf.items() if v is not None}
    when = datetime(2026, 1, 3, tzinfo=timezone.utc)
    with pytest.raises(ParamValidationError, match=message):
        load_dag("batch_generation").test(logical_date=when, run_after=when, run_conf=conf)
    with create_session() as session:
        assert session.scalars(select(DagRun).where(DagRun.dag_id == "batch_generation",
                                                    DagRun.logical_date == when)).all() == []
    assert not (tmp_path / "out").exists()


def test_a_shard_killed_mid_write_and_run_again_leaves_every_row_exactly_once(tmp_path, results_store):
    from airflow.sdk import DagRunState

    from jobs.batch import read_committed
    from jobs.store.models import Run

    conf = batch_conf(tmp_path)
    out = Path(conf["output_uri"])
    run_after = "2026-01-02T00:00:00+00:00"
    marker = tmp_path / "shard-1-paused"
    killer = subprocess.Popen([sys.executable, "-m", "tests.dags.shard_killer", json.dumps(conf), run_after, "1",
                               str(marker)], cwd=REPO, env={**os.environ}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert killer.poll() is None, killer.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "shard 1 never wrote its first row group"
        time.sleep(0.5)
    os.kill(killer.pid, signal.SIGKILL)   # mid-write: no cleanup runs, as when a node dies
    killer.wait()
    killer.stderr.close()
    # The killed writer left a partial temporary file in its attempt's directory, never a part.
    # Shards that ran before it have their parts: none, one or both others (dag.test picks the
    # order of mapped tasks).
    assert [p for p in out.rglob(".part-00001-*.tmp") if p.is_file()] and not list(out.glob("part-00001-*.parquet"))
    assert not (out / "_manifest.json").exists()
    written_before_kill = {p.name: p.read_bytes() for p in out.glob("part-*.parquet")}

    # The same DAG run again (same run id): what a retry or a cleared run does.
    when = datetime.fromisoformat(run_after)
    dag = load_dag("batch_generation")
    dr = dag.test(logical_date=when, run_after=when, run_conf=conf)
    assert dr.state == DagRunState.SUCCESS
    assert {name: (out / name).read_bytes() for name in written_before_kill} == written_before_kill   # skipped

    input_ids = [json.loads(line)["id"] for line in Path(conf["input_uri"]).read_text().splitlines()]
    committed = read_committed(str(out))
    assert committed.column("id").to_pylist() == input_ids   # every row once, in input order
    assert all(n == 4 for n in committed.column("output_tokens").to_pylist())
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["rows"] == len(input_ids) == sum(p["rows"] for p in manifest["parts"])
    assert [pq.ParquetFile(out / p["path"]).metadata.num_rows for p in manifest["parts"]] == [4, 4, 4]
    assert manifest["parameters"]["num_shards"] == 3 and manifest["parameters"]["sampling"]["max_tokens"] == 4
    assert all(hashlib.sha256((out / p["path"]).read_bytes()).hexdigest() == p["sha256"] for p in manifest["parts"])
    # The killed writer's temporary went with the staging: its process is gone.
    assert sorted(p.name for p in out.iterdir()) == ["_claim.json", "_manifest.json"] + [
        p["path"] for p in manifest["parts"]]

    # Re-running the whole DAG run once more duplicates nothing, loses nothing, records nothing twice.
    assert dag.test(logical_date=when, run_after=when, run_conf=conf).state == DagRunState.SUCCESS
    assert read_committed(str(out)).column("id").to_pylist() == input_ids
    assert json.loads((out / "_manifest.json").read_text()) == manifest
    with results_store.session() as s:
        runs = s.scalars(select(Run).where(Run.kind == "generate")).all()
    assert [r.id for r in runs] == [manifest["store_run_id"]]
    assert runs[0].airflow_run_id == dr.run_id and runs[0].config["input_sha256"] == manifest["input"]["sha256"]
    # One lease per shard: this host has no GPU, so each held its one slot (index None).
    assert [lease["index"] for lease in runs[0].config["gpu_leases"]] == [None, None, None]
