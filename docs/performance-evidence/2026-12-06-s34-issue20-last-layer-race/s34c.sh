#!/usr/bin/env bash
# Session 34, lease 3, call 3 (after two calls that staged the GGUF's first parts).
# 1. The float32 whole-graph error: each engine's first-token logits run to run, cold prefix
#    cache each time, and the test's order twice.
# 2. The 64-row warp-specialized kernel at three blocks an SM (loaders' registers moved to the
#    consumers by setmaxnreg): the prefill kernel tests; then 64-row tiles in it everywhere
#    (ROADGATE_PREFILL_M_TILES=1) against attn_prefill_wgmma (ROADGATE_PREFILL_WS_SHORT=0),
#    alternating; then HEAD (two blocks an SM) against it on lone prompts, by compare_trees.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k prefill -p no:cacheprovider -x > $L/kernel-tests.log 2>&1
echo "kernel tests rc=$?"; tail -1 $L/kernel-tests.log; grep -E "^FAILED" $L/kernel-tests.log | head -5
timeout 150 python3 .whl/s34_determinism.py float32 > $L/determinism-f32.log 2>&1; echo "det rc=$?"
grep -E "n=|tf32|order|Error" $L/determinism-f32.log
i=0
for mode in wg ws ws wg; do
  i=$((i+1))
  if [ $mode = wg ]; then export ROADGATE_PREFILL_WS_SHORT=0; unset ROADGATE_PREFILL_M_TILES
  else export ROADGATE_PREFILL_M_TILES=1; unset ROADGATE_PREFILL_WS_SHORT; fi
  timeout 70 python3 benchmarks/prefill.py --no-store --no-torch --reps 5 --profile \
    --shapes 64x1000 16x500 8x2000 1x1000 1x1500 1x2000 > $L/mode-$i-$mode.log 2>&1
  echo "$mode rc=$?"; grep -E "^prefill|attn_prefill" $L/mode-$i-$mode.log
done
unset ROADGATE_PREFILL_WS_SHORT ROADGATE_PREFILL_M_TILES
B="prefill@--no-store,--no-torch,--reps,7,--profile,--shapes,1x600,1x1000,1x1500,1x2000,1x4000"
OUT=$L/cmp timeout 200 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -8 $L/prefill-ab.log
for f in $L/cmp/*/*prefill.log; do echo "$f"; grep -E "^prefill|attn_prefill" $f; done
