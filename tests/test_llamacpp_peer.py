"""The llama.cpp peer at its best: its own continuous batching for greedy workloads."""
from __future__ import annotations

import pytest

from jobs.engines import identity
from jobs.engines.llamacpp import BatchedGreedy, gguf_path, prompt_token_ids, run
from jobs.workloads import get_workload

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def prompts():
    return prompt_token_ids(get_workload("cpu-small"), MODEL)[:4]


def test_one_slot_gives_what_llama_cpp_pythons_own_generator_gives(prompts):
    import llama_cpp
    # Flash attention as llama.cpp's own default (auto: on, on CPU) picks for the batched path.
    sequential = llama_cpp.Llama(str(gguf_path(MODEL)), n_ctx=512, n_threads=2, n_threads_batch=2, n_gpu_layers=0,
                                 flash_attn=True, verbose=False)
    expected = []
    for prompt in prompts:
        tokens = []
        for token in sequential.generate(prompt, temp=0, top_k=1, min_p=0.0, repeat_penalty=1.0):
            tokens.append(token)
            if len(tokens) == 12:
                break
        sequential.reset()
        expected.append(tokens)
    with BatchedGreedy(gguf_path(MODEL), 1, 512, 2, 512) as batched:
        got = batched.generate(prompts, [12] * len(prompts), ignore_eos=True)
    assert [c.token_ids for c in got] == expected


def test_slots_are_reused_as_requests_finish_and_each_request_gets_its_own_length(prompts):
    lengths = [3, 9, 5, 7]
    with BatchedGreedy(gguf_path(MODEL), 2, 512, 2, 512) as batched:
        done = batched.generate(prompts, lengths, ignore_eos=True)
        again = batched.generate(prompts, lengths, ignore_eos=True)   # starts from an empty cache
    assert [c.index for c in done] == [0, 1, 2, 3]
    assert [len(c.token_ids) for c in done] == lengths and {c.finish_reason for c in done} == {"length"}
    for c in done:
        assert c.token_times == sorted(c.token_times) and c.finish == c.token_times[-1] >= c.arrival
    # Two slots for four requests: the later two start only when earlier ones finish.
    assert min(done[2].token_times[0], done[3].token_times[0]) > min(done[0].finish, done[1].finish) - 1e-9
    assert [c.token_ids for c in again] == [c.token_ids for c in done]


def test_a_greedy_workload_runs_batched_and_its_series_says_so():
    result = run(get_workload("cpu-small"), MODEL)
    assert result.config["n_parallel"] == 8 and identity("llamacpp", result.config)["n_parallel"] == 8
    assert [len(c.token_ids) for c in result.completions] == [32] * 8
    # The runs made one request at a time keep their series: the key is absent there.
    assert "n_parallel" not in identity("llamacpp", {k: v for k, v in result.config.items() if k != "n_parallel"})
