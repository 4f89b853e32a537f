#!/usr/bin/env bash
# Session 24, call 3: attn_decode_few with the chunk as a launch parameter
# (ROADGATE_DECODE_FEW_CHUNK). Its GPU tests; then, with the step's graph sized as the engine
# sizes it (max_model_len 8192), the decode step at B=1 and 4 against the work list
# (ROADGATE_DECODE_FEW_ROWS=0) at chunks of 64, 128 and 256 keys; latency-b1 on dummy weights.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 220 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "decode and not prefill" -p no:cacheprovider -x > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
n=0
step() {  # step FEW CHUNK ARGS...
  local few=$1 chunk=$2; shift 2; n=$((n+1))
  local log=$L/step-$n-few$few-c$chunk-$(echo "$@" | tr -d ' -').log
  ROADGATE_DECODE_FEW_ROWS=$few ROADGATE_DECODE_FEW_CHUNK=$chunk timeout 60 python3 benchmarks/decode_step.py --no-store --max-model-len 8192 "$@" > $log 2>&1
  echo "few=$few chunk=$chunk $* rc=$? $(grep -o 'median [0-9.]* ms' $log)"
}
for r in 1 2; do for c in 256 0 128; do step $([ $c = 0 ] && echo 0 || echo 8) ${c/#0/256} --batch 1 --context 200; done; done
for c in 64 128 256 0; do step $([ $c = 0 ] && echo 0 || echo 8) ${c/#0/256} --batch 1 --context 1000; done
for c in 0 128 256; do step $([ $c = 0 ] && echo 0 || echo 8) ${c/#0/256} --batch 4 --context 512; done
step 8 128 --batch 1 --context 200 --profile
for r in 1 2; do for c in 256 0 128; do
  ROADGATE_DECODE_FEW_ROWS=$([ $c = 0 ] && echo 0 || echo 8) ROADGATE_DECODE_FEW_CHUNK=${c/#0/256} timeout 100 \
    python3 -m jobs.cli bench --workload latency-b1 --model dummy:smollm2-135m --engine ours --backend cuda --no-store \
    > $L/latency-b1-$r-c$c.log 2>&1
  echo "latency-b1 chunk=$c (0: work list) rc=$? $(grep -A1 'TPOT' $L/latency-b1-$r-c$c.log | tail -1)"
done; done
tar -czf $OUT/logs.tgz -C $OUT logs
grep -E 'attn|kernels:' $L/step-*profile*.log | head -3
