#!/usr/bin/env bash
# Session 23, call 10: nano-bench (dummy weights, warmed, cold prefix cache, quiet host) with
# cuBLAS past 32 rows (session 21's crossover) against our GEMM up to 64 rows (session 22's),
# alternating, one process each; not stored (an A/B).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
for rows in 32 64 64 32; do
  f=$L/nano-rows$rows-$SECONDS.log
  ROADGATE_GEMM_MAX_ROWS=$rows timeout 130 python3 -m jobs.cli bench --workload nano-bench --model dummy:smollm2-135m \
    --engine ours --backend cuda --preflight --no-store > $f 2>&1
  echo "gemm_max_rows=$rows rc=$? $(grep -E '^nano-bench' $f)"
done | tee $L/ab.log
