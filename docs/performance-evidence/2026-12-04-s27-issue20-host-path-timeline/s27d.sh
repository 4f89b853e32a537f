#!/usr/bin/env bash
# Session 27, call 4: the first prefill step's host path, untraced (s27_host.py marks), on HEAD
# (.whl/base over this checkout) and on this tree, which launches the first graph piece before
# planning attention and skips the running sequences' array work when none run; then both
# trees' prefill, interleaved (compare_trees.sh).
source benchmarks/device_env.sh
base=/tmp/base-tree; mkdir -p $base
tar --exclude=./.git --exclude=./.whl -cf - . | tar -C $base -xf - && cp -r .whl/base/. $base/
here=$PWD
for i in 1 2; do
  for side in before after; do
    dir=$here; [ $side = before ] && dir=$base
    (cd $dir && timeout 150 python3 $here/.whl/s27_host.py) > $L/host-$side-$i.log 2>&1
    echo "$side $i rc=$?"; grep "^1x" $L/host-$side-$i.log
  done
done
OUT=$L/cmp timeout 400 bash benchmarks/compare_trees.sh .whl/base . "prefill@--no-store,--no-torch,--reps,9,--shapes,1x4000,64x1000" "prefill@--no-store,--no-torch,--reps,9,--shapes,1x4000,64x1000" > $L/cmp.log 2>&1
echo "cmp rc=$?"; tail -6 $L/cmp.log
rm -rf $L/cmp/trees
tar -czf $OUT/logs.tgz -C $OUT logs
