#!/usr/bin/env bash
# Session 34, lease 4, call 3 (after two calls that staged the GGUF's first parts).
# The last layer's decode kernel in a lone prompt's whole graph copied the step's keys before
# its programmatic wait. 1. The whole-graph test, now from a KV cache of NaNs, on HEAD's engine
# and kernels (expected to fail) and on the fix; 2. the whole GPU suite on the fix; 3. the
# run-to-run probe of lease 3 again; 4. memcheck over lone prompts and their decode steps.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
T=tests/gpu/test_model_cuda.py::test_one_sequence_steps_replay_whole_graphs_and_keep_outputs
old=$(mktemp -d)
tar --exclude=./.whl --exclude=./.model -cf - . | tar -C $old -xf - && cp -r .whl/base/. $old/
(cd $old && PYTHONPATH=/tmp/site:$old timeout 150 python3 -m pytest -q -m gpu "$T" -p no:cacheprovider > $L/whole-test-head.log 2>&1)
echo "HEAD's kernels rc=$?"; tail -1 $L/whole-test-head.log; grep -E "whole_prefill_graphs" $L/whole-test-head.log | cut -c1-300
timeout 120 python3 -m pytest -q -m gpu "$T" -p no:cacheprovider > $L/whole-test-fix.log 2>&1
echo "fix rc=$?"; tail -1 $L/whole-test-fix.log; grep -E "whole_prefill_graphs" $L/whole-test-fix.log | cut -c1-300
timeout 220 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/gpu-tests-all.log 2>&1
echo "suite rc=$?"; tail -1 $L/gpu-tests-all.log; grep -E "^FAILED" $L/gpu-tests-all.log | head -5
timeout 100 python3 .whl/s34_determinism.py float32 > $L/determinism-f32.log 2>&1; echo "det rc=$?"
grep -E "n=|order" $L/determinism-f32.log
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', dtype='bfloat16', kv_cache_tokens=1 << 14, max_num_seqs=8,
          max_num_batched_tokens=2048, max_model_len=4096)
p = SamplingParams(max_tokens=4, temperature=0)
outs = [llm.generate([[(29 * n + 7 * j) % 20000 + 30 for j in range(n)]], p)[0] for n in (70, 1000, 3000)]
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -2 $L/memcheck.log
