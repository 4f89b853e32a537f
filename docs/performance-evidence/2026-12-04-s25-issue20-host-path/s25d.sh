#!/usr/bin/env bash
# Session 25, call 13: the committed tree: every GPU test on the real GGUF (call 9's run
# was cut by its time limit at ~1,496 of 1,509, all passed, while a fresh machine compiled the kernels);
# then the published prefill runs: benchmarks/prefill.py's three shapes (dummy weights, the
# rows' series; warmed on each shape, fresh prompts and an emptied prefix cache every
# repetition; plain torch beside it).
set -uo pipefail
cat /tmp/model/part-* > /tmp/model/smollm2.gguf &&
  echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/model/smollm2.gguf' | sha256sum -c --quiet ||
  { echo "the model's parts are not all here"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
L=$OUT/logs; mkdir -p $L
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ROADGATE_REPORT_DIR=$L ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code.sha256
timeout 280 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
tar -czf $OUT/logs.tgz -C $OUT logs
ROADGATE_DATA_DIR=$OUT/data timeout 160 python3 benchmarks/prefill.py > $L/prefill.log 2>&1; echo "prefill rc=$?"; tail -4 $L/prefill.log
tar -czf $OUT/logs.tgz -C $OUT logs data
