"""Change points: a planted step is found at the right run; a noisy flat series raises none."""
import numpy as np
from sqlalchemy import text

from jobs.gates.regressions import detect_regressions, find_change_points
from jobs.nightly import find_new_regressions
from jobs.store import record_run
from tests.store_support import metrics, nightly

STEP_AT = 70


def series(step: float, n: int = 120, seed: int = 7) -> list[float]:
    values = 1000 + np.random.default_rng(seed).normal(0, 10, n)
    values[STEP_AT:] += step
    return values.tolist()


def test_flat_noisy_nightlies_over_five_years_raise_nothing():
    for seed in range(5):
        assert find_change_points(series(0.0, n=5 * 365, seed=seed)) == []


def test_a_planted_step_is_found_at_its_run(store):
    run_ids = [record_run(store, nightly(day), metrics(output_tok_s=v)) for day, v in enumerate(series(-150.0))]
    for day, v in enumerate(series(0.0, seed=3)):  # a flat series on another fingerprint
        record_run(store, nightly(day, config={"backend": "torch"}), metrics(output_tok_s=v))
    assert len(detect_regressions(store)) == 1
    assert detect_regressions(store) == []  # found once, stored once
    with store.engine.connect() as conn:
        (cp,) = conn.execute(text("SELECT * FROM v_change_points")).all()
    assert (cp.last_run_before_id, cp.first_run_after_id) == (run_ids[STEP_AT - 1], run_ids[STEP_AT])
    assert bool(cp.is_regression) and -20 < cp.change_percent < -10


def test_an_improvement_is_not_a_regression(store):
    for day, v in enumerate(series(+150.0)):
        record_run(store, nightly(day), metrics(ttft_p50_s=v / 1000))  # lower is better; this got worse
        record_run(store, nightly(day, workload="latency-b1"), metrics(output_tok_s=v))  # higher is better
    assert len(detect_regressions(store)) == 2
    with store.engine.connect() as conn:
        flags = dict(conn.execute(text("SELECT metric, is_regression FROM v_change_points")).all())
    assert {k: bool(v) for k, v in flags.items()} == {"ttft_p50_s": True, "output_tok_s": False}


def test_only_new_regressions_are_handed_to_triage(store):
    for day, v in enumerate(series(-150.0)):
        record_run(store, nightly(day), metrics(output_tok_s=v))                             # worse
        record_run(store, nightly(day, workload="latency-b1"), metrics(output_tok_s=-v))     # better
    (regression,) = find_new_regressions(store)
    with store.engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT change_point_id, is_regression FROM v_change_points")).all())
    assert len(rows) == 2 and bool(rows[regression])
    assert find_new_regressions(store) == []     # each is handed over once
