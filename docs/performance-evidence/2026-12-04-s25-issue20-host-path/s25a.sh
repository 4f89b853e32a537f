#!/usr/bin/env bash
# Session 25, call 1: the tree's GPU tests (dummy weights), then prefill before/after:
# d930c11's engine (.whl/base) against this tree's, both through this tree's prefill.py,
# two rounds alternating; this tree with d930c11's prefill.py (tolist inside the clock) once;
# 64-row prefill tiles forced once.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/prefill.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . prefill@--no-store,--no-torch prefill@--no-store,--no-torch 2>&1 | tail -12
timeout 60 python3 .whl/prefill_old.py --no-store --no-torch > $L/prefill-old-script.log 2>&1; echo "old script rc=$?"; tail -4 $L/prefill-old-script.log
tar -czf $OUT/logs.tgz -C $OUT logs
ROADGATE_PREFILL_M_TILES=1 timeout 50 python3 benchmarks/prefill.py --no-store --no-torch --shapes 64x1000 > $L/prefill-m1.log 2>&1; echo "m1 rc=$?"; tail -2 $L/prefill-m1.log
tar -czf $OUT/logs.tgz -C $OUT logs
