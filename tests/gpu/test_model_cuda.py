"""The whole engine on the cuda backend against the torch backend, real model, on the GPU."""
from __future__ import annotations

import json
import os
import pytest
import torch

from engine import LLM, SamplingParams
from tests.conftest import MODEL, chat_messages

pytestmark = pytest.mark.gpu
PROMPTS = chat_messages(60)
REPORT = os.environ.get("ROADGATE_REPORT_DIR")


def report(name: str, values: dict) -> None:
    print(name, json.dumps(values))
    if REPORT:
        with open(os.path.join(REPORT, f"{name}.json"), "w") as f:
            json.dump(values, f)


@pytest.fixture(scope="module")
def cuda_llm():
    from engine.ops import cuda_unavailable_reason
    if cuda_unavailable_reason():
        pytest.skip(cuda_unavailable_reason())
    return LLM(MODEL, backend="cuda", dtype="bfloat16", kv_cache_tokens=1 << 16)


@pytest.fixture(scope="module")
def torch_llm():
    """The oracle: the torch backend on the same GPU, same dtype."""
    return LLM(MODEL, backend="torch", device="cuda", dtype="bfloat16", kv_cache_tokens=1 << 16)


@pytest.fixture(scope="module")
def fp32_llm():
    return LLM(MODEL, backend="torch", device="cuda", dtype="float32", kv_cache_tokens=1 << 16)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_first_token_logits_match_torch_backend(cuda_llm, torch_llm, fp32_llm):
    """Asserted against the torch backend in the same dtype (same rounding points);
    the distance to float32 is reported: it is bf16's own error, not the kernels'."""
    errs, errs_fp32, errs_torch_fp32 = [], [], []
    for messages in PROMPTS:
        ours, same_dtype, exact = (m.next_token_logits(messages) for m in (cuda_llm, torch_llm, fp32_llm))
        assert torch.isfinite(ours).all()
        errs.append(rel(ours, same_dtype))
        errs_fp32.append(rel(ours, exact))
        errs_torch_fp32.append(rel(same_dtype, exact))
    report("first_token_logits", {"max_rel_err_vs_torch_bf16": max(errs),
                                  "max_rel_err_vs_torch_fp32": max(errs_fp32),
                                  "torch_bf16_vs_torch_fp32": max(errs_torch_fp32), "prompts": len(PROMPTS)})
    assert max(errs) <= 2e-2


def test_greedy_first_32_tokens_agree_on_90_percent(cuda_llm, torch_llm, fp32_llm):
    params = SamplingParams(max_tokens=32, temperature=0)
    ours, same_dtype, exact = ([o.token_ids for o in m.generate(PROMPTS, params)]
                               for m in (cuda_llm, torch_llm, fp32_llm))
    same = sum(a == b for a, b in zip(ours, same_dtype)) / len(PROMPTS)
    report("greedy_agreement", {
        "vs_torch_bf16": same, "vs_torch_fp32": sum(a == b for a, b in zip(ours, exact)) / len(PROMPTS),
        "torch_bf16_vs_torch_fp32": sum(a == b for a, b in zip(same_dtype, exact)) / len(PROMPTS),
        "prompts": len(PROMPTS), "sample": cuda_llm.tokenizer.decode(ours[0])})
    assert same >= 0.9


def test_preemption_and_chunking_on_cuda_keep_outputs():
    """In float32, where a different batch shape cannot flip a greedy pick (in bf16
    cuBLAS picks shape-dependent kernels whose rounding does)."""
    prompts = PROMPTS[:48]
    params = SamplingParams(max_tokens=40, temperature=0)
    roomy = [o.token_ids for o in LLM(MODEL, backend="cuda", dtype="float32",
                                      kv_cache_tokens=1 << 14).generate(prompts, params)]
    tight = LLM(MODEL, backend="cuda", dtype="float32", max_num_seqs=16, max_num_batched_tokens=128,
                kv_cache_tokens=32 * 16)
    outs = tight.generate(prompts, params)
    assert tight.stats["preemptions"] > 0
    same = sum(o.token_ids == r for o, r in zip(outs, roomy)) / len(prompts)
    report("cuda_preemption", {"preemptions": tight.stats["preemptions"], "same_as_roomy": same})
    assert same >= 0.9


def test_seeded_sampling_on_cuda_repeats_and_batches_do_not_matter(cuda_llm):
    params = SamplingParams(max_tokens=24, temperature=0.9, top_p=0.95, top_k=50, seed=11)
    alone = cuda_llm.generate([PROMPTS[3]], params)[0].token_ids
    mixed = [SamplingParams(max_tokens=24, temperature=0.9, seed=i) for i in range(8)]
    mixed[3] = params
    assert cuda_llm.generate(PROMPTS[:8], mixed)[3].token_ids == alone
    other = cuda_llm.generate([PROMPTS[3]], SamplingParams(**{**params.__dict__, "seed": 12}))[0].token_ids
    assert other != alone
