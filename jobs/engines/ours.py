"""Our engine on a workload: all requests submitted at once, timed after a warm-up."""
from __future__ import annotations

import time

import torch

from jobs.engines import EngineRun
from jobs.metrics import Completion
from jobs.workloads import Workload


def run(workload: Workload, model: str, backend: str = "auto", max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192, dtype: str = "auto") -> EngineRun:
    from engine import LLM, SamplingParams
    llm = LLM(model, backend=backend, dtype=dtype, max_num_seqs=max_num_seqs,
              max_num_batched_tokens=max_num_batched_tokens)
    requests = workload.requests()
    params = [workload.sampling_params(r, i) for i, r in enumerate(requests)]
    # Warm-up: compile kernels, fault in the cache, size the allocator.
    llm.generate([requests[0].prompt], SamplingParams(max_tokens=4, ignore_eos=True))
    on_gpu = llm.device.type == "cuda"
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    steps0, syncs0 = llm.stats["steps"], llm.stats["host_syncs"]
    start = time.perf_counter()
    outputs = llm.generate([r.prompt for r in requests], params)
    wall = time.perf_counter() - start
    steps = llm.stats["steps"] - steps0
    extra = {"steps": steps, "syncs_per_step": (llm.stats["host_syncs"] - syncs0) / max(steps, 1),
             "preemptions": llm.stats["preemptions"]}
    if on_gpu:
        extra["peak_gpu_mem_bytes"] = torch.cuda.max_memory_allocated()
    completions = [Completion(i, len(o.prompt_token_ids), o.token_ids, o.finish_reason, o.arrival_time,
                              o.token_times, o.finish_time) for i, o in enumerate(outputs)]
    config = {"engine": "ours", "backend": llm.backend, "dtype": str(llm.dtype).removeprefix("torch."),
              "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
              "kv_cache_blocks": llm.stats["kv_cache_blocks"], "block_size": llm.stats["block_size"]}
    return EngineRun("ours", config, completions, wall, extra)
