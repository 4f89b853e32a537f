"""Runs the batch_generation DAG (dag.test) with shard `index` pausing after its first row
group has been written, touching `marker` so the test knows when to SIGKILL this process.

    python -m tests.dags.shard_killer CONF_JSON RUN_AFTER_ISO SHARD_INDEX MARKER

Only the pause is added (through generate_shard's after_row_group hook); everything
else is the real DAG, the real model and the real writer.
"""
from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path


def main() -> None:
    conf, run_after, index, marker = json.loads(sys.argv[1]), datetime.fromisoformat(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dags"))
    import jobs.batch

    real_generate_shard = jobs.batch.generate_shard

    def pause_after_first_row_group(written: int) -> None:
        if written == 1:
            marker.touch()
            time.sleep(3600)

    def generate_shard(shard, params, key, **kwargs):
        if shard["index"] == index:
            kwargs["after_row_group"] = pause_after_first_row_group
        return real_generate_shard(shard, params, key, **kwargs)

    jobs.batch.generate_shard = generate_shard   # the task body imports it at run time
    from batch_generation import dag
    dag.test(logical_date=run_after, run_after=run_after, run_conf=conf)


if __name__ == "__main__":
    main()
