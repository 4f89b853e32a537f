#!/usr/bin/env bash
# Session 26, call 8: every grid row split alike (keeps the grid longest first) wherever the blocks make under
# two waves (uncommitted, over 56f249f). Single prompts at forced tile heights, 56f249f (rows past the share
# split, under one wave) against this tree, alternating, twice each.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
S=prefill@--no-store,--no-torch,--profile,--reps,3,--shapes,1x1000,1x2000,1x3000,1x4000,1x6000
for mt in 1 2; do ROADGATE_PREFILL_M_TILES=$mt OUT=$L/m$mt timeout 200 bash benchmarks/compare_trees.sh .whl/base . $S $S 2>&1 | tail -4; done
cd $L && for f in m*/*/*-prefill.log; do echo "== $f"; grep -E "^prefill|attn_prefill" $f; done > summary.txt; tar czf $OUT/logs.tgz . 
