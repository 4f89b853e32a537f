#!/usr/bin/env bash
# Session 27, call 3: the first prefill step's host path, untraced (s27_host.py marks), on HEAD
# (.whl/base) and on the tree that launches the first graph piece before planning attention and
# skips the running sequences' array work when none run; then a cuBLAS without workspace.
source benchmarks/device_env.sh
mkdir -p $L/base-tree && cp -r . $L/base-tree/ 2>/dev/null; rm -rf $L/base-tree/.whl $L/base-tree/.git
cp -r .whl/base/. $L/base-tree/
for i in 1 2; do
  for side in base new; do
    dir=$PWD; [ $side = base ] && dir=$L/base-tree
    (cd $dir && timeout 150 python3 $OLDPWD/.whl/s27_host.py) > $L/host-$side-$i.log 2>&1; echo "$side $i rc=$?"; grep "^1x" $L/host-$side-$i.log
  done
done
rm -rf $L/base-tree
for ws in default ":0:0"; do
  ( [ $ws = default ] || export CUBLAS_WORKSPACE_CONFIG=$ws; timeout 120 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes 1x4000 ) > $L/cublas-ws-$ws.log 2>&1
  echo "cublas workspace $ws"; grep -E "^prefill|us/call|nvjet|Memset|GPU time" $L/cublas-ws-$ws.log | head -12
done
tar -czf $OUT/logs.tgz -C $OUT logs
