"""benchmarks/gpu_scaling.py: the proof that no two tasks held one GPU at once, read from recorded
leases (a batch's shards, a nightly's bench cells); the scaling figures; its refusals; and its
whole path on CPU (a real Airflow scheduler with a LocalExecutor, the tiny model, two simulated
GPUs), where the spread run's shards run at once on distinct GPU indices."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from benchmarks.gpu_scaling import (MICROBENCHMARK, BatchFigures, HeldGpu, dag_run_leases, held_gpus, main,
                                    most_held_at_once, scaling, shared_gpus, write_batch_input)
from jobs.prompts_io import count_prompts
from jobs.registry import METRICS, MICROBENCHMARKS
from tests.conftest import REPO
from tests.tiny_model import tiny_model  # noqa: F401

T0 = datetime(2026, 12, 1, 12)


def held(index: int | None, start_s: float, end_s: float, host: str = "gpu-box") -> HeldGpu:
    return HeldGpu(index, host, T0 + timedelta(seconds=start_s), T0 + timedelta(seconds=end_s))


def test_only_leases_of_one_gpu_of_one_host_held_at_once_are_shared():
    first = held(0, 0, 10)
    other_gpu, other_host = held(1, 0, 10), held(0, 0, 10, host="other-box")
    after = held(0, 10, 20)           # starts the moment `first` is released
    overlapping = held(0, 5, 12)      # inside both `first` and `after`
    assert shared_gpus([first, other_gpu, other_host, after]) == []
    assert shared_gpus([first, other_gpu, other_host, after, overlapping]) == [(first, overlapping),
                                                                               (after, overlapping)]
    # A host without GPUs has one slot (index None): two tasks in it at once share it.
    assert shared_gpus([held(None, 0, 5), held(None, 4, 8)]) == [(held(None, 0, 5), held(None, 4, 8))]


def test_most_held_at_once_counts_a_release_before_a_start_at_the_same_moment():
    assert most_held_at_once([held(0, 0, 10), held(1, 0, 10), held(0, 10, 20), held(1, 10, 20)]) == 2
    assert most_held_at_once([held(0, 0, 10), held(0, 10, 20)]) == 1
    assert most_held_at_once([held(0, 0, 10), held(1, 2, 3), held(2, 2.5, 12)]) == 3


def test_leases_are_read_from_a_batch_runs_list_and_a_bench_runs_engines():
    record = {"index": 1, "devices": 2, "host": "gpu-box", "pid": 7, "acquired_at": "2026-12-01T12:00:00",
              "released_at": "2026-12-01T12:00:30"}
    assert held_gpus({"gpu_leases": [record, {**record, "index": 0}]}) == [held(1, 0, 30), held(0, 0, 30)]
    assert held_gpus({"gpu_leases": {"ours": record}}) == [held(1, 0, 30)]
    assert held_gpus({"parameters": {}}) == []   # a run that recorded none


def test_scaling_is_the_n_gpu_figure_over_the_one_gpu_one_against_the_bar():
    one_gpu = BatchFigures("a", output_tokens=1000, wall_s=10.0, leases=[])
    met = scaling(one_gpu, BatchFigures("b", 1000, 5.4, []), gpus=2)
    assert met["scaling_ratio"] == pytest.approx(1000 / 5.4 / 100) and met["meets_bar"]
    missed = scaling(one_gpu, BatchFigures("c", 1000, 5.6, []), gpus=2)
    assert missed["per_gpu"] == pytest.approx(1000 / 5.6 / 100 / 2) and not missed["meets_bar"]
    assert {"output_tok_s", "one_gpu_output_tok_s", "scaling_ratio"} <= set(METRICS)
    assert MICROBENCHMARK in MICROBENCHMARKS


def test_the_batch_input_is_the_same_every_time_and_no_two_prompts_alike(tmp_path):
    write_batch_input(tmp_path / "a.jsonl", 150)
    write_batch_input(tmp_path / "b.jsonl", 150)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert count_prompts(tmp_path / "a.jsonl") == 150   # the batch's own reader takes it: ids unique
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len({json.dumps(r["messages"]) for r in rows}) == 150


@pytest.mark.parametrize("gpus, args, message", [
    (2, ["--gpus", "3"], "--gpus 3: this host has 2 GPU(s) to lease ([0, 1])"),
    (2, ["--gpus", "0"], "--gpus 0: this host has 2 GPU(s) to lease ([0, 1])"),
    (0, [], "this host has no GPU to spread over"),
    (2, ["--prompts", "3"], "--prompts must be at least 4 (a row per shard)"),
    (1, ["--model", "no-such-model"], "unknown model 'no-such-model'"),
])
def test_bad_input_is_refused_in_one_line_with_status_2(simulated_gpus, capsys, gpus, args, message):
    simulated_gpus(gpus)
    assert main(["--no-store", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("gpu_scaling: ") and message in err


@pytest.mark.slow
def test_the_nightly_cells_recorded_leases_are_what_the_check_reads(tiny_model, default_store,  # noqa: F811
                                                                    simulated_gpus, tmp_path, capsys):
    from jobs import nightly

    simulated_gpus(2)
    # The cell's own preflight samples the real host; a busy test machine still counts as quiet here.
    config = nightly.resolve_config({"engines": ["ours"], "workloads": ["cpu-small"], "model": str(tiny_model),
                                     "backend": "torch", "preflight": {"window_s": 0, "load_threshold": 1e9}},
                                    gpu_present=lambda: False)
    cell = nightly.run_bench_cell({"engine": "ours", "workload": "cpu-small"}, config, tmp_path / "staging")
    nightly.land_bench_results([cell], config, None, "nightly_benchmark", "night-1")
    [lease] = dag_run_leases("nightly_benchmark", "night-1")
    assert lease.index == 0 and lease.start < lease.end
    assert main(["--check-dag-run", "nightly_benchmark", "night-1"]) == 0
    assert "no two of 1 leases held one GPU at once" in capsys.readouterr().out
    assert main(["--check-dag-run", "nightly_benchmark", "night-2"]) == 2   # no such run


@pytest.mark.slow
def test_the_whole_path_on_cpu_runs_the_spread_shards_at_once_on_distinct_gpus(tiny_model, default_store,  # noqa: F811
                                                                                tmp_path):
    """Two simulated GPUs: the real Airflow deployment runs the one-GPU batch (2 shards, pool of 1,
    pinned to GPU 0) and the spread one (4 shards, pool of 2), and records the figures."""
    from jobs.store.models import Metric, Run

    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"} | {"ROADGATE_GPU_COUNT": "2"}
    done = subprocess.run([sys.executable, "benchmarks/gpu_scaling.py", "--prompts", "8", "--max-tokens", "4",
                           "--model", str(tiny_model), "--backend", "torch", "--work-dir", str(tmp_path / "work")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "scaling: " in done.stdout and "on 2 GPUs" in done.stdout

    with default_store.session() as s:
        batches = {r.airflow_run_id.split("-")[2]: r for r in s.scalars(select(Run).where(Run.kind == "generate"))}
        [bench] = s.scalars(select(Run).where(Run.workload == MICROBENCHMARK)).all()
        figures = {m.metric: m.value for m in s.scalars(select(Metric).where(Metric.run_id == bench.id))}
    one_gpu, spread = held_gpus(batches["1gpu"].config), held_gpus(batches["2gpu"].config)
    assert [lease.index for lease in one_gpu] == [0, 0] and most_held_at_once(one_gpu) == 1
    # Each shard leases the lowest free GPU: which shard gets which depends on when the others end.
    assert len(spread) == 4 and {lease.index for lease in spread} == {0, 1}
    # The pool of 2 ran two shards at once, each on its own GPU; never two on one.
    assert any(a.start < b.end and b.start < a.end and a.index != b.index
               for i, a in enumerate(spread) for b in spread[i + 1:])
    assert shared_gpus(one_gpu + spread) == []
    assert (bench.config["gpus"], bench.config["shards"]) == (2, 4)
    assert set(figures) == {"output_tok_s", "one_gpu_output_tok_s", "scaling_ratio"}
    assert figures["scaling_ratio"] == pytest.approx(figures["output_tok_s"] / figures["one_gpu_output_tok_s"])
    assert f"recorded run {bench.id}" in done.stdout
