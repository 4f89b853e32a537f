#!/usr/bin/env bash
# Session 25, call 15: prefill tile height forced (ROADGATE_PREFILL_M_TILES=1: 64 query rows,
# 2: 128), alternating, two rounds, on batches of equal prompts from 1,000 to 8,000 tokens:
# where do 128-row tiles (K/V read once for two warpgroups) beat 64-row ones (twice the blocks)?
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code.sha256
n=0
for r in 1 2; do for mt in 1 2; do n=$((n+1))
  ROADGATE_PREFILL_M_TILES=$mt timeout 120 python3 benchmarks/prefill.py --no-store --no-torch --reps 5 \
    --shapes 64x1000 16x2000 8x3000 4x4000 1x8000 > $L/$n-m$mt.log 2>&1
  echo "m_tiles=$mt rc=$? $(grep -E '^ +[0-9]+x' $L/$n-m$mt.log | awk '{printf "%s %s ms; ", $1, $2}')"
  tar -czf $OUT/logs.tgz -C $OUT logs
done; done
