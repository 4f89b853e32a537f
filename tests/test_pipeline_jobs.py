"""jobs/nightly.py and jobs/batch.py without Airflow: configuration, the preflight poke,
the split and the commit's checks (the DAG tests run them end to end)."""
from __future__ import annotations

import fcntl
import json

import pytest

from jobs import nightly
from jobs.batch import BatchParams, commit_batch, parse_params, run_key, split_input
from jobs.errors import BatchError
from jobs.preflight import GpuState, Inputs
from tests.conftest import CHAT_PROMPTS


# ---------------------------------------------------------------- nightly configuration

def test_cpu_defaults_run_ours_and_both_peers_and_measure_agreement_against_hf():
    config = nightly.resolve_config(gpu_present=lambda: False)
    workloads = ("cpu-small", "cpu-small-bf16", "cpu-small-q4", "chat-16x64")
    assert config.profile == "cpu" and config.workloads == workloads and config.backend == "torch"
    expected = ("ours", "hf", "llamacpp")
    assert config.engines == expected and config.reference == "hf"
    assert nightly.plan_bench_matrix(config) == [{"engine": e, "workload": w} for w in workloads for e in expected]
    assert nightly.resolve_config(gpu_present=lambda: True).profile == "gpu"


def test_each_profile_runs_every_workload_and_engine_its_roadmap_rows_are_judged_on():
    from jobs.gates.roadmap import load_roadmap
    from jobs.registry import MICROBENCHMARKS
    profiles = {gpu: nightly.resolve_config(gpu_present=lambda: gpu) for gpu in (False, True)}
    for row in load_roadmap():
        if row.workload in MICROBENCHMARKS:   # benchmarks/decode_step.py measures these, not the nightly
            continue
        config = profiles[not row.hardware_class.startswith("cpu")]
        assert row.workload in config.workloads, f"{row.id}: the {config.profile} nightly never runs {row.workload}"
        runs = {cell["engine"] for cell in nightly.plan_bench_matrix(config) if cell["workload"] == row.workload}
        assert {row.engine, row.peer_engine} - {None} <= runs, row.id


def test_a_workload_may_run_fewer_engines_than_the_profile():
    config = nightly.resolve_config(gpu_present=lambda: True)
    cells = nightly.plan_bench_matrix(config)
    assert [c["engine"] for c in cells if c["workload"] == "batch-longtail"] == ["ours"]
    assert [c["engine"] for c in cells if c["workload"] == "nano-bench"] == ["ours", "hf", "hf-static"]
    # A run's engines still decide: the listed ones it leaves out run nowhere.
    only_hf = nightly.resolve_config({"engines": ["hf"]}, gpu_present=lambda: True)
    assert {c["workload"] for c in nightly.plan_bench_matrix(only_hf)} == {"nano-bench", "fixed-256x128x128",
                                                                           "latency-b1"}
    assert nightly.NightlyConfig.from_dict(config.as_dict()) == config


@pytest.mark.parametrize("overrides, message", [
    ({"engines": ["ours", "vllm"]}, "unknown engine\\(s\\) vllm"),
    ({"workloads": ["nope"]}, "unknown workload 'nope'"),
    ({"engines": ["ours"], "reference": "hf"}, "reference engine 'hf' is not among the engines"),
    ({"enginez": ["ours"]}, "unknown nightly setting\\(s\\) enginez"),
    ({"workload_engines": {"cpu-small": []}}, "workload_engines must map workloads to non-empty lists"),
    ({"workload_engines": {"cpu-small": ["vllm"]}}, "workload_engines must map workloads to non-empty lists"),
    ({"preflight": {"window": 3}}, "unknown preflight setting\\(s\\) window"),
    ({"profile": "tpu"}, "profile must be one of auto, cpu, gpu"),
])
def test_bad_nightly_settings_name_the_field(overrides, message):
    with pytest.raises(nightly.NightlyConfigError, match=message):
        nightly.resolve_config(overrides, gpu_present=lambda: False)


def test_a_run_without_the_reference_engine_measures_no_agreement():
    config = nightly.resolve_config({"engines": ["ours"]}, gpu_present=lambda: False)
    assert config.reference is None
    assert nightly.NightlyConfig.from_dict(config.as_dict()) == config


# ---------------------------------------------------------------- the preflight sensor's poke

def scripted_host(loads: list[float]) -> Inputs:
    clock = [0.0]
    samples = iter(loads)
    return Inputs(load=lambda: next(samples), clock=lambda: clock[0],
                  sleep=lambda s: clock.__setitem__(0, clock[0] + s), gpu_query=lambda i: GpuState([], 0.0))


