#!/usr/bin/env bash
# Session 43: on an H200, the suite's steps that use dummy weights and feed roadmap rows
# (decode-step, decode-step-b1, prefill, step-trace), on the code with the shared q|k|v
# projection. On an H100 (not the rows' card): Nsight Compute on the fused gate|up's ping-pong
# tiles and cuBLAS's gate|up GEMM at 8,192 rows, shared-memory traffic and stalls (session 42's
# hypothesis: the ping-pong mainloop asks more of shared memory than an SM gives).
# Either card, first: step_trace.py unstored with and without 618b254 (the staging copy's event
# queried before a wait), A B A B: call 1's H100 had the GPU idle 11.5% between decode steps
# where session 42's had 2.2%, and its host 1.83 ms a step against 1.65.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
E=docs/performance-evidence/2026-12-07-s43-issue20-h200-suite
i=0
for side in A B A B; do
  i=$((i + 1))
  [ $side = B ] && { git apply $E/revert-618b254.diff || patch -p1 < $E/revert-618b254.diff; }
  timeout 60 python3 benchmarks/step_trace.py --no-store > $L/step-trace-$i$side.log 2>&1
  echo "step-trace $side (B: 618b254 reverted) rc=$?: $(grep -E '^64 decode|GPU idle' $L/step-trace-$i$side.log | tr '\n' ' ')"
  [ $side = B ] && { git apply -R $E/revert-618b254.diff || patch -R -p1 < $E/revert-618b254.diff; }
done
if grep -q H200 $L/gpu.txt; then
  OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
    timeout 400 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
  echo "suite1 rc=$?"; tail -n 6 $L/suite1.log; exit 0
fi
probe=$E/dbg/silu_smem.py
K='regex:gemm_tma_silu_pp_bf16|nvjet'
M='l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,gpu__time_duration.sum'
timeout 120 ncu --metrics "$M" -k "$K" -s 2 -c 2 python3 $probe > $L/ncu-metrics.log 2>&1
echo "ncu metrics rc=$?"; grep -E "^  [a-z_]+|l1tex|gmma|stalled|duration" $L/ncu-metrics.log | head -30
