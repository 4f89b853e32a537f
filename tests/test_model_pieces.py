"""The forward pass cut at attention (LlamaModel.piece / attend), as prefill graphs replay
it, on the torch backend: padded to a bucket, it gives the forward pass's hidden states
and cache, and the padding writes nothing."""
from __future__ import annotations

import torch

from engine.input_batch import InputBatch
from engine.model_runner import StepLayout
from engine.ops import Step
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


def test_pieces_with_padding_give_the_forward_pass(llm):
    prompts = [[(13 * i + 5 * j) % 3000 + 10 for j in range(n)] for i, n in enumerate((7, 21))]
    model = llm.model
    eager_cache, pieces_cache = torch.zeros_like(llm.kv_cache), torch.zeros_like(llm.kv_cache)

    dev, meta = prefill_inputs(llm, prompts)
    expected = model.forward(dev["token_ids"], dev["positions"], meta, eager_cache)

    dev, meta = prefill_inputs(llm, prompts, pad_tokens_to=32)
    assert dev["token_ids"].shape == (32,) and (dev["slots"][28:] == -1).all()
    step = Step(model.shape, dev["positions"], model.cos_sin, meta)
    attn = torch.full((32, model.shape.num_heads, model.shape.head_dim), float("nan"))
    carry = None
    for i in range(len(model.layers) + 1):
        carry = model.piece(i, carry, dev["token_ids"], step, pieces_cache, attn)
        if i < len(model.layers):
            model.attend(i, carry.q, attn, step, pieces_cache)
    # Padding rows carry NaN from the attention buffer; rows are independent, so the
    # step's own rows must not see it.
    assert carry.shape == (32, model.config.hidden_size) and carry[28:].isnan().all()
    torch.testing.assert_close(carry[:28], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pieces_cache, eager_cache, rtol=1e-5, atol=1e-5)
    written = pieces_cache.flatten(3).abs().sum((0, 1, 3)) > 0       # per block
    assert written.nonzero().flatten().tolist() == [1, 2, 3]              # the prompts' blocks only
