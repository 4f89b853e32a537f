#!/usr/bin/env bash
# Session 29, call 8: the warp-specialized kernel's 192-row tiles for short queries too: prefill at
# 64 x 1,000 and 16 x 500 with tall tiles from queries past 512 tokens against the rule's 2,048, alternating.
source benchmarks/device_env.sh
run() {  # run TALL_MIN_QUERY LOG
  timeout 100 python3 -c "import sys, runpy; sys.path.insert(0, '.'); import engine.ops.cuda_ops as c; c._PREFILL_TALL_MIN_QUERY = $1; sys.argv = ['prefill.py', '--no-store', '--no-torch', '--profile', '--reps', '5', '--shapes', '64x1000', '16x500', '8x2000']; runpy.run_path('benchmarks/prefill.py', run_name='__main__')" > $2 2>&1
  echo "tall_min=$1: $(grep -E 'attn_prefill' $2 | awk '{printf "%s %s | ", $3, $5}')"; grep -h "^prefill" $2
}
for round in 1 2; do for t in 2048 256; do run $t $L/tall$t-$round.log; done; done
tar -czf $OUT/logs.tgz -C $OUT logs
