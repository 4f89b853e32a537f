#!/usr/bin/env bash
# Session 42, call 12: the step budget. Call 11 had 64 x 1,000 at 0.945 of its wall time with
# max_num_batched_tokens 16,384 (prefill.py --ab). What it does to the request workloads that
# mix prefill and decode: nano-bench, batch-longtail and fixed-256, ours alone on dummy weights
# (speed does not depend on their values), the default (8,192) and 16,384 alternating, two
# rounds, nothing stored; each run warms up on its shapes and empties our prefix cache before
# every measured repetition; nothing else runs on the host.
source benchmarks/device_env.sh
for round in 1 2; do
  for w in nano-bench batch-longtail; do
    for budget in 8192 16384; do
      ROADGATE_MAX_NUM_BATCHED_TOKENS=$budget timeout 90 python3 -m jobs.cli bench --workload $w --engine ours \
        --backend cuda --model dummy:smollm2-135m --no-store > $L/$w-$budget-r$round.log 2>&1
      echo "budget=$budget round=$round rc=$? $(grep -E "^$w +ours" $L/$w-$budget-r$round.log)"
    done
  done
done