def test_preflight_poke_is_done_only_on_a_quiet_window_on_a_gpu_it_leased(tmp_path, monkeypatch, simulated_gpus):
    monkeypatch.setenv("ROADGATE_GPU_LEASE_DIR", str(tmp_path))
    simulated_gpus(1)
    config = nightly.resolve_config({"preflight": {"window_s": 10, "sample_every_s": 5, "load_threshold": 1.0}},
                                    gpu_present=lambda: False)
    assert nightly.wait_for_quiet_host(config, scripted_host([0.1, 0.2, 3.0])) is None
    quiet = nightly.wait_for_quiet_host(config, scripted_host([0.1, 0.2, 0.3]))
    assert quiet["status"] == "quiet" and quiet["waited_s"] == 10 and quiet["gpu"]["index"] == 0
    # A bench or a shard holding the only GPU's lease: not done, poke again later.
    with open(tmp_path / "gpu-0.lock", "a+") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert nightly.wait_for_quiet_host(config, scripted_host([0.1] * 3)) is None


def test_a_busy_poke_says_what_it_measured_how_long_it_waited_and_how_to_override(caplog):
    config = nightly.resolve_config({"preflight": {"window_s": 10, "sample_every_s": 5, "load_threshold": 1.0}},
                                    gpu_present=lambda: False)
    with caplog.at_level("INFO", logger="jobs.nightly"):
        assert nightly.wait_for_quiet_host(config, scripted_host([0.1, 1.9, 0.2, 0.1]), waited_s=250,
                                           limit_s=6 * 3600) is None
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preflight:")]
    assert "load 1.90 busy CPUs at most over the window (quiet below 1)" in line
    assert "GPU 0% (quiet at or below 10%)" in line and "waited 4m10s of 6h00m" in line
    assert """--conf '{"preflight": {"load_threshold": 3}}'""" in line and "never evidence" in line


# ---------------------------------------------------------------- batch split and commit

def write_prompts(path, ids):
    rows = [json.loads(line) for line in CHAT_PROMPTS.read_text().splitlines()[:len(ids)]]
    path.write_text("".join(json.dumps({**r, "id": i}) + "\n" for r, i in zip(rows, ids)))
    return path


def params(tmp_path, **overrides) -> BatchParams:
    raw = {"model": "smollm2-135m-instruct", "input_uri": str(tmp_path / "in.jsonl"),
           "output_uri": str(tmp_path / "out"), "num_shards": 3} | overrides
    return parse_params(raw)


def test_partial_sampling_params_merge_over_the_greedy_defaults(tmp_path):
    p = params(tmp_path, sampling={"max_tokens": 64})          # what make demo-batch passes
    assert (p.sampling, p.seed) == ({"max_tokens": 64, "temperature": 0.0, "top_p": 1.0, "top_k": 0}, 0)
    assert params(tmp_path, sampling={"temperature": 0.7, "seed": 3}).sampling["max_tokens"] == 256


def test_split_keeps_input_order_in_contiguous_shards_and_never_makes_an_empty_one(tmp_path):
    write_prompts(tmp_path / "in.jsonl", [f"r{i}" for i in range(7)])
    shards = split_input(params(tmp_path), "k1")
    assert [(s["first_row"], s["rows"]) for s in shards] == [(0, 2), (2, 2), (4, 3)]
    import pyarrow.parquet as pq
    assert [pq.read_table(s["input_path"]).column("id").to_pylist() for s in shards] == \
        [["r0", "r1"], ["r2", "r3"], ["r4", "r5", "r6"]]
    write_prompts(tmp_path / "in.jsonl", ["a", "b"])
    assert len(split_input(params(tmp_path, output_uri=str(tmp_path / "out2"), num_shards=5), "k2")) == 2


def test_split_refuses_repeated_ids_bad_rows_remote_uris_and_another_runs_output(tmp_path):
    write_prompts(tmp_path / "in.jsonl", ["a", "b", "a"])
    with pytest.raises(BatchError, match="id 'a' appears twice"):
        split_input(params(tmp_path), "k")
    (tmp_path / "in.jsonl").write_text('{"id": "x", "prompt": ""}\n')
    with pytest.raises(BatchError, match="line 1: the prompt is empty"):
        split_input(params(tmp_path), "k")
    with pytest.raises(BatchError, match="no filesystem serves 'nosuchfs://bucket/out'"):
        params(tmp_path, output_uri="nosuchfs://bucket/out")
    with pytest.raises(BatchError, match="missing parameter\\(s\\): input_uri"):
        parse_params({"model": "m", "output_uri": "o", "num_shards": 1})
    with pytest.raises(BatchError, match="sampling: unknown field"):
        params(tmp_path, sampling={"temprature": 1})
    write_prompts(tmp_path / "in.jsonl", ["a", "b"])
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "_manifest.json").write_text(json.dumps({"run_key": "someone-else"}))
    with pytest.raises(BatchError, match="already holds the committed batch of run someone-else"):
        split_input(params(tmp_path), "mine")


def test_commit_refuses_a_missing_part_and_writes_no_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / "data"))
    write_prompts(tmp_path / "in.jsonl", ["a", "b", "c"])
    p = params(tmp_path)
    key = run_key("batch_generation", "manual__1")
    split_input(p, key)
    with pytest.raises(BatchError, match="shard 0: .*part-00000-of-00003.parquet is missing"):
        commit_batch([], p, key, "batch_generation", "manual__1")
    assert not (tmp_path / "out" / "_manifest.json").exists()
