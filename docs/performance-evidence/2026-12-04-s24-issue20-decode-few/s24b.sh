#!/usr/bin/env bash
# Session 24, call 2: attn_decode_few with a chunk of a whole tile (256 keys of 16-bit d=64)
# and the combine reading 8 splits' partials at a time. Its GPU tests; the decode step at
# small batches with it against the work list (ROADGATE_DECODE_FEW_ROWS=8/0, alternating);
# latency-b1 on dummy weights both ways; then the new tree's work list against HEAD's
# (fca8f9a: .whl/base) at B=1 and B=256 (compare_trees, alternating).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "decode and not prefill" -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
n=0
step() {  # step FEW ARGS...
  local few=$1; shift; n=$((n+1))
  local log=$L/step-$n-few$few-$(echo "$@" | tr -d ' -').log
  ROADGATE_DECODE_FEW_ROWS=$few timeout 60 python3 benchmarks/decode_step.py --no-store "$@" > $log 2>&1
  echo "few=$few $* rc=$? $(grep -o 'median [0-9.]* ms' $log)"
}
step 8 --batch 1 --context 256 --profile
step 0 --batch 1 --context 256 --profile
for few in 0 8 0 8; do step $few --batch 1 --context 200; done
for few in 8 0; do step $few --batch 1 --context 1000; done
for few in 0 8; do step $few --batch 2 --context 256; done
for few in 8 0; do step $few --batch 4 --context 512; done
for few in 0 8; do
  ROADGATE_DECODE_FEW_ROWS=$few timeout 100 python3 -m jobs.cli bench --workload latency-b1 --model dummy:smollm2-135m \
    --engine ours --backend cuda --no-store > $L/latency-b1-few$few.log 2>&1
  echo "latency-b1 few=$few rc=$? $(grep -iE 'tpot' $L/latency-b1-few$few.log | head -3 | tr '\n' ' ')"
done
ROADGATE_DECODE_FEW_ROWS=0 OUT=$L/cmp timeout 200 bash benchmarks/compare_trees.sh .whl/base . \
  decode-step@--no-store,--batch=1,--context=1000 decode-step@--no-store decode-step@--no-store,--batch=64,--context=100-2048 \
  decode-step@--no-store,--batch=1,--context=1000 > $L/cmp.log 2>&1
tail -12 $L/cmp.log
rm -rf $L/cmp/trees
tar -czf $OUT/logs.tgz -C $OUT logs
for f in $L/step-[12]-*.log; do echo "== $f"; grep -E 'attn|kernels:' $f | head -3; done
