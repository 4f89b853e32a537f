#!/usr/bin/env bash
# Session 34, lease 4, call 4: what copying the last layer's keys after the wait costs a lone
# prompt (whole graphs): HEAD against the fix, compare_trees, two rounds, kernel profile.
source benchmarks/device_env.sh
B="prefill@--no-store,--no-torch,--reps,9,--profile,--shapes,1x4000,1x1000,1x8000"
OUT=$L/cmp timeout 300 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -6 $L/prefill-ab.log
for f in $L/cmp/*/*prefill.log; do echo "$f"; grep -E "^prefill|attn_decode_few|GPU time" $f; done
