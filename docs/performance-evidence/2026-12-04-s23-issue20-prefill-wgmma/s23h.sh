#!/usr/bin/env bash
# Session 23, call 11: why the wgmma prefill kernel waits: Nsight Compute's stall reasons per
# issued instruction, one layer's launch of each shape (e0a868a's kernel).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/ops/*.py > $L/code.sha256
for shape in 1x8000 1x4000; do
  timeout 120 ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__inst_executed.sum,smsp__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active' \
    -k regex:attn_prefill_wg -s 5 -c 1 python3 benchmarks/prefill.py --no-store --no-torch --shapes $shape --reps 1 \
    > $L/stalls-$shape.log 2>&1; echo "ncu $shape rc=$?"
  grep -E 'stalled|inst_executed|pipe|issue_active' $L/stalls-$shape.log | awk '$NF+0 > 0.05 || /inst_executed|pipe|issue/' | sort -k3 -n -r | head -24
done
