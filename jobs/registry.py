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
    # roofline floor (weights + KV bytes at the device copy rate), and the share of peak
    # GPU memory that is neither weights nor KV cache.
    "decode_step_s": MetricSpec("s", "lower"),
    "roofline_ratio": MetricSpec("x", "lower"),
    "memory_other_frac": MetricSpec("fraction", "lower"),
    # The CPU GEMMs of one decode step (benchmarks/cpu_matmul.py): every layer's projections and the head.
    "gemm_step_s": MetricSpec("s", "lower"),
    # The bench job itself (engine "job"): its wall time outside the engines, and that as a share of its wall.
    "job_overhead_s": MetricSpec("s", "lower"),
    "job_overhead_frac": MetricSpec("fraction", "lower"),
}

# Micro-benchmarks roadmap rows may name besides the workloads (benchmarks/decode_step.py,
# benchmarks/cpu_matmul.py).
MICROBENCHMARKS: frozenset[str] = frozenset({"decode-step-b256-c1024", "decode-step-b1-c256", "cpu-gemm-step"})

