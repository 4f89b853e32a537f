#!/usr/bin/env bash
# Session 28, call 2: the wgmma prefill kernel's lean tile loader (table entries a tile ahead,
# addresses from a few integer ops), with 3 K/V stages at 2 warpgroups: the prefill kernel
# tests on it, then prefill attention against 38028d8 (base) and against the loader alone (lean2).
source benchmarks/device_env.sh
timeout 240 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,5,--shapes,1x4000,1x8000,64x1000"
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B"; echo "cmp rc=$?"
OUT=$L/cmp2 timeout 150 bash benchmarks/compare_trees.sh .whl/lean2 . "$B"; echo "cmp2 rc=$?"
for f in $L/cmp/*/*.log $L/cmp2/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; done
tar -czf $OUT/logs.tgz -C $OUT logs
