"""Session 34: a workload through jobs.engines.ours.run (warm-up on the measured shapes, the
prefix cache emptied before every measured repetition, the median repetition) at a step
budget; prints output tok/s, TTFT p50 and steps. Usage: s34_budget_bench.py WORKLOAD BUDGET."""
import statistics
import sys

from jobs.engines import ours
from jobs.workloads import load_workloads

name, budget = sys.argv[1], int(sys.argv[2])
run = ours.run(load_workloads()[name], "dummy:smollm2-135m", backend="cuda", max_num_batched_tokens=budget)
out_tokens = sum(len(c.token_ids) for c in run.completions)
ttft = statistics.median(c.token_times[0] - c.arrival for c in run.completions)
print(f"{name} budget {budget}: {out_tokens / run.wall_s:,.0f} output tok/s, wall {run.wall_s * 1e3:.1f} ms, "
      f"TTFT p50 {ttft * 1e3:.1f} ms, steps {run.extra_metrics['steps']}, "
      f"peak {run.extra_metrics.get('peak_gpu_mem_bytes', 0) / 1e9:.2f} GB")
