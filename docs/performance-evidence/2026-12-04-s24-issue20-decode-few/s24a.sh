#!/usr/bin/env bash
# Session 24, call 1: decode attention for a few rows without a work list (attn_decode_few):
# its GPU tests, then the decode step with it against the work list
# (ROADGATE_DECODE_FEW_ROWS=8/0, one process each, alternating).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "decode and not prefill" -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
step() {  # step FEW ARGS...
  local few=$1; shift
  ROADGATE_DECODE_FEW_ROWS=$few timeout 60 python3 benchmarks/decode_step.py --no-store "$@" > $L/step-few$few-$(echo "$@" | tr -d ' -')-$SECONDS.log 2>&1
  echo "few=$few $* rc=$? $(grep -o 'median [0-9.]* ms' $L/step-few$few-*$SECONDS.log)"
}
step 8 --batch 1 --context 256 --profile
step 0 --batch 1 --context 256 --profile
for few in 0 8; do step $few --batch 1 --context 1000; done
for few in 8 0; do step $few --batch 2 --context 256; done
for few in 0 8; do step $few --batch 4 --context 512; done
for few in 8 0; do step $few --batch 8 --context 512; done
for few in 0 8; do step $few --batch 1 --context 256; done
tar -czf $OUT/logs.tgz -C $OUT logs
for f in $L/step-*256profile*.log; do echo "== $f"; grep -E 'attn|median|kernels:' $f | head -8; done
