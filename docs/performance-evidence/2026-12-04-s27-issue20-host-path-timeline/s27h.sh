#!/usr/bin/env bash
# Session 27, call 14: does moving cuBLAS's workspace memsets shorten the GPU's span? HEAD
# (.whl/base) against this tree, prefill --timeline (one traced repetition a shape, after the
# measured ones), interleaved, two rounds.
source benchmarks/device_env.sh
OUT=$L/cmp timeout 400 bash benchmarks/compare_trees.sh .whl/base . "prefill@--no-store,--no-torch,--timeline,--reps,3,--shapes,1x4000,64x1000" "prefill@--no-store,--no-torch,--timeline,--reps,3,--shapes,1x4000,64x1000" > $L/cmp.log 2>&1
echo "cmp rc=$?"; tail -4 $L/cmp.log
for f in $L/cmp/*/[12]-prefill.log; do echo "== $f"; grep -E "timeline|gap " $f | grep -E "timeline|Memset|nvjet" | head -8; done
rm -rf $L/cmp/trees
tar -czf $OUT/logs.tgz -C $OUT logs
