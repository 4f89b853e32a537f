"""Continuous batching, preemption and prefix caching on the real model."""
from __future__ import annotations

import random

import numpy as np
import pytest

from engine import LLM, PromptError, SamplingParams
from tests.conftest import MODEL

GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


def _mixed_prompts(n: int, seed: int = 7) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(20, 49000) for _ in range(rng.randrange(5, 120))] for _ in range(n)]


def test_preemption_keeps_outputs_equal_to_running_alone(llm):
    prompts = _mixed_prompts(32)
    alone = [llm.generate([p], GREEDY)[0].token_ids for p in prompts]
    # 8 sequences of up to ~144 tokens need up to 72 blocks; 24 force preemption.
    small = LLM(MODEL, backend="torch", dtype="float32", max_num_seqs=8,
                max_num_batched_tokens=256, kv_cache_tokens=24 * 16)
    outs = small.generate(prompts, GREEDY)
    assert small.stats["preemptions"] > 0
    assert sum(o.num_preemptions for o in outs) == small.stats["preemptions"]
    assert [o.token_ids for o in outs] == alone


def test_chunked_prefill_matches_unchunked(llm):
    prompt = _mixed_prompts(1, seed=3)[0] * 3          # ~300 tokens
    chunked = LLM(MODEL, backend="torch", dtype="float32", max_num_batched_tokens=32,
                  kv_cache_tokens=4096)
    assert chunked.generate([prompt], GREEDY)[0].token_ids == llm.generate([prompt], GREEDY)[0].token_ids
    assert chunked.stats["steps"] >= len(prompt) // 32 + GREEDY.max_tokens - 1


def test_shared_prefix_hits_cache_and_keeps_outputs(llm):
    prefix = list(range(1000, 1160))                    # 160 tokens = 10 full blocks
    prompts = [prefix + [2000 + i, 3000 + i] for i in range(4)]
    expected = [llm.generate([p], GREEDY)[0].token_ids for p in prompts]   # warms the cache too
    cached = LLM(MODEL, backend="torch", dtype="float32", kv_cache_tokens=4096)
    first = cached.generate([prompts[0]], GREEDY)[0]
    hits_before = cached.stats["prefix_cache_hits"]
    rest = cached.generate(prompts[1:], GREEDY)
    assert cached.stats["prefix_cache_hits"] - hits_before == 3 * 10
    assert cached.stats["prefix_cache_hit_tokens"] >= 3 * 160
    assert [first.token_ids] + [o.token_ids for o in rest] == expected


def test_token_id_prompts_are_refused_before_any_work(llm):
    vocab = llm.model_config.vocab_size
    steps = llm.stats["steps"]
    with pytest.raises(PromptError, match=rf"token id -1 is outside the vocabulary \[0, {vocab}\)"):
        llm.generate([[5, 6], [5, -1, vocab]], GREEDY)       # the first bad id is named
    with pytest.raises(PromptError, match=f"token id {2**70} is outside"):
        llm.generate([[5, 6], [5, 2**70]], GREEDY)          # past int64 too
    for not_ids in ([5, 6.0], [5, "6"], [5, None], [np.float32(5)], [[5, 6]], [2**70, 6.0]):
        with pytest.raises(PromptError, match="a prompt must be a string, a list of token ids"):
            llm.generate([[5, 6], not_ids], GREEDY)
    with pytest.raises(PromptError, match="the prompt is empty"):
        llm.generate([[5, 6], []], GREEDY)                   # not numpy's error from an empty array
    assert llm.stats["steps"] == steps and not llm.has_unfinished()
    assert llm.encode_prompt([True, vocab - 1]) == [True, vocab - 1]    # bools are ints, as ever
    # numpy's integers are integers too; the request keeps Python ints (they serialise anywhere)
    ids = llm.encode_prompt([np.int64(5), np.int32(6), 7])
    assert ids == [5, 6, 7] and {type(t) for t in ids} == {int}
    out = llm.generate([[np.int64(5), 6, True]], GREEDY)[0]     # and so does the output's prompt
    assert out.prompt_token_ids == [5, 6, 1] and {type(t) for t in out.prompt_token_ids} == {int}


def test_prefix_caching_off_records_no_hits():
    nocache = LLM(MODEL, backend="torch", dtype="float32", kv_cache_tokens=2048, enable_prefix_caching=False)
    p = list(range(100, 180))
    nocache.generate([p, p], GREEDY)
    assert nocache.stats["prefix_cache_hits"] == 0


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=16, temperature=0.8, seed=1234, ignore_eos=True),
    SamplingParams(max_tokens=16, temperature=1.0, top_k=20, seed=99, ignore_eos=True),
    SamplingParams(max_tokens=16, temperature=0.7, top_p=0.9, seed=5, ignore_eos=True),
])
def test_seeded_sampling_repeats_and_seeds_differ(llm, params):
    prompt = "Write a short poem about the sea."
    a = llm.generate([prompt], params)[0].token_ids
    # Same seed in a different batch composition: same tokens.
    batch = llm.generate(["Another prompt entirely", prompt, "and a third"], params)
    assert batch[1].token_ids == a
    other = SamplingParams(**{**params.__dict__, "seed": params.seed + 1})
    assert llm.generate([prompt], other)[0].token_ids != a


def test_unseeded_requests_differ_but_engine_seed_repeats():
    params = SamplingParams(max_tokens=12, temperature=1.0)
    runs = []
    for _ in range(2):
        eng = LLM(MODEL, backend="torch", dtype="float32", kv_cache_tokens=1024, seed=42)
        runs.append([o.token_ids for o in eng.generate(["Tell me a story."] * 2, params)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]


def test_stop_strings_and_stop_tokens(llm):
    greedy = SamplingParams(max_tokens=40, temperature=0)
    base = llm.generate(["The capital of France is"], greedy)[0]
    word = base.text.split()[1]
    stopped = llm.generate(["The capital of France is"], SamplingParams(max_tokens=40, temperature=0, stop=[word]))[0]
    assert stopped.finish_reason == "stop" and word not in stopped.text
    assert base.text.startswith(stopped.text)
    tok = base.token_ids[3]
    by_token = llm.generate(["The capital of France is"],
                            SamplingParams(max_tokens=40, temperature=0, stop_token_ids=[tok]))[0]
    first = base.token_ids.index(tok)
    assert by_token.finish_reason == "stop" and by_token.token_ids == base.token_ids[:first + 1]


def test_outputs_carry_timestamps(llm):
    out = llm.generate(["Count to five."], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 8
    assert len(out.token_times) == 8
    assert out.arrival_time < out.token_times[0] <= out.token_times[-1] <= out.finish_time
    assert 0 < out.ttft <= out.e2e


def test_stale_cache_contents_cannot_leak_into_outputs():
    """Slots past a sequence's length hold leftovers of earlier sequences."""
    eng = LLM(MODEL, backend="torch", dtype="float32", kv_cache_tokens=1024, enable_prefix_caching=False)
    assert not eng.kv_cache.any()                      # never-written slots are zero, never NaN
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    clean = eng.generate(["The capital of France is", "One, two, three,"], params)
    eng.kv_cache.normal_(0, 100)
    stale = eng.generate(["The capital of France is", "One, two, three,"], params)
    assert [o.token_ids for o in stale] == [o.token_ids for o in clean]
