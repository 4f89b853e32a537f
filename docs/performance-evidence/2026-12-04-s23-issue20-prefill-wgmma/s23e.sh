#!/usr/bin/env bash
# Session 23, call 8: the committed tree (e0a868a, wgmma prefill): the prefill figures into a
# results store (dummy weights, as the published prefill rows), then every GPU test with the
# real GGUF, then compute-sanitizer memcheck over a generate on it.
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
timeout 150 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"; tail -5 $L/prefill.log
timeout 300 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -s > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
timeout 120 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=4096, max_num_seqs=8)
outs = llm.generate([[{'role': 'user', 'content': 'What is the capital of France?'}], 'Once upon a time', 'word ' * 700] * 3,
                    SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', repr(outs[0].text))" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -3 $L/memcheck.log
tar -czf $OUT/logs.tgz -C $OUT logs data
