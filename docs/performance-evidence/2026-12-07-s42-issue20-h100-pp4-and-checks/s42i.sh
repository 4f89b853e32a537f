#!/usr/bin/env bash
# Session 42, call 14 (a426a45): the copy-rate floor on an H100, its GPU test, and the step
# budget's memory: decode_step.py (graph replays timed with events after warm-up, median of 200,
# rotating block layouts) at the default 8,192 tokens a step and at 16,384
# (ROADGATE_MAX_NUM_BATCHED_TOKENS: decode_step.py leaves the budget to the engine), nothing
# stored; each run's wall time from start to exit is its start-up plus a fixed measurement.
source benchmarks/device_env.sh
git_rev=$(cat .whl/HEAD); echo "tree $git_rev" > $L/tree.txt
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_copy_ceiling.py > $L/test-copy-ceiling.log 2>&1
echo "copy ceiling test rc=$?"; tail -n 1 $L/test-copy-ceiling.log
for budget in 8192 16384; do
  start=$SECONDS
  ROADGATE_MAX_NUM_BATCHED_TOKENS=$budget timeout 100 python3 benchmarks/decode_step.py --no-store > $L/decode-step-$budget.log 2>&1
  echo "budget $budget rc=$? $((SECONDS - start)) s"; grep -E "^decode step|GPU memory" $L/decode-step-$budget.log
done
