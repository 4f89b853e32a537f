#!/usr/bin/env bash
# Session 27, call 19 (2af3b8f, the session's final engine; after three calls that staged the GGUF):
# the GPU suite's tests with the real model.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
timeout 250 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -4
tar -czf $OUT/logs.tgz -C $OUT logs
