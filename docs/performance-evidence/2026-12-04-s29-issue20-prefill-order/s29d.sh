#!/usr/bin/env bash
# Session 29, call 4: the warp-specialized 128-row prefill kernel (attn_prefill_ws, ROADGATE_PREFILL_WS=1):
# the prefill kernel tests with it on, then prefill attention with it off and on, alternating.
source benchmarks/device_env.sh
export ROADGATE_PREFILL_WS=1
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider \
  --deselect tests/gpu/test_kernels.py::test_prefill_split_plans_for_the_blocks_this_gpu_runs_at_once > $L/tests.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -15 $L/tests.log | grep -E "passed|failed|FAILED|Error" | head -12
if [ $rc -eq 0 ]; then
  for round in 1 2; do for ws in 0 1; do
    ROADGATE_PREFILL_WS=$ws timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 \
      --shapes 1x4000 1x8000 8x2000 > $L/ws$ws-$round.log 2>&1
    echo "ws=$ws round $round: $(grep -E 'attn_prefill' $L/ws$ws-$round.log | awk '{printf "%s %s | ", $3, $5}')"
    grep -h "^prefill" $L/ws$ws-$round.log
  done; done
fi
tar -czf $OUT/logs.tgz -C $OUT logs
