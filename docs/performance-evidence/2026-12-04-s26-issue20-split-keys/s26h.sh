#!/usr/bin/env bash
# Session 26, call 14 (4ca81c7 + benchmarks/device_env.sh): the prefill, rope and split kernel tests on the tree
# whose split plan moved to PrefillTiles.split (CPU-tested), through the new device_env.sh.
source benchmarks/device_env.sh
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill or rope" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -5
tar -czf $OUT/logs.tgz -C $OUT logs
