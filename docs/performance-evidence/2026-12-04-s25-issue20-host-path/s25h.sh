#!/usr/bin/env bash
# Session 25, call 17 (run inline): the committed tree 92a6711, the published prefill runs
# (benchmarks/prefill.py's three shapes with plain torch beside them, stored in $OUT/data).
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ROADGATE_DATA_DIR=$OUT/data; L=$OUT/logs; mkdir -p $L; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code.sha256; timeout 150 python3 benchmarks/prefill.py > $L/prefill.log 2>&1; echo "prefill rc=$?"; tail -4 $L/prefill.log; tar -czf $OUT/logs.tgz -C $OUT logs data
