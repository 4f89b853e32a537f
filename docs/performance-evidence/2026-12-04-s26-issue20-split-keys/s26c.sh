#!/usr/bin/env bash
# Session 26, call 6: the split only where the plain grid is under one wave. The whole GPU suite with the real
# GGUF (staged by calls 3-5), then c1da0cd vs this tree on prefill.py, twice, alternating.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/model/smollm2.gguf' | sha256sum -c --quiet || exit 3
ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf timeout 330 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/gpu-suite.log 2>&1; echo "suite rc=$?"; grep -E "FAILED|ERROR|passed|failed" $L/gpu-suite.log | tail -8
S=prefill@--no-store,--no-torch,--profile,--shapes,1x1000,1x2000,1x3000,1x4000,64x1000
OUT=$L/cmp timeout 200 bash benchmarks/compare_trees.sh .whl/base . $S $S 2>&1 | tail -5
cd $L && tar czf $OUT/logs.tgz . 
