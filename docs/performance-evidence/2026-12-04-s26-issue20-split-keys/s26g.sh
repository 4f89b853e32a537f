#!/usr/bin/env bash
# Session 26, call 13 (cfa58b3, the GGUF staged by calls 10-12): the whole GPU suite with the real model, and
# compute-sanitizer memcheck over a generate whose ~1,900-token prompt takes the split prefill kernel.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
cat /tmp/model/part-* > /tmp/model/smollm2.gguf; echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/model/smollm2.gguf' | sha256sum -c --quiet || exit 3
ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf timeout 320 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/gpu-suite.log 2>&1; echo "suite rc=$?"; grep -E "FAILED|ERROR|passed|failed" $L/gpu-suite.log | tail -8
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=8192, max_num_seqs=4)
outs = llm.generate(['word ' * 1900, 'Once upon a time', 'word ' * 700],
                    SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -3 $L/memcheck.log
tar -czf $OUT/logs.tgz -C $OUT logs
