"""Bench job: metrics from timestamps, workloads, and a CPU bench landing in the store."""
from __future__ import annotations

import os

import pytest

from jobs.errors import WorkloadError
from jobs.host_facts import cpu_name
from jobs.metrics import Completion, agreement, request_row, summarize
from jobs.workloads import get_workload, load_workloads
from tests.host_support import steady_host


def test_latency_metrics_from_constructed_timestamps():
    c = Completion(0, 10, [5, 6, 7, 8], "length", arrival=100.0, token_times=[100.5, 100.7, 101.0, 101.1],
                   finish=101.1)
    row = request_row(c)
    assert row["ttft_s"] == pytest.approx(0.5)
    assert row["tpot_s"] == pytest.approx((1.1 - 0.5) / 3)
    assert row["itl_s"] == pytest.approx([0.2, 0.3, 0.1])
    assert row["e2e_s"] == pytest.approx(1.1)
    one = request_row(Completion(1, 4, [9], "stop", 0.0, [0.25], 0.25))
    assert one["tpot_s"] is None and one["itl_s"] == []
    m = summarize([row, one], wall_s=2.0)
    assert m["output_tok_s"]["value"] == pytest.approx(2.5)
    assert m["total_tok_s"]["value"] == pytest.approx(9.5)
    assert m["requests_s"]["value"] == pytest.approx(1.0)
    assert m["ttft_p50_s"]["value"] == pytest.approx(0.375) and m["ttft_p50_s"]["count"] == 2
    assert m["itl_p99_s"]["p99"] == pytest.approx(0.298)
    assert agreement([[1, 2, 3], [1, 2]], [[1, 2, 3], [1, 5]]) == {"agreement": 0.5, "first_divergence_p50": 1}


def test_workloads_are_deterministic_from_their_seed():
    w = get_workload("nano-bench")
    a, b = w.requests(), w.requests()
    assert a == b and len(a) == 256
    assert all(100 <= len(r.prompt) <= 1024 and 100 <= r.max_tokens <= 1024 for r in a)
    assert w.requests(seed=w.seed + 1) != a
    assert {"nano-bench", "latency-b1", "chat-real", "cpu-small"} <= set(load_workloads())
    assert len(get_workload("chat-real").requests()) >= 50


def test_unknown_and_malformed_workloads_name_the_problem(tmp_path):
    with pytest.raises(WorkloadError, match="unknown workload 'nope'"):
        get_workload("nope")
    bad = tmp_path / "w.yaml"
    bad.write_text("workloads:\n  w1:\n    version: 1\n    prompts: {source: random_tokens, count: 2, input_len: [5, 2]}\n")
    with pytest.raises(WorkloadError, match=r"workload 'w1': field 'prompts.input_len'"):
        load_workloads(bad)
    bad.write_text("workloads:\n  w2:\n    version: 1\n    prompts: {source: random_tokens, count: 2, input_len: [2, 5]}\n"
                   "    output_len: [4, 4]\n    sampling: {temperature: 0, ignore_eos: true}\n    dtype: float16\n")
    with pytest.raises(WorkloadError, match=r"workload 'w2': field 'dtype' must be one of auto, float32, bfloat16"):
        load_workloads(bad)


def test_cpu_name_gives_model_and_cores():
    model, cores = cpu_name().split(" x")[:2]
    assert model and int(cores.split()[0]) == os.cpu_count()


@pytest.mark.slow
def test_cpu_bench_of_ours_llamacpp_and_hf_lands_comparable_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ROADGATE_DB_URL", raising=False)
    monkeypatch.delenv("ROADGATE_PARQUET_ROOT", raising=False)
    from jobs.cli import main
    # HF last: it is the agreement reference.
    assert main(["bench", "--workload", "cpu-small", "--engine", "ours", "--engine", "llamacpp", "--engine", "hf",
                 "--backend", "torch"]) == 0
    out = capsys.readouterr().out
    assert "recorded run" in out
    from sqlalchemy import select
    from jobs.store import open_store
    from jobs.store.models import Metric, Run
    from jobs.store.parquet import read_run_requests
    store = open_store()
    with store.session() as s:
        runs = s.scalars(select(Run)).all()
        assert len(runs) == 1 and runs[0].workload == "cpu-small" and runs[0].preflight_status == "skipped"
        metrics = {(m.engine, m.metric): m.value for m in s.scalars(select(Metric))}
    run = runs[0]
    assert run.cpu_name == cpu_name()           # the CPU is part of the fingerprint
    # One fingerprint over all three engines' configs: their figures are comparable with each other only.
    assert set(run.config["engines"]) == {"ours", "llamacpp", "hf"}
    for engine in ("ours", "llamacpp", "hf"):
        assert {(engine, "output_tok_s"), (engine, "ttft_p50_s"), (engine, "tpot_p50_s"), (engine, "itl_p50_s")} \
            <= set(metrics)
        assert run.validity["engines"][engine]["measured"]["requests"] == 8
        # The host during each engine's run is recorded (this machine's, so only that it was watched).
        assert run.validity["host"][engine]["samples"]
    assert ("llamacpp", "agreement") in metrics and ("ours", "syncs_per_step") in metrics
    # float32 on both sides, EOS chosen but not stopping in both: every greedy token the same.
    assert metrics[("ours", "agreement")] == 1.0
    assert not run.validity["valid"] and run.validity["reasons"][0].startswith("host not known to be quiet")
    assert 0 < metrics[("job", "job_overhead_frac")] < 1
    requests = read_run_requests(store.parquet_root, run.id).to_pylist()
    assert len(requests) == 24 and {r["engine"] for r in requests} == {"ours", "llamacpp", "hf"}
    # Every engine saw the same prompts (identical token counts) and produced every token asked for.
    by_engine = {e: sorted((r["request_index"], r["prompt_tokens"], r["output_tokens"]) for r in requests
                           if r["engine"] == e) for e in ("ours", "llamacpp", "hf")}
    assert by_engine["ours"] == by_engine["llamacpp"] == by_engine["hf"]
    assert all(n == 32 for _, _, n in by_engine["ours"])


