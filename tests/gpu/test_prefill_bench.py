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
