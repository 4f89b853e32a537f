"""Ours and llama.cpp on one workload, alternating in one process: the same-run ratio, round by
round, on a host whose speed drifts between minutes (session 31's 2-core AVX2 EPYC). Each
round calls each engine's bench adapter (jobs.engines.*.run: warm-up on the measured shapes,
our prefix cache emptied before every timed repetition, llama.cpp batched), order flipped every
round. Prints each round's output tok/s and ratio, then the median ratio.
Usage (from the repository root): python3 s31_alternating.py [workload] [rounds]"""
import statistics
import sys

sys.path.insert(0, ".")
from jobs.engines import llamacpp, ours  # noqa: E402
from jobs.workloads import get_workload  # noqa: E402

workload = get_workload(sys.argv[1] if len(sys.argv) > 1 else "cpu-small-q4")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
model = "smollm2-135m-instruct"


def tok_s(run) -> float:
    return sum(len(c.token_ids) for c in run.completions) / run.wall_s


ratios = []
for i in range(rounds):
    order = [("ours", lambda: ours.run(workload, model, backend="torch")), ("llamacpp", lambda: llamacpp.run(workload, model))]
    figures = {name: tok_s(fn()) for name, fn in (order if i % 2 == 0 else order[::-1])}
    ratios.append(figures["ours"] / figures["llamacpp"])
    print(f"round {i + 1}: ours {figures['ours']:.1f}  llama.cpp {figures['llamacpp']:.1f}  ratio {ratios[-1]:.2f}", flush=True)
print(f"median ratio {statistics.median(ratios):.2f} over {rounds} rounds ({min(ratios):.2f}-{max(ratios):.2f})")