def test_bench_refuses_unknown_workload_and_stores_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    from jobs.cli import main
    assert main(["bench", "--workload", "nope", "--engine", "ours"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "roadgate.db").exists()


@pytest.mark.parametrize("workload, dtype", [("cpu-small", "bfloat16"), ("cpu-small-bf16", "auto")])
def test_dtype_reaches_our_engine_and_hf_and_lands_in_the_fingerprint(workload, dtype):
    # Given on the command line, or named by the workload itself.
    from jobs.bench import run_engine
    for engine in ("ours", "hf"):
        result = run_engine(get_workload(workload), engine, backend="torch", dtype=dtype, host_inputs=steady_host())
        assert result.run.config["dtype"] == "bfloat16"
        assert all(r["output_tokens"] == 32 for r in result.rows)


@pytest.mark.parametrize("min_duration_s, repetitions", [(0.0, 1), (1e6, 9)])
def test_our_engine_repeats_a_short_workload_and_reports_the_median_repetition(tmp_path, min_duration_s, repetitions):
    from jobs.engines import ours
    spec = tmp_path / "workloads.yaml"
    spec.write_text(f"""
workloads:
  tiny:
    version: 1
    description: two random prompts, four tokens out
    prompts: {{source: random_tokens, count: 2, input_len: [40, 40]}}
    output_len: [4, 4]
    sampling: {{temperature: 0, ignore_eos: true}}
    seed: 1
    hardware: any
    validity: {{min_duration_s: {min_duration_s}, min_requests: 2}}
""")
    run = ours.run(get_workload("tiny", spec), "dummy:smollm2-135m", backend="torch")
    assert run.extra_metrics["repetitions"] == repetitions     # 9: the cap, for a minimum never reached
    assert run.extra_metrics["measured_s"] >= run.wall_s * repetitions * 0.5
    assert len(run.completions) == 2 and all(len(c.token_ids) == 4 for c in run.completions)
    # Each 40-token prompt has two full KV blocks that a warm cache would serve from the second
    # repetition on; the cache is emptied before each, so every repetition prefilled cold.
    assert run.extra_metrics["prefix_cache_hit_tokens"] == 0


def test_warmup_prompts_have_the_measured_shapes_and_none_of_their_tokens():
    from jobs.engines import warmup_prompts
    measured = [r.prompt for r in get_workload("nano-bench").requests()]
    warm = warmup_prompts(measured)
    assert [len(p) for p in warm] == [len(p) for p in measured]
    assert all(w[:16] != m[:16] for w, m in zip(warm, measured))   # no measured KV block can come from it
    assert warmup_prompts(measured) == warm                         # the same for every engine


@pytest.mark.parametrize("shared_prefixes, valid", [(False, False), (True, True)])
def test_prefix_cache_hits_invalidate_a_workload_without_shared_prefixes(shared_prefixes, valid):
    from dataclasses import replace

    from jobs.validity import engine_verdict
    workload = replace(get_workload("fixed-256x128x128"), shared_prefixes=shared_prefixes)
    metrics = {"wall_s": {"value": 5.0}, "requests_s": {"value": 50.0, "count": 256},
               "prefix_cache_hit_tokens": {"value": 4096}}
    verdict = engine_verdict(workload, metrics)
    assert verdict["valid"] is valid
    assert valid or "4096 prompt tokens came from the prefix cache" in verdict["reasons"][0]
    assert engine_verdict(workload, {**metrics, "prefix_cache_hit_tokens": {"value": 0}})["valid"]
