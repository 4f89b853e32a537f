"""Names every job agrees on: the metrics a run can report and the micro-benchmarks it can run
(the workloads are jobs.workloads' file).

The bench job writes these names, the roadmap file refers to them, and the store and the
gates refuse anything not listed here, so a typo fails loudly instead of never matching.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    unit: str
    better: str  # "higher" or "lower": which way is an improvement


METRICS: dict[str, MetricSpec] = {
    "output_tok_s": MetricSpec("tok/s", "higher"),
    "total_tok_s": MetricSpec("tok/s", "higher"),
    "requests_s": MetricSpec("req/s", "higher"),
    "ttft_p50_s": MetricSpec("s", "lower"),
    "ttft_p99_s": MetricSpec("s", "lower"),
    "tpot_p50_s": MetricSpec("s", "lower"),
    "tpot_p99_s": MetricSpec("s", "lower"),
    "itl_p50_s": MetricSpec("s", "lower"),
    "itl_p99_s": MetricSpec("s", "lower"),
    "e2e_p50_s": MetricSpec("s", "lower"),
    "e2e_p99_s": MetricSpec("s", "lower"),
    "peak_gpu_mem_bytes": MetricSpec("bytes", "lower"),
    "syncs_per_step": MetricSpec("count", "lower"),
    "steps": MetricSpec("count", "lower"),
    "preemptions": MetricSpec("count", "lower"),
    "wall_s": MetricSpec("s", "lower"),
    # Timed runs of the workload (an engine repeats a short one) and their total seconds.
    "repetitions": MetricSpec("count", "lower"),
    "measured_s": MetricSpec("s", "higher"),
    # Prompt tokens our engine took from its prefix cache in the measured repetitions (each
    # starts with the cache emptied): nonzero only where the workload declares shared prefixes.
    "prefix_cache_hit_tokens": MetricSpec("tokens", "higher"),
    # Fraction of requests whose output matches the reference engine's.
    "agreement": MetricSpec("fraction", "higher"),
    # Micro-benchmarks (jobs/microbench.py): a CUDA-graph decode step, its ratio to the
    # roofline floor (weights + KV bytes at the device copy rate), the share of peak
    # GPU memory that is neither weights nor KV cache, and that copy rate, measured on the
    # card in the run (bytes read + written a second; runs before 2026-12-07 used the
    # H200's 4.26e12 from GPU-HOST.md on every card and did not record it).
    "decode_step_s": MetricSpec("s", "lower"),
    "roofline_ratio": MetricSpec("x", "lower"),
    "memory_other_frac": MetricSpec("fraction", "lower"),
    "copy_bytes_per_s": MetricSpec("bytes/s", "higher"),
    # The CPU GEMMs of one decode step (benchmarks/cpu_matmul.py): every layer's projections and the head.
    "gemm_step_s": MetricSpec("s", "lower"),
    # Prefill (benchmarks/prefill.py; its TTFT is ttft_p50_s): our engine's wall clock for a batch of
    # prompts and one token each, the prompt tokens a second that comes to, and the same forward
    # pass in plain torch (cuBLAS + SDPA flash attention) on the same weights.
    "prefill_s": MetricSpec("s", "lower"),
    "prompt_tok_s": MetricSpec("tok/s", "higher"),
    "torch_prefill_s": MetricSpec("s", "lower"),
    # The same plain-torch pass replayed as a CUDA graph captured for the shape: the peer at its
    # best, without its host's launches (recorded since 2026-12-07; eager stays beside it).
    "torch_graph_prefill_s": MetricSpec("s", "lower"),
    # Decode steps traced through CUPTI (benchmarks/step_trace.py), each a mean per step: the runtime
    # API calls that wait for or poll the device or copy, counted by the trace, beside the engine's
    # own count of its waits (syncs_per_step, and the lagged reads: waits with the next step queued);
    # and the GPU's idle time, between consecutive steps and in all, as a share of the traced span.
    "cupti_event_syncs_per_step": MetricSpec("count", "lower"),
    "cupti_event_queries_per_step": MetricSpec("count", "lower"),
    "cupti_stream_syncs_per_step": MetricSpec("count", "lower"),
    "cupti_device_syncs_per_step": MetricSpec("count", "lower"),
    "cupti_memcpy_calls_per_step": MetricSpec("count", "lower"),
    "lagged_reads_per_step": MetricSpec("count", "lower"),
    "step_gap_frac": MetricSpec("fraction", "lower"),
    "gpu_idle_frac": MetricSpec("fraction", "lower"),
    # Batch generation spread over a host's GPUs (benchmarks/gpu_scaling.py; output_tok_s is the
    # N-GPU run's): the same batch with its shards on one GPU, and the N-GPU figure over that one.
    "one_gpu_output_tok_s": MetricSpec("tok/s", "higher"),
    "scaling_ratio": MetricSpec("x", "higher"),
    # The bench job itself (engine "job"): its wall time outside the engines, and that as a share of its wall.
    "job_overhead_s": MetricSpec("s", "lower"),
    "job_overhead_frac": MetricSpec("fraction", "lower"),
}

# Micro-benchmarks roadmap rows may name besides the workloads (benchmarks/decode_step.py,
# benchmarks/cpu_matmul.py, benchmarks/prefill.py's default shapes, benchmarks/step_trace.py,
# benchmarks/gpu_scaling.py).
MICROBENCHMARKS: frozenset[str] = frozenset({
    "decode-step-b256-c1024", "decode-step-b1-c256", "cpu-gemm-step",
    "prefill-1x4000", "prefill-1x8000", "prefill-64x1000",
    "step-trace-fixed-256x128x128", "gpu-scaling-batch",
})

