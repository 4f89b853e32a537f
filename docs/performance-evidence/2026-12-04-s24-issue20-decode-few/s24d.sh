#!/usr/bin/env bash
# Session 24, call 7: the committed tree (attn_decode_few, chunks of 128 keys) on the real GGUF:
# every GPU test; latency-b1 with the work list (ROADGATE_DECODE_FEW_ROWS=0, not stored),
# then latency-b1 and nano-bench as published (--preflight: a quiet host before and
# throughout, our prefix cache emptied before each measured repetition); compute-sanitizer
# memcheck over a generate whose decode batches take the few-rows kernel.
set -uo pipefail
cat /tmp/model/part-* > /tmp/model/smollm2.gguf &&
  echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/model/smollm2.gguf' | sha256sum -c --quiet ||
  { echo "the model's parts are not all here"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
L=$OUT/logs; mkdir -p $L
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ROADGATE_DATA_DIR=$OUT/data ROADGATE_REPORT_DIR=$L
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
bench() {  # bench NAME WORKLOAD ARGS...
  local name=$1 workload=$2 limit=$3; shift 3
  timeout $limit python3 -m jobs.cli bench --workload $workload --model /tmp/model/smollm2.gguf --engine ours \
    --backend cuda "$@" > $L/$name.log 2>&1
  echo "$name rc=$? $(grep -A1 'TPOT' $L/$name.log | tail -1)"
  tar -czf $OUT/logs.tgz -C $OUT logs data
}
ROADGATE_DECODE_FEW_ROWS=0 bench latency-b1-worklist latency-b1 60 --no-store
bench latency-b1 latency-b1 90 --preflight
bench nano-bench nano-bench 100 --preflight
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=4096, max_num_seqs=4)
outs = llm.generate([[{'role': 'user', 'content': 'What is the capital of France?'}], 'Once upon a time', 'word ' * 700] * 2,
                    SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', repr(outs[0].text))" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -3 $L/memcheck.log
tar -czf $OUT/logs.tgz -C $OUT logs data
