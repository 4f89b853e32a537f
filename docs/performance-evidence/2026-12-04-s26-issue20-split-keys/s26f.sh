#!/usr/bin/env bash
# Session 26, call 9 (cfa58b3): the prefill kernel tests; 56f249f vs cfa58b3 on single prompts (default rules),
# twice, alternating; then the published prefill runs (benchmarks/prefill.py, the rows' series, plain torch too).
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill or rope" -p no:cacheprovider > $L/tests.log 2>&1; rc=$?; echo "tests rc=$rc"; grep -E "FAILED|passed|failed" $L/tests.log | tail -5
S=prefill@--no-store,--no-torch,--profile,--reps,3,--shapes,1x1000,1x2000,1x3000,1x4000,1x6000
OUT=$L/cmp timeout 200 bash benchmarks/compare_trees.sh .whl/base . $S $S 2>&1 | tail -4; rm -rf $L/cmp/trees
[ $rc = 0 ] && ROADGATE_DATA_DIR=$OUT/data timeout 120 python3 benchmarks/prefill.py --profile > $L/publish.log 2>&1; echo "publish rc=$?"; grep -E "^ +[0-9]+x|run" $L/publish.log | tail -6
cd $L && tar czf $OUT/logs.tgz . ; cd $OUT && tar czf data.tgz data
