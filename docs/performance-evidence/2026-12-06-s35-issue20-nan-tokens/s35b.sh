#!/usr/bin/env bash
# Session 35, lease 1, call 4. On an H200: the prefill rows, stored for publishing
# (prefill.py, the engine and plain torch in one process, on the committed tree). On an
# H100: where the 128-key tall-tile kernel's time goes: Nsight Compute's pipe use and stall
# reasons per issued instruction, one layer's launch at 1 x 8,000 and 1 x 4,000.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
if grep -q H200 $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 400 python3 benchmarks/prefill.py --profile > $L/prefill-publish.log 2>&1
  echo "prefill rc=$?"; grep -E "^prefill|TTFT|tok/s" $L/prefill-publish.log | head -20
else
  M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__warps_active.avg.per_cycle_active'
  for shape in 1x8000 1x4000; do
    timeout 150 ncu --metrics "$M" -k regex:attn_prefill_ws128 -s 5 -c 1 python3 benchmarks/prefill.py --no-store \
      --no-torch --shapes $shape --reps 1 > $L/stalls-$shape.log 2>&1; echo "ncu $shape rc=$?"
    grep -E 'stalled|inst_executed|pipe|issue_active|duration|warps_active' $L/stalls-$shape.log \
      | awk '$NF+0 > 0.05 || /inst_executed|pipe|issue|duration|warps/' | sort -k3 -n -r | head -26
  done
fi
K="every_tile_height and k128 and 9-3 and (query_lens2 or query_lens0)"
for tool in racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py \
    -k "$K" -p no:cacheprovider > $L/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "passed|failed|ERROR SUMMARY|hazard" $L/$tool.log | head -4
done
tar -czf $OUT/logs.tgz -C $OUT logs
