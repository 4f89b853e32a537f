#!/usr/bin/env bash
# Session 26, call 1: split-key prefill (uncommitted tree over c1da0cd): the prefill kernel tests,
# then c1da0cd's engine against this tree's on prefill.py, alternating, twice.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . "prefill@--no-store,--no-torch,--profile,--shapes,1x4000,1x2000,1x8000,64x1000" "prefill@--no-store,--no-torch,--profile,--shapes,1x4000,1x2000,1x8000,64x1000" 2>&1 | tail -8
cd $L && tar czf $OUT/logs.tgz . 
