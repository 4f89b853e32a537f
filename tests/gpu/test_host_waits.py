"""Every host wait on the device is the engine's counted one (engine.sync): decode steps traced
through CUPTI, as benchmarks/step_trace.py traces them, make as many cudaEventSynchronize calls
as the engine counts syncs and lagged reads. The pinned staging buffers' wait once made one
more a step, uncounted (session 42's H100 trace: 2.00 a step against 1.00)."""
from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.step_trace import STEP_LABEL, calls_by_step, step_windows, traced_events
from engine import LLM, SamplingParams
from tests.conftest import MODEL

pytestmark = pytest.mark.gpu


def test_cupti_sees_no_wait_the_engine_does_not_count():
    llm = LLM(MODEL, backend="cuda", max_num_seqs=16, max_model_len=256, kv_cache_tokens=8192)
    params = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
    prompts = [[(11 * i + 7 * j) % 20000 + 30 for j in range(20 + i)] for i in range(16)]
    llm.generate(prompts, params)                                   # compiles and captures the graphs
    for prompt in prompts:
        llm.add_request(prompt, params)
    for _ in range(6):                                              # the prefills done, decoding
        llm.step()
    before = llm.stats
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(16):
            with record_function(STEP_LABEL):
                llm.step()
        torch.cuda.synchronize()
    after = llm.stats
    events = traced_events(prof, None)
    counts = calls_by_step(events, step_windows(events))
    assert len(counts) == 16 and any(counts)
    traced = sum(step["cudaEventSynchronize"] for step in counts)
    counted = sum(after[k] - before[k] for k in ("host_syncs", "lagged_reads"))
    assert counted > 0 and traced == counted
