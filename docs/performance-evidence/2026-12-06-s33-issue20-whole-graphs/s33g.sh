#!/usr/bin/env bash
# Session 33, lease 5, call 3 (after two calls that staged the GGUF's first parts): a lone prompt's
# 64-row prefill tiles in the warp-specialized kernel where its blocks fit in one wave. The whole GPU
# suite on the real GGUF; memcheck over lone short prompts (the new kernel, split and not); then
# before (HEAD's engine and cuda_src) and after, interleaved, order flipped.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
timeout 240 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x > $L/gpu-tests-all.log 2>&1
echo "suite rc=$?"; tail -1 $L/gpu-tests-all.log; grep -E "FAILED|Error|whole_prefill" $L/gpu-tests-all.log | head -5
timeout 120 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', dtype='bfloat16', kv_cache_tokens=1 << 14, max_num_seqs=8,
          max_num_batched_tokens=2048, max_model_len=4096)
p = SamplingParams(max_tokens=4, temperature=0)
outs = [llm.generate([[(29 * n + 7 * j) % 20000 + 30 for j in range(n)]], p)[0] for n in (70, 600, 1000, 1500, 3000)]
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -2 $L/memcheck.log
B="prefill@--no-store,--no-torch,--reps,9,--profile,--shapes,1x600,1x1000,1x1500,64x1000"
OUT=$L/cmp timeout 200 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -5 $L/prefill-ab.log
for f in $L/cmp/*/*prefill.log; do echo "$f"; grep -E "^prefill|attn_prefill" $f; done
tar -czf $OUT/logs.tgz -C $OUT logs
