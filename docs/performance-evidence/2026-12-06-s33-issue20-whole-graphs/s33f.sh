#!/usr/bin/env bash
# Session 33, lease 4 call 2: is 1 x 1,000's win the 64-row ws kernel or its split plan (264 slots
# against 528)? The wgmma kernel planned for 264 slots (.whl/slots264.py) against the ws kernel, alternating.
source benchmarks/device_env.sh
S="1x1000 1x2000 1x600"
run=0
for side in wg264 ws wg264 ws wg; do
  run=$((run + 1)); log=$L/prefill-$run-$side.log
  case $side in
    wg264) ROADGATE_PREFILL_WS_SHORT=0 timeout 100 python3 .whl/slots264.py --no-store --no-torch --profile --reps 5 --shapes $S > $log 2>&1 ;;
    ws) ROADGATE_PREFILL_WS_SHORT=1 timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes $S > $log 2>&1 ;;
    wg) ROADGATE_PREFILL_WS_SHORT=0 timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes $S > $log 2>&1 ;;
  esac
  echo "run $run $side rc=$?"; grep -E "^prefill|attn_prefill" $log
done
tar -czf $OUT/logs.tgz -C $OUT logs
