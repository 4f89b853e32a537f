"""benchmarks/prefill.py's A/B on the GPU: two engines in one process, each with the KV cache
kv_tokens_for gives it, warmed up and then taking turns on the same repetitions."""
from __future__ import annotations

import pytest
import torch

from benchmarks.prefill import kv_tokens_for, measure
from engine import LLM
from tests.conftest import MODEL

pytestmark = pytest.mark.gpu


def test_two_engines_differing_in_one_knob_are_measured_alternately():
    batch, tokens, reps = 2, 300, 2
    settings = {"backend": "cuda", "max_model_len": tokens + 16,
                "kv_cache_tokens": kv_tokens_for([(batch, tokens)], 16)}
    engines = {"A": LLM(MODEL, **settings), "B": LLM(MODEL, **settings, prefill_gemm_tma="off")}
    results = measure(engines, batch, tokens, reps, torch.Generator().manual_seed(0))
    for label, llm in engines.items():
        figures = results[label]["figures"]
        assert figures["prompt_tok_s"] == pytest.approx(batch * tokens / figures["prefill_s"])
        assert 0 < figures["ttft_p50_s"] <= figures["prefill_s"]
        assert results[label]["host"]["schedule"] > 0
        assert llm._next_request_id == batch * (1 + reps)     # a warm-up, then every repetition
        assert llm.config.prefill_gemm_tma == ("off" if label == "B" else "mlp")


def test_plain_torch_replayed_as_a_graph_gives_the_eager_logits_for_each_new_prompt():
    """The peer at its best: benchmarks/prefill.py times plain torch also as a CUDA graph captured
    for the shape; each replay must compute the prompts copied in, as the eager pass does."""
    from benchmarks.prefill import TorchPrefill, TorchPrefillGraph, random_prompts
    llm = LLM(MODEL, backend="cuda", max_model_len=256, kv_cache_tokens=1024)
    ref, gen = TorchPrefill(llm), torch.Generator().manual_seed(0)
    graph = TorchPrefillGraph(ref, 3, 200)
    for _ in range(2):     # cuBLAS may pick other kernels under capture: equal to rounding, not bit for bit
        prompts = random_prompts(llm, 3, 200, gen).cuda()
        replayed, eager = graph(prompts).clone(), ref(prompts)
        assert ((replayed - eager).norm() / eager.norm()).item() < 1e-3
    assert graph.time(random_prompts(llm, 3, 200, gen)) > 0
