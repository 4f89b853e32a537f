"""The GPU path's host functions of a 1 x N prefill step that run without a GPU, timed one by one
on this CPU: median of 7 rounds of 2,000 calls (after a warm-up), µs a call."""
import statistics, sys, time
sys.path.insert(0, ".")
import numpy as np
from engine.ops.cuda_ops import CudaOps, PrefillTiles

def per_call(fn, n=2000):
    for _ in range(200): fn()
    rounds = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n): fn()
        rounds.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(rounds)

for q, s in [([4000], [4000]), ([8000], [8000]), ([1000] * 8, [1000] * 8)]:
    ql, sl = np.array(q, np.int64), np.array(s, np.int64)
    plan = PrefillTiles.of_step(ql, sl)
    print(f"{len(q)}x{q[0]}: of_step {per_call(lambda: CudaOps.plan_step(None, ql, sl)):.1f} us;"
          f" key_tiles(3) {per_call(lambda: plan.key_tiles(3)):.1f};"
          f" split(9, 3, 132) uncached {per_call(lambda: PrefillTiles.of_step(ql, sl).split(9, 3, 132)):.1f} (incl. of_step)")
