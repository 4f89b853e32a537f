#!/usr/bin/env bash
# Prepared in session 43, not run: on an H100 (or any card), where the fused gate|up's
# multiplying warpgroups wait, against cuBLAS's GEMM at the same shape (8,192 x 576 -> 2 x 1,536;
# dbg/silu_smem.py). Call 6 ruled out shared-memory bandwidth by the bank counters; this reads
# the warp states (barrier: the `full` barriers, i.e. the loads, or the ping-pong hand-off;
# long scoreboard; math pipe throttle), the scheduler's issue rate, and the gmma instructions.
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s43-issue20-h200-suite
timeout 200 ncu --section WarpStateStats --section SchedulerStats --section LaunchStats --print-details all \
  --metrics sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed \
  -k 'regex:gemm_tma_silu_pp_bf16|nvjet' -s 2 -c 2 python3 $E/dbg/silu_smem.py > $L/ncu-warps.log 2>&1
echo "ncu rc=$?"; grep -E "^  [a-z_]+|Stall|Issue|Eligible|Active Warps|gmma|throughput" $L/ncu-warps.log | head -60
