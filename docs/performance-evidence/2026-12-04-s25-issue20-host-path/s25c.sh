#!/usr/bin/env bash
# Session 25, call 9: the committed tree on the real GGUF: every GPU test; latency-b1
# before/after (d930c11's engine in .whl/base against this tree's, two rounds alternating,
# --preflight: quiet host before and throughout, warmed, cold prefix cache); latency-b1 as
# published (stored in $OUT/data); memcheck over a generate.
set -uo pipefail
cat /tmp/model/part-* > /tmp/model/smollm2.gguf &&
  echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/model/smollm2.gguf' | sha256sum -c --quiet ||
  { echo "the model's parts are not all here"; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
L=$OUT/logs; mkdir -p $L
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ROADGATE_REPORT_DIR=$L ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $L/gpu.txt
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code.sha256
timeout 160 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
OUT=$L/cmp timeout 230 bash benchmarks/compare_trees.sh .whl/base . latency-b1 latency-b1 2>&1 | tail -5
tar -czf $OUT/logs.tgz -C $OUT logs
ROADGATE_DATA_DIR=$OUT/data timeout 80 python3 -m jobs.cli bench --workload latency-b1 --model /tmp/model/smollm2.gguf \
  --engine ours --backend cuda --preflight > $L/latency-b1.log 2>&1; echo "latency-b1 rc=$?"; grep -A1 TPOT $L/latency-b1.log | tail -1
tar -czf $OUT/logs.tgz -C $OUT logs data
timeout 80 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=4096, max_num_seqs=4)
outs = llm.generate([[{'role': 'user', 'content': 'What is the capital of France?'}], 'Once upon a time', 'word ' * 700] * 2,
                    SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', repr(outs[0].text))" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -2 $L/memcheck.log
tar -czf $OUT/logs.tgz -C $OUT logs data
