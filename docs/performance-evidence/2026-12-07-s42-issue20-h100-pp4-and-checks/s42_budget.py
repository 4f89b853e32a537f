"""Our engine's step budget (max_num_batched_tokens) on the request workloads, alternating in one
process: each round calls the bench adapter (jobs.engines.ours.run: warm-up on the measured
shapes, the prefix cache emptied before every timed repetition) at 8,192 and at 16,384 tokens a
step, the order flipped every round, on dummy weights (speed does not depend on their values).
Prints each run's output tok/s, TTFT p50 and TPOT p50, then the median ratio per workload.
Usage (from the repository root): python3 s42_budget.py [rounds] [workload ...]"""
import gc
import statistics
import sys

import torch

sys.path.insert(0, ".")
from jobs.engines import ours  # noqa: E402
from jobs.metrics import request_row, summarize  # noqa: E402
from jobs.workloads import get_workload  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
names = sys.argv[2:] or ["nano-bench", "batch-longtail", "fixed-256x128x128"]
budgets = (8192, 16384)
for name in names:
    workload, ratios = get_workload(name), []
    for i in range(rounds):
        figures = {}
        for budget in (budgets if i % 2 == 0 else budgets[::-1]):
            run = ours.run(workload, "dummy:smollm2-135m", backend="cuda", max_num_batched_tokens=budget)
            m = {k: v["value"] for k, v in summarize([request_row(c) for c in run.completions], run.wall_s).items()}
            figures[budget] = m["output_tok_s"]
            print(f"{name} round {i + 1} budget {budget}: {m['output_tok_s']:.0f} output tok/s, "
                  f"TTFT p50 {1e3 * m['ttft_p50_s']:.2f} ms, TPOT p50 {1e3 * m['tpot_p50_s']:.3f} ms", flush=True)
            del run
            gc.collect()
            torch.cuda.empty_cache()
        ratios.append(figures[16384] / figures[8192])
    print(f"{name}: 16,384 over 8,192, median {statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)})")
