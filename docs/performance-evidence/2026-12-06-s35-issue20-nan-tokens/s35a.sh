#!/usr/bin/env bash
# Session 35, lease 1, call 3 (after two calls that staged the GGUF's first parts; the third part came with this call).
# 1. The GPU suite on the real GGUF: session 34's 128-key tall tiles as the default (never run
#    at model level) and this session's NO_TOKEN tests; 2. memcheck over generates whose
#    prefill takes the 128-key kernel (prompts past 2,048 tokens), graphs on; 3. racecheck and
#    synccheck over the 128-key kernel's tests.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
timeout 300 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/gpu-tests-all.log 2>&1
echo "suite rc=$?"; tail -1 $L/gpu-tests-all.log; grep -E "^FAILED|^ERROR" $L/gpu-tests-all.log | cut -c1-250 | head -8
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', dtype='bfloat16', kv_cache_tokens=1 << 15, max_num_seqs=8,
          max_num_batched_tokens=8192, max_model_len=8192)
p = SamplingParams(max_tokens=4, temperature=0)
prompt = lambda n: [(29 * n + 7 * j) % 20000 + 30 for j in range(n)]
outs = [llm.generate([prompt(n)], p)[0] for n in (70, 2100, 4000, 7000)]
outs += llm.generate([prompt(3000), prompt(3001)], p)
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -2 $L/memcheck.log
K="test_prefill_attention_at_every_tile_height and wgmma-ws-192-k128 and bfloat16 and 9-3"
for tool in racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py \
    -k "$K" -p no:cacheprovider > $L/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "passed|failed|ERROR SUMMARY|hazard" $L/$tool.log | head -4
done
tar -czf $OUT/logs.tgz -C $OUT logs
