#!/usr/bin/env bash
# Session 22, call 2: GPU tests of the changed kernels; decode-step A/B, HEAD (51a5d6f) vs
# this tree (wgmma tiles + L2 prefetch of cuBLAS weights); gemm_max_rows sweep; fixed-256 A/B.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py > $L/code.sha256
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "gemm or norm or silu or linear or occupancy or cublas" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
OUT=$L/cmp timeout 240 bash benchmarks/compare_trees.sh .whl/base . decode-step@--batch=256,--context=192,--no-store,--profile \
  decode-step@--batch=128,--context=192,--no-store decode-step@--batch=64,--context=192,--no-store \
  decode-step@--batch=256,--context=1024,--no-store decode-step@--batch=32,--context=512,--no-store > $L/cmp.log 2>&1
echo "cmp rc=$?"; tail -14 $L/cmp.log
for B in 64 128; do for rows in 64 128; do
  ROADGATE_GEMM_MAX_ROWS=$rows timeout 40 python3 benchmarks/decode_step.py --no-store --batch $B --context 192 > $L/rows-b$B-r$rows.log 2>&1
  echo "B=$B gemm_max_rows=$rows: $(grep -oE 'median [0-9.]+ ms' $L/rows-b$B-r$rows.log)"
done; done
tar -czf $OUT/logs.tgz -C $OUT logs
