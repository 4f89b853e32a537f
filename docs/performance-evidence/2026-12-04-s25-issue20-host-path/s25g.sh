#!/usr/bin/env bash
# Session 25, call 16 (run inline): the 64-row rule for short queries (before it was committed as 92a6711):
# the prefill kernel tests, and the engine's prefill at the shapes it changes.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256; timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log; timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --shapes 64x1000 16x2000 1x8000 > $L/prefill.log 2>&1; echo "prefill rc=$?"; tail -4 $L/prefill.log
