#!/usr/bin/env bash
# Session 24, call 9: where the host's time goes in a batch-1 decode step on the GPU host
# (latency-b1, dummy weights, CUDA graphs): benchmarks/host_profile.py's per-phase timers, twice,
# then a cProfile of the same loop's top functions.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
for r in 1 2; do
  timeout 60 python3 benchmarks/host_profile.py --workload latency-b1 --model dummy:smollm2-135m --backend cuda > $L/host-profile-$r.log 2>&1
  echo "round $r rc=$?"; cat $L/host-profile-$r.log | grep -v Warn | tail -16
done
timeout 90 python3 - > $L/cprofile-top.txt 2>&1 <<'PY'
# cProfile over five measured latency-b1 generates (after a warm-up), top functions by own time.
import cProfile, pstats
from engine import LLM
from jobs.workloads import get_workload
w = get_workload("latency-b1")
llm = LLM("dummy:smollm2-135m", backend="cuda")
requests = w.requests()
prompts, params = [r.prompt for r in requests], [w.sampling_params(r, i) for i, r in enumerate(requests)]
llm.generate(prompts, params)
prof = cProfile.Profile()
prof.enable()
for _ in range(5):
    llm.reset_prefix_cache()
    llm.generate(prompts, params)
prof.disable()
print("steps:", llm.stats["steps"])
pstats.Stats(prof).sort_stats("tottime").print_stats(30)
PY
echo "cprofile rc=$?"
grep -A40 'ncalls' $L/cprofile-top.txt | head -34
tar -czf $OUT/logs.tgz -C $OUT logs
