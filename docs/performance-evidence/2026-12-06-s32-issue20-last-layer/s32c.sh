#!/usr/bin/env bash
# Session 32, call 5 (a fresh machine, no GGUF: prefill.py runs dummy weights), at the session's engine
# (code of 2c255e7). On an H200: benchmarks/prefill.py --profile recorded, the issue 20 rows' series.
# On another GPU: prefill.py --timeline at 1 x 4,000 (unrecorded): where TTFT's time outside kernels goes.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD)" > $L/tree.txt
if grep -q "H200" $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 200 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
  grep -E "^prefill|attn_|recorded|ours:" $L/prefill.log
  tar -czf $OUT/data.tgz -C $OUT data
else
  timeout 150 python3 benchmarks/prefill.py --timeline --no-store --no-torch --shapes 1x4000 > $L/timeline.log 2>&1; echo "timeline rc=$?"
  tail -40 $L/timeline.log
fi
tar -czf $OUT/logs.tgz -C $OUT logs
