#!/usr/bin/env bash
# Session 23, call 1: the wgmma prefill attention kernel: its GPU tests, then prefill with it
# against the mma.sync kernel (ROADGATE_PREFILL_WGMMA=0/1, one process each, alternating).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k prefill -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
for wg in 0 1 0 1; do
  ROADGATE_PREFILL_WGMMA=$wg timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 > $L/prefill-wg$wg-$SECONDS.log 2>&1
  echo "wgmma=$wg rc=$?"
done
tar -czf $OUT/logs.tgz -C $OUT logs
for f in $L/prefill-*.log; do echo "== $f"; grep -iE 'attn|median|ttft|tok/s' $f | head -20; done
