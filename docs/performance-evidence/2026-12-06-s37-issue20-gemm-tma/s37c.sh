#!/usr/bin/env bash
# Session 37: tensor maps by value through cuLaunchKernel's kernelParams; the probe and tiny
# gemm_tma shapes, then s37a (tests, kernel bench, prefill A/B).
source benchmarks/device_env.sh
export ROADGATE_CUDA_DEBUG=1
for mode in param gemm; do
  timeout 60 python3 .whl/dbg/dbg.py $mode > $L/dbg-$mode.log 2>&1; echo "dbg $mode rc=$?"; grep -v "PyCUDA WARNING\|cuModuleUnload" $L/dbg-$mode.log | grep -v "map bytes" | tail -14
done
unset ROADGATE_CUDA_DEBUG
bash .whl/s37a.sh
