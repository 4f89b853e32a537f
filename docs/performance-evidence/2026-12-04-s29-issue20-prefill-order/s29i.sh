#!/usr/bin/env bash
# Session 29, call 12 (the session's final engine; after three calls that staged the GGUF): the GPU
# suite with the real model; memcheck over a generate whose 3,000-token prompt takes the split
# warp-specialized kernel (and a 5,000-token one its plain one); the published prefill runs (store in $OUT/data).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree 687117c" > $L/tree.txt
timeout 200 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -4
timeout 80 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=12288, max_num_seqs=4, max_num_batched_tokens=8192)
outs = llm.generate(['word ' * 2990, 'Once upon a time', 'word ' * 700, 'word ' * 4990],
                    SamplingParams(max_tokens=4, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -2 $L/memcheck.log
ROADGATE_DATA_DIR=$OUT/data timeout 110 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill|attn_prefill|recorded" $L/prefill.log
tar -czf $OUT/data.tgz -C $OUT data
tar -czf $OUT/logs.tgz -C $OUT logs
