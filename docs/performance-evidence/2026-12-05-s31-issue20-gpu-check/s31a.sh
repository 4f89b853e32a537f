#!/usr/bin/env bash
# Session 31, device call: the GPU suite on the real GGUF at HEAD (sessions 30-31 are not yet GPU-checked).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
git_head=$(cat .whl/HEAD 2>/dev/null); echo "code: $git_head" > "$L/code.txt"
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
timeout 540 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x > "$L/gpu-tests.log" 2>&1
echo "pytest rc=$?" >> "$L/gpu-tests.log"
tail -5 "$L/gpu-tests.log"
