#!/usr/bin/env bash
# Session 32, the measuring call (after two that staged the GGUF's first parts), on 2c255e7: the
# model tests on the real GGUF (the kernels are unchanged since f34927b's full suite); memcheck over
# a generate whose prompts take the split warp-specialized kernel, the plain one and a short one,
# and whose last layers run at the last tokens alone; then prefill before (747ab8b) and after,
# interleaved, two rounds with the order flipped.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD)" > $L/tree.txt
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_model_cuda.py tests/gpu/test_gpu_lease.py -p no:cacheprovider -s > $L/gpu-tests.log 2>&1
echo "tests rc=$?"; grep -E "FAILED|passed|failed|same_as_eager" $L/gpu-tests.log | tail -6
timeout 100 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=12288, max_num_seqs=4, max_num_batched_tokens=8192)
outs = llm.generate(['word ' * 2990, 'Once upon a time', 'word ' * 700, 'word ' * 4990],
                    SamplingParams(max_tokens=4, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -2 $L/memcheck.log
B="prefill@--no-store,--no-torch,--reps,5,--shapes,1x4000,1x8000,64x1000"
OUT=$L/cmp timeout 220 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -5 $L/prefill-ab.log
grep -h "TTFT" $L/cmp/*/*.log | head -12
tar -czf $OUT/logs.tgz -C $OUT logs
