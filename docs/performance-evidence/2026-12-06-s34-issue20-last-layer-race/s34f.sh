#!/usr/bin/env bash
# Session 34, lease 5 (one call, no GGUF needed). The 192-row warp-specialized kernel on 128-key
# tiles (prefill_ws_keys=128: one m64n128k16 multiply for S, a tile's P V waited for before the
# next S, registers moved to the consumers by setmaxnreg). 1. The prefill kernel tests, the new
# fixtures included; 2. 128-key against 64-key tiles on tall-tile shapes, alternating;
# 3. HEAD against this tree at its defaults (64-key tiles; the helpers now templated).
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
timeout 130 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k prefill -p no:cacheprovider -x > $L/kernel-tests.log 2>&1
echo "kernel tests rc=$?"; tail -1 $L/kernel-tests.log; grep -E "^FAILED|Error" $L/kernel-tests.log | head -5
i=0
for keys in 128 64 64 128; do
  i=$((i+1))
  ROADGATE_PREFILL_WS_KEYS=$keys timeout 60 python3 benchmarks/prefill.py --no-store --no-torch --reps 5 --profile \
    --shapes 1x8000 1x4000 1x3000 > $L/keys-$i-$keys.log 2>&1
  echo "keys $keys rc=$?"; grep -E "^prefill|attn_prefill" $L/keys-$i-$keys.log
done
B="prefill@--no-store,--no-torch,--reps,5,--profile,--shapes,1x4000,1x8000,64x1000,1x1000"
OUT=$L/cmp timeout 170 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -5 $L/prefill-ab.log
for f in $L/cmp/*/*prefill.log; do echo "$f"; grep -E "^prefill|attn_prefill" $f; done
