"""Wall time of one nightly DAG run on this host (through dag.test, as `make demo`), and
the share of it spent outside the engines.

    AIRFLOW_HOME=.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags .venv/bin/python \
        benchmarks/nightly_dag_share.py ['{"engines": ["ours", "hf"]}']

"Engines" is each engine's own timed generation (the wall_s metric it recorded, model
load and warm-up excluded); "bench tasks" is the mapped bench tasks' durations (model
load, warm-up and staging included). Run `airflow db migrate` with the same AIRFLOW_HOME first.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dags"))


def main() -> None:
    from airflow.utils.session import create_session
    from nightly_benchmark import dag

    from jobs.store import open_store
    from jobs.store.models import Metric, Run

    conf = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    start = time.perf_counter()
    dr = dag.test(run_conf=conf)
    wall = time.perf_counter() - start
    with create_session() as session:
        bench_s = sum(ti.duration or 0 for ti in dr.get_task_instances(session=session) if ti.task_id == "bench")
    with open_store().session() as s:
        run_ids = s.scalars(select(Run.id).where(Run.airflow_run_id == dr.run_id)).all()
        engine_walls: dict[str, float] = {}
        for m in s.scalars(select(Metric).where(Metric.run_id.in_(run_ids), Metric.metric == "wall_s")):
            engine_walls[m.engine] = engine_walls.get(m.engine, 0.0) + m.value   # over all workloads
    engines_s = sum(engine_walls.values())
    print(f"DAG run {dr.run_id}: {dr.state}")
    print(f"  DAG wall (dag.test)            {wall:8.1f} s")
    print(f"  bench tasks (load+warm+run)    {bench_s:8.1f} s   outside them: {1 - bench_s / wall:6.1%}")
    print(f"  engines' own generation        {engines_s:8.1f} s   outside them: {1 - engines_s / wall:6.1%}")
    for engine, seconds in sorted(engine_walls.items()):
        print(f"    {engine:<8} {seconds:8.2f} s")


if __name__ == "__main__":
    main()
