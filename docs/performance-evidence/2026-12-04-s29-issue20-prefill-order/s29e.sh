#!/usr/bin/env bash
# Session 29, call 5: prefill attention with the warp-specialized kernel off and on, alternating (call 4's tests passed but for 4 plan assertions).
source benchmarks/device_env.sh
for round in 1 2; do for ws in 0 1; do
  ROADGATE_PREFILL_WS=$ws timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 \
    --shapes 1x4000 1x8000 8x2000 > $L/ws$ws-$round.log 2>&1
  echo "ws=$ws round $round: $(grep -E 'attn_prefill' $L/ws$ws-$round.log | awk '{printf "%s %s | ", $3, $5}')"
  grep -h "^prefill" $L/ws$ws-$round.log
done; done
tar -czf $OUT/logs.tgz -C $OUT logs
