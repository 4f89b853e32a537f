#!/usr/bin/env bash
# Session 28, call 10 (experiment, not committed to the engine): the 128-row wgmma prefill kernel
# with S of tile t + 1 issued before tile t's softmax, 4 K/V stages, one block an SM (162-177
# registers; at two blocks ptxas serializes the wgmmas for lack of registers). Its 128-row and
# split tests, then attention against 7661f3e's kernel (one round).
source benchmarks/device_env.sh
X=/tmp/exptree; mkdir -p $X && tar -C . --exclude=./.whl --exclude=./.model --exclude=./.git -cf - . | tar -C $X -xf - && cp -r .whl/exp/. $X/
(cd $X && PYTHONPATH=/tmp/site:$X timeout 120 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "wgmma-128 or split_tiles_merge or runs_on_wgmma" -p no:cacheprovider) > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,3,--shapes,1x4000,1x8000"
OUT=$L/cmp timeout 150 bash benchmarks/compare_trees.sh .whl/base .whl/exp "$B"; echo "cmp rc=$?"
for f in $L/cmp/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; done
tar -czf $OUT/logs.tgz -C $OUT logs
