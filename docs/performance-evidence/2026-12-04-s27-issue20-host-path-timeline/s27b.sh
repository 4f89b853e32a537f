#!/usr/bin/env bash
# Session 27, call 2: traced 1x4000 and 64x1000 repetitions with Python function events.
source benchmarks/device_env.sh
timeout 300 python3 .whl/s27_trace.py $L > $L/trace.log 2>&1; echo "trace rc=$?"; tail -12 $L/trace.log
ls -la $L
