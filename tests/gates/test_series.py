"""One series per engine configuration: what is merely recorded (peers in the run, peer
versions, derived KV sizes) does not split a history, and a shift in it is found."""
from datetime import timedelta

import numpy as np
from sqlalchemy import text

from jobs.bench import BenchResult, record
from jobs.engines import EngineRun
from jobs.gates.regressions import detect_regressions
from jobs.workloads import get_workload
from tests.store_support import EPOCH

NIGHTS, STEP_AT = 40, 24
HOST = dict(host="gpu-1", cpu_name="AMD EPYC x16 avx512_bf16", gpu_name="NVIDIA H200", driver_version="580",
            cuda_version="13.0", hardware_class="H200", git_sha="0" * 40, git_dirty=False, code_hash="1" * 40)
OURS = {"engine": "ours", "backend": "cuda", "dtype": "bfloat16", "max_num_seqs": 256,
        "max_num_batched_tokens": 8192, "block_size": 16}


def result(engine: str, config: dict, tok_s: float) -> BenchResult:
    figures = {"output_tok_s": {"value": tok_s, "count": 256}, "wall_s": {"value": 3.0, "count": 1},
               "requests_s": {"value": 85.0, "count": 256}}
    return BenchResult(get_workload("nano-bench"), EngineRun(engine, config, [], 3.0), [], figures)


def test_peers_versions_and_kv_size_keep_ours_in_one_series_where_a_shift_is_found(store):
    values = 50_000 + np.random.default_rng(5).normal(0, 300, NIGHTS)
    values[STEP_AT:] -= 6_000
    run_ids = []
    for night, value in enumerate(values):
        # The KV blocks that fit depend on free GPU memory: recorded, not identifying.
        results = [result("ours", {**OURS, "kv_cache_blocks": 60_000 + 37 * night}, value)]
        if night % 2:   # a peer only some nights, in a new version every few
            results.append(result("hf", {"engine": "hf", "device": "cuda", "dtype": "bfloat16", "batch_size": 256,
                                         "attention": "sdpa", "cache": "dynamic", "version": f"5.{night // 4}"},
                                  11_000.0))
        started = EPOCH + timedelta(days=night)
        run_ids.append(record(results, started, started + timedelta(minutes=3), "dummy:smollm2-135m",
                              store=store, host=HOST))
    with store.engine.connect() as conn:
        series = conn.execute(text("SELECT DISTINCT series FROM v_metric_history WHERE engine = 'ours'")).scalars().all()
        described = conn.execute(text("SELECT engine, identity FROM series WHERE key = :k"), {"k": series[0]}).one()
    assert len(series) == 1
    assert described.engine == "ours" and "kv_cache_blocks" not in str(described.identity)
    assert len(detect_regressions(store)) >= 1
    with store.engine.connect() as conn:
        found = conn.execute(text("SELECT * FROM v_change_points WHERE engine = 'ours' AND metric = 'output_tok_s'")).all()
    assert [(c.series, c.first_run_after_id, bool(c.is_regression)) for c in found] == [
        (series[0], run_ids[STEP_AT], True)]


def test_another_engine_configuration_is_another_series(store):
    started = EPOCH
    for config in (OURS, {**OURS, "max_num_seqs": 128}, {**OURS, "kv_cache_blocks": 1}):
        record([result("ours", config, 50_000.0)], started, started + timedelta(minutes=3), "dummy:smollm2-135m",
               store=store, host=HOST)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(DISTINCT series) FROM v_metric_history "
                                 "WHERE engine = 'ours'")).scalar() == 2
