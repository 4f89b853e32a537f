#!/usr/bin/env bash
# Session 39, call 3. On an H200: the prefill rows, stored for publishing (prefill.py on the
# committed tree, whose default is now prefill_gemm_tma=mlp: the engine and plain torch in one
# process, both warmed up on each shape, fresh prompts and our prefix cache emptied every
# repetition). On an H100: Nsight Compute on the fused gate|up at 8,192 rows (dbg/silu_gemms.py):
# why the ping-pong tiles reach only 68.9 µs (L2 traffic? tensor-pipe use?).
# Prepared in .whl/ as s39a.sh says, plus: mkdir -p .whl/dbg && cp <this folder>/dbg/silu_gemms.py .whl/dbg/
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
if grep -q H200 $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 300 python3 benchmarks/prefill.py --profile > $L/prefill-publish.log 2>&1
  echo "prefill rc=$?"; grep -E "^prefill|^ +[0-9]x|^ +64x" $L/prefill-publish.log | head -20
else
  M='gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,dram__bytes_read.sum,smsp__warps_active.avg.per_cycle_active,sm__throughput.avg.pct_of_peak_sustained_elapsed'
  timeout 200 ncu --metrics "$M" -k regex:"gemm_tma_silu|nvjet|silu_and_mul" -s 3 -c 9 python3 .whl/dbg/silu_gemms.py \
    > $L/ncu-silu.log 2>&1
  echo "ncu rc=$?"; grep -E "gemm_tma|nvjet|silu_and_mul|duration|gmma|lts__|xbar|dram|warps_active|sm__throughput" $L/ncu-silu.log | head -60
fi
