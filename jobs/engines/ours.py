"""Our engine on a workload: all requests submitted at once, timed after a warm-up.

Fair measurement: the warm-up is the workload's own batch shape (same prompt lengths
and output lengths, other tokens: jobs.engines.warmup_prompts), and the prefix cache
is emptied before every measured repetition, so each one prefills cold as the peers
do. The prefix-cache hits of the measured repetitions are recorded; on a workload
that does not declare shared prefixes any hit makes the measurement invalid.

A workload that finishes sooner than its validity.min_duration_s is run again, up to
MAX_REPETITIONS times, until the timed runs add up to that minimum; the run reported
(its requests, wall time and step counts) is the median repetition by wall time, and
`measured_s` / `repetitions` say how much was measured. A figure from one 0.3 s run
is noise; the median of several is not.
"""
from __future__ import annotations

import time

import torch

from jobs.engines import EngineRun, warmup_prompts
from jobs.metrics import Completion
from jobs.workloads import Workload

MAX_REPETITIONS = 9


def run(workload: Workload, model: str, backend: str = "auto", max_num_seqs: int = 256,
        max_num_batched_tokens: int = 8192, dtype: str = "auto") -> EngineRun:
    from engine import LLM, SamplingParams, quantized
    llm = LLM(model, backend=backend, dtype=dtype, max_num_seqs=max_num_seqs,
              max_num_batched_tokens=max_num_batched_tokens, quantization=workload.quantization)
    requests = workload.requests()
    prompts = [llm.encode_prompt(r.prompt) for r in requests]
    params = [workload.sampling_params(r, i) for i, r in enumerate(requests)]
    # Warm-up on the measured shapes: compiles kernels, captures the graphs of the batch
    # buckets the run will use, sizes the allocator. Every request runs to its max_tokens.
    llm.generate(warmup_prompts(prompts), [SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
                                           for r in requests])
    on_gpu = llm.device.type == "cuda"
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    repetitions, measured, hit_tokens = [], 0.0, 0   # (wall, outputs, stats before, stats after)
    while not repetitions or (measured < workload.min_duration_s and len(repetitions) < MAX_REPETITIONS):
        if not llm.reset_prefix_cache():
            raise RuntimeError("the prefix cache could not be reset: requests are still in flight")
        before = llm.stats
        start = time.perf_counter()
        outputs = llm.generate(prompts, params)
        repetitions.append((time.perf_counter() - start, outputs, before, llm.stats))
        measured += repetitions[-1][0]
        hit_tokens += llm.stats["prefix_cache_hit_tokens"] - before["prefix_cache_hit_tokens"]
    wall, outputs, before, after = sorted(repetitions, key=lambda r: r[0])[(len(repetitions) - 1) // 2]
    steps = after["steps"] - before["steps"]
    extra = {"steps": steps, "syncs_per_step": (after["host_syncs"] - before["host_syncs"]) / max(steps, 1),
             "preemptions": after["preemptions"] - before["preemptions"],
             "repetitions": len(repetitions), "measured_s": measured,
             # Over every measured repetition: each starts cold, so hits come from prompts of one batch.
             "prefix_cache_hit_tokens": hit_tokens}
    # Where the host's time went (the GPU wait is inside read_and_finish).
    host = {k: round(after[k] - before[k], 4) for k in after if k.startswith("host_") and k.endswith("_s")}
    host["gpu_wait_s"] = round(after["gpu_wait_s"] - before["gpu_wait_s"], 4)
    if on_gpu:
        extra["peak_gpu_mem_bytes"] = torch.cuda.max_memory_allocated()
    completions = [Completion(i, len(o.prompt), o.token_ids, o.finish_reason, o.arrival_time,
                              o.token_times, o.finish_time) for i, o in enumerate(outputs)]
    config = {"engine": "ours", "backend": llm.backend, "dtype": str(llm.dtype).removeprefix("torch."),
              "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
              "kv_cache_blocks": after["kv_cache_blocks"], "block_size": after["block_size"]}
    if workload.quantization != "none":   # keyed only where set: dense runs keep their series
        config["quantization"] = workload.quantization
        # Chosen by the engine on this CPU (engine.quantized.dense_prefill_dtype): part of what ran.
        wide = quantized.dense_prefill_dtype()
        config["prefill_weights"] = "int4" if wide is None else str(wide).removeprefix("torch.")
    print("host seconds by phase:", host)
    return EngineRun("ours", config, completions, wall, extra)
