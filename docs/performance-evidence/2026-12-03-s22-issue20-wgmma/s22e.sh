#!/usr/bin/env bash
# Session 22, call 6: the committed tree (f3154ab, wgmma tiles): every kernel GPU test; the
# decode step around the GEMM crossover, cuBLAS (gemm_max_rows 32) against ours (128).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
for B in 48 64 96; do for rows in 32 128 32 128; do
  ROADGATE_GEMM_MAX_ROWS=$rows timeout 40 python3 benchmarks/decode_step.py --no-store --batch $B --context 512 > $L/step.log 2>&1
  echo "B=$B context=512 gemm_max_rows=$rows: $(grep -oE 'median [0-9.]+ ms' $L/step.log)"
done; done | tee $L/crossover.log
tar -czf $OUT/logs.tgz -C $OUT logs
