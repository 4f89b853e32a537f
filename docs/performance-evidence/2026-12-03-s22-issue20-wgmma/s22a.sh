#!/usr/bin/env bash
# Session 22, call 1: the wgmma GEMM's tests, the per-tile GEMM sweep, decode-step A/B.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "gemm" -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
timeout 150 python3 benchmarks/kernel_bench.py --only gemm > $L/gemm.log 2>&1; echo "bench rc=$?"; cat $L/gemm.log
for B in 64 256; do for rows in 32 256; do
  ROADGATE_GEMM_MAX_ROWS=$rows timeout 60 python3 benchmarks/decode_step.py --no-store --batch $B --context 192 > $L/step-b$B-r$rows.log 2>&1
  echo "B=$B gemm_max_rows=$rows: $(grep -E 'median' $L/step-b$B-r$rows.log | tr '\n' ' ')"
done; done
tar -czf $OUT/logs.tgz -C $OUT logs
