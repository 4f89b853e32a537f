#!/usr/bin/env bash
# Session 23, call 9: a traced generate of each prefill shape (prefill_trace.py): GPU busy and idle.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/ops/*.py engine/*.py > $L/code.sha256
timeout 200 python3 .whl/prefill_trace.py > $L/trace.log 2>&1; echo "trace rc=$?"
grep -v Warning $L/trace.log | tail -40
