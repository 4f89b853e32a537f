#!/usr/bin/env bash
# Session 37: debug gemm_tma's NaN outputs (TMA probe, tiny shapes), each in its own process.
source benchmarks/device_env.sh
cat $L/gpu.txt
export ROADGATE_CUDA_DEBUG=1
for mode in global param plain gemm; do
  timeout 60 python3 .whl/dbg/dbg.py $mode > $L/dbg-$mode.log 2>&1; echo "dbg $mode rc=$?"; grep -v "PyCUDA WARNING\|cuModuleUnload" $L/dbg-$mode.log | tail -14
done
tar -czf $OUT/logs.tgz -C $OUT logs
