#!/usr/bin/env bash
# Session 29, call 6: the warp-specialized prefill kernel at 3 computing warpgroups (192-row tiles,
# ROADGATE_PREFILL_WS=3) and 2: the prefill kernel tests at 3, then prefill attention off / 3 / 2, alternating.
source benchmarks/device_env.sh
ROADGATE_PREFILL_WS=3 timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $L/tests.log | head -12
for round in 1 2; do for ws in 0 3 2; do
  ROADGATE_PREFILL_WS=$ws timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 \
    --shapes 1x4000 1x8000 64x1000 > $L/ws$ws-$round.log 2>&1
  echo "ws=$ws round $round: $(grep -E 'attn_prefill' $L/ws$ws-$round.log | awk '{printf "%s %s | ", $3, $5}')"
  grep -h "^prefill" $L/ws$ws-$round.log
done; done
tar -czf $OUT/logs.tgz -C $OUT logs
