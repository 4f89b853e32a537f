#!/usr/bin/env bash
# Session 33, call 3 of the second lease (after two calls that staged the GGUF's first parts):
# one sequence's prefill step as one whole CUDA graph, the split workspace now kept alive for the
# graphs that hold it. The new test, then the whole GPU suite on the real GGUF, then memcheck over
# the new test's bf16 prompts, one at a time, through the whole graphs.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:"; cat .whl/DIFF; cp .whl/DIFF $L/
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_model_cuda.py -k "whole_graphs" -p no:cacheprovider -s > $L/gpu-tests-new.log 2>&1
echo "new tests rc=$?"; grep -E "FAILED|passed|failed|whole_prefill|Error" $L/gpu-tests-new.log | tail -8
timeout 200 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x --deselect "tests/gpu/test_model_cuda.py::test_one_sequence_steps_replay_whole_graphs_and_keep_outputs" > $L/gpu-tests-all.log 2>&1
echo "suite rc=$?"; tail -1 $L/gpu-tests-all.log; grep -E "FAILED|Error" $L/gpu-tests-all.log | head -5
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', dtype='bfloat16', kv_cache_tokens=1 << 15,
          max_num_batched_tokens=4096, max_model_len=8192, max_num_seqs=16)
p = SamplingParams(max_tokens=4, temperature=0)
outs = [llm.generate([[(29 * n + 7 * j) % 20000 + 30 for j in range(n)]], p)[0] for n in (5, 600, 1025, 2100, 3000, 4000, 5000)]
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; tail -2 $L/memcheck.log
tar -czf $OUT/logs.tgz -C $OUT logs
