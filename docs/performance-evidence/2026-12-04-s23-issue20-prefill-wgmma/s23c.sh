#!/usr/bin/env bash
# Session 23, call 3: where the wgmma prefill kernel's time goes (Nsight Compute on one
# 8,000-token and one 4,000-token layer), and its two tile heights forced on every shape.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
for shape in 1x8000 1x4000; do
  timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
    -k regex:attn_prefill_wg -s 5 -c 1 python3 benchmarks/prefill.py --no-store --no-torch --shapes $shape --reps 1 \
    > $L/ncu-$shape.log 2>&1; echo "ncu $shape rc=$?"
done
for mt in 1 2 0; do
  ROADGATE_PREFILL_M_TILES=$mt timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 > $L/prefill-mt$mt.log 2>&1
  echo "m_tiles=$mt rc=$?"
done
tar -czf $OUT/logs.tgz -C $OUT logs
for f in $L/prefill-*.log; do echo "== $f"; grep -iE 'attn_prefill|ours' $f | head -20; done
for f in $L/ncu-*.log; do echo "== $f"; grep -E 'Duration|Throughput|Issue Slots Busy|Executed Ipc A|No Eligible|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued' $f | head -30; done
