#!/usr/bin/env bash
# Session 26, call 7: rope_and_cache in 16-byte vectors, silu_and_mul a thread per chunk (uncommitted, over
# 1a80de1): the kernel tests they touch, then 1a80de1 vs this tree on prefill.py --profile, twice, alternating.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "rope or silu or mlp or attention_block or prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -5
S=prefill@--no-store,--no-torch,--profile,--shapes,1x4000,1x8000,64x1000
OUT=$L/cmp timeout 250 bash benchmarks/compare_trees.sh .whl/base . $S $S 2>&1 | tail -5
cd $L && tar czf $OUT/logs.tgz . 
