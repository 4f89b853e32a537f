"""The forward pass cut at attention (LlamaModel.piece / attend), as prefill graphs replay
it, on the torch backend: padded to a bucket, it gives the forward pass's hidden states
and cache, and the padding writes nothing; and the last layer run at each sequence's last
token alone (AttentionMetadata.last) gives the full pass's rows there."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.input_batch import InputBatch
from engine.model_runner import StepLayout
from engine.ops import Step
from engine.prefill_graphs import token_buckets
from engine.sampling_params import SamplingParams
from engine.scheduler import NewRequest, SchedulerOutput
from engine.step_upload import upload


def prefill_inputs(llm, prompts, pad_tokens_to=None):
    batch = InputBatch(4, llm.max_model_len, llm.config.block_size)
    blocks = iter(range(1, 1000))
    new = [NewRequest(i, p, len(p), SamplingParams(), 0,
                      [next(blocks) for _ in range(-(-len(p) // llm.config.block_size))]) for i, p in enumerate(prompts)]
    out = SchedulerOutput(new_requests=new, request_ids=[n.request_id for n in new],
                          num_scheduled_tokens=[len(p) for p in prompts], num_computed_tokens=[0] * len(prompts),
                          samples=[True] * len(prompts))
    runner = llm.runner
    inputs = runner._step_inputs(batch, StepLayout.of(batch.apply(out), out), pad_tokens_to=pad_tokens_to)
    dev = upload(vars(inputs), llm.device)
    return dev, runner._metadata(inputs, dev)


def run_pieces(model, dev, meta, kv_cache, attn, qkv=None):
    step = Step(model.shape, dev["positions"], model.cos_sin, meta)
    carry = None
    for i in range(len(model.layers) + 1):
        carry = model.piece(i, carry, dev["token_ids"], step, kv_cache, attn, qkv)
        if i < len(model.layers):
            assert qkv is None or carry.q.data_ptr() == qkv.data_ptr()     # the queries are the buffer's
            model.attend(i, carry.q, attn, step, kv_cache)
    return carry


@pytest.mark.parametrize("shared_qkv", [False, True], ids=["a-projection-a-piece", "one-projection"])
def test_pieces_with_padding_give_the_forward_pass(llm, shared_qkv):
    """Prefill graphs replay the pieces with one q|k|v projection for every piece (each layer's
    attention reads its queries before the next piece writes it): the same result as with a
    projection a piece."""
    prompts = [[(13 * i + 5 * j) % 3000 + 10 for j in range(n)] for i, n in enumerate((7, 21))]
    model = llm.model
    eager_cache, pieces_cache = torch.zeros_like(llm.kv_cache), torch.zeros_like(llm.kv_cache)

    dev, meta = prefill_inputs(llm, prompts)
    expected = model.forward(dev["token_ids"], dev["positions"], meta, eager_cache)
    assert expected.shape == (2, model.config.hidden_size)      # a row a sequence

    dev, meta = prefill_inputs(llm, prompts, pad_tokens_to=32)
    assert dev["token_ids"].shape == (32,) and (dev["slots"][28:] == -1).all()
    # The batch's 4 rows are kept: the 2 sequences' last tokens, then token 0.
    assert dev["last_tokens"].tolist() == [6, 27, 0, 0]
    attn = torch.full((32, model.shape.num_heads, model.shape.head_dim), float("nan"))
    s = model.shape
    qkv = torch.full((32, (s.num_heads + 2 * s.num_kv_heads) * s.head_dim), float("nan")) if shared_qkv else None
    hidden = run_pieces(model, dev, meta, pieces_cache, attn, qkv)
    # The last layer's attention wrote only the kept tokens' rows; earlier layers' wrote every
    # real token's, and the padding's rows carry NaN from the buffer, which no real row sees.
    assert attn[28:].isnan().all() and not attn[:28].isnan().any()
    assert hidden.shape == (4, model.config.hidden_size)
    torch.testing.assert_close(hidden[:2], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pieces_cache, eager_cache, rtol=1e-5, atol=1e-5)
    written = pieces_cache.flatten(3).abs().sum((0, 1, 3)) > 0       # per block
    assert written.nonzero().flatten().tolist() == [1, 2, 3]              # the prompts' blocks only


def test_the_last_layer_at_the_last_tokens_alone_gives_the_full_passs_rows(llm):
    """What meta.last saves (the last layer's attention, and all after it, at every other
    token) changes nothing the sampler sees: the full pass's rows at those tokens, and the
    same cache."""
    prompts = [[(7 * i + 3 * j) % 3000 + 10 for j in range(n)] for i, n in enumerate((1, 9, 30))]
    model = llm.model
    kept_cache, full_cache = torch.zeros_like(llm.kv_cache), torch.zeros_like(llm.kv_cache)
    dev, meta = prefill_inputs(llm, prompts)
    # The last tokens attend to keys the step itself writes first (attn_decode_few copies
    # earlier steps' keys before its programmatic wait, and must not here).
    assert meta.last.step_wrote_keys and not meta.step_wrote_keys
    kept = model.forward(dev["token_ids"], dev["positions"], meta, kept_cache)
    dev, meta = prefill_inputs(llm, prompts)
    full = model.forward(dev["token_ids"], dev["positions"], dataclasses.replace(meta, last=None), full_cache)
    assert full.shape == (40, model.config.hidden_size) and kept.shape == (3, model.config.hidden_size)
    torch.testing.assert_close(kept, full[[0, 9, 39]], rtol=1e-5, atol=1e-5)
    assert torch.equal(kept_cache, full_cache)


def test_token_buckets_pad_a_step_by_at_most_half_up_to_a_budget_of_16384():
    """A step pads to the least bucket that holds it: past 1,024 tokens by at most half again
    (a 9,000-token step of a 16,384 budget runs at 12,288, not 16,384); the budget is the top."""
    assert token_buckets(8192)[-4:] == [3072, 4096, 6144, 8192]
    assert token_buckets(16384)[-3:] == [8192, 12288, 16384]
    assert token_buckets(10000)[-2:] == [8192, 10000]
    for budget in (8192, 16384):
        buckets = token_buckets(budget)
        assert all(b / a <= 1.5 for a, b in zip(buckets, buckets[1:]) if a >= 1024)
