#!/usr/bin/env bash
# Session 33, lease 6 (no GGUF): the one-wave rule for the warp-specialized 64-row tiles. The prefill
# kernel tests (the rule's test included), then before (HEAD's engine and cuda_src) and after,
# interleaved, order flipped, with the kernel profile.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill or short_tiles" -p no:cacheprovider -x > $L/kernel-tests.log 2>&1
echo "kernel tests rc=$?"; tail -1 $L/kernel-tests.log; grep -E "FAILED|Error" $L/kernel-tests.log | head -5
B="prefill@--no-store,--no-torch,--reps,9,--profile,--shapes,1x600,1x1000,1x1500,64x1000"
OUT=$L/cmp timeout 150 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -5 $L/prefill-ab.log
for f in $L/cmp/*/*prefill.log; do echo "$f"; grep -E "^prefill|attn_prefill" $f; done
tar -czf $OUT/logs.tgz -C $OUT logs
