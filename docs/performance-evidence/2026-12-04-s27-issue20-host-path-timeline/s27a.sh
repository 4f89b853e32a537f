#!/usr/bin/env bash
# Session 27, call 1 (HEAD e279d41 + prefill --timeline): the GPU suite's tests on the tree whose
# split workspace cap (8e17994) never ran on the GPU, then where a prefill repetition's wall time goes.
source benchmarks/device_env.sh
timeout 330 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -5
timeout 200 python3 benchmarks/prefill.py --no-store --no-torch --profile --timeline --reps 5 --shapes 1x4000 64x1000 1x8000 > $L/timeline.log 2>&1; echo "timeline rc=$?"
grep -E "^prefill|host ms|timeline|gap |GPU time" $L/timeline.log
tar -czf $OUT/logs.tgz -C $OUT logs
