#!/usr/bin/env bash
# Session 28, call 3: the prefill softmax's row max and row sum as trees (4 dependent steps, not
# 16): the prefill kernel tests on it, then prefill attention against e9d8355 (the lean loader).
source benchmarks/device_env.sh
timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,5,--shapes,1x4000,1x8000,64x1000"
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B"; echo "cmp rc=$?"
for f in $L/cmp/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; done
rm -rf $L/cmp/trees; tar -czf $OUT/logs.tgz -C $OUT logs
