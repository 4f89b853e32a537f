#!/usr/bin/env bash
# Session 42, call 13: the step budget on the request workloads (s42_budget.py: the bench adapter
# at 8,192 and 16,384 tokens a step, alternating in one process). Call 12 (s42g.sh) meant to do
# this through ROADGATE_MAX_NUM_BATCHED_TOKENS, but the bench adapter passes its own 8,192,
# which the environment does not override: its two columns ran the same engine.
source benchmarks/device_env.sh
timeout 400 python3 .whl/s42_budget.py 2 > $L/budget.log 2>&1; echo "rc=$?"; grep -E "round|median" $L/budget.log
