#!/usr/bin/env bash
# Session 29, call 7: the 192-row warp-specialized kernel (ROADGATE_PREFILL_WS=3) at 1 x 4,000 with
# its tiles split from 1.0 and from 1.2 of a block's share (the rule's 1.5 splits nothing there), alternating.
source benchmarks/device_env.sh
export ROADGATE_PREFILL_WS=3
run() {  # run MIN_SHARES LOG
  timeout 90 python3 -c "import sys, runpy; sys.path.insert(0, '.'); import engine.ops.cuda_ops as c; c._PREFILL_SPLIT_MIN_SHARES = $1; sys.argv = ['prefill.py', '--no-store', '--no-torch', '--profile', '--reps', '7', '--shapes', '1x4000', '3x4000']; runpy.run_path('benchmarks/prefill.py', run_name='__main__')" > $2 2>&1
  echo "min_shares=$1: $(grep -E 'attn_prefill' $2 | awk '{printf "%s %s | ", $3, $5}')"; grep -h "^prefill" $2
}
for round in 1 2; do for ms in 1.5 1.0 1.2; do run $ms $L/split$ms-$round.log; done; done
tar -czf $OUT/logs.tgz -C $OUT logs
