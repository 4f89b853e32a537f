#!/usr/bin/env bash
# Session 33, lease 3 (a fresh machine, no GGUF: prefill.py runs dummy weights), at HEAD (whole-step
# graphs for a lone sequence). On an H200: benchmarks/prefill.py --profile recorded, the issue 20
# rows' series. On any GPU: prefill.py --timeline at 64 x 1,000 (unrecorded): where its time
# outside kernels goes, now that the lone-sequence shapes have lost their first-layer gap.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD)" > $L/tree.txt
if grep -q "H200" $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 200 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
  grep -E "^prefill|recorded|  1x|64x" $L/prefill.log
  tar -czf $OUT/data.tgz -C $OUT data
fi
timeout 150 python3 benchmarks/prefill.py --timeline --no-store --no-torch --shapes 64x1000 > $L/timeline-64x1000.log 2>&1; echo "timeline rc=$?"
tail -14 $L/timeline-64x1000.log
tar -czf $OUT/logs.tgz -C $OUT logs
