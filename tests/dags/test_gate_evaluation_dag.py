"""Gate evaluation through Airflow's dag.test(): a new regression in the history ends at the
suspected-regressions asset, naming its change point, once; bisect_regression is scheduled on it."""
from __future__ import annotations

import numpy as np
from sqlalchemy import select, text

from jobs.store import record_run
from tests.dags.conftest import load_dag
from tests.store_support import metrics, nightly


def suspected_events(dag_run_id: str) -> list[dict]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from roadgate_common import SUSPECTED_REGRESSIONS
    with create_session() as session:
        events = session.scalars(select(AssetEvent).where(AssetEvent.source_dag_id == "gate_evaluation",
                                                          AssetEvent.source_run_id == dag_run_id)).all()
        return [e.extra for e in events if e.asset.uri == SUSPECTED_REGRESSIONS.uri]


def test_a_new_regression_is_announced_once_with_its_change_point(results_store):
    from airflow.sdk import DagRunState
    rng = np.random.default_rng(5)
    for day in range(60):   # throughput falls by 15% at day 40
        level = 1000.0 if day < 40 else 850.0
        record_run(results_store, nightly(day), metrics(output_tok_s=level + rng.normal(0, 5)))

    first = load_dag("gate_evaluation").test()
    assert first.state == DagRunState.SUCCESS
    with results_store.engine.connect() as conn:
        (change_point_id,) = conn.execute(text("SELECT change_point_id FROM v_change_points WHERE is_regression")).scalars()
    assert suspected_events(first.run_id) == [{"change_point_ids": [change_point_id]}]

    again = load_dag("gate_evaluation").test()      # nothing new: the task skips and announces nothing
    assert again.state == DagRunState.SUCCESS
    assert suspected_events(again.run_id) == []
