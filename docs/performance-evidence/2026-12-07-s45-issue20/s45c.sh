#!/usr/bin/env bash
# Session 45, any card: compute-sanitizer memcheck of the packed SiLU epilogue with the tiles
# chosen per step (the default now: cooperative at 8,192 rows), on dummy weights with token-id
# prompts (s45a's memcheck step sent text, which dummy weights cannot encode): a 6,000-token
# prompt (the 8,192-row prefill graph) and short ones, graphs on, then decode steps.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
timeout 400 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('dummy:smollm2-135m', backend='cuda', kv_cache_tokens=16384, max_num_seqs=8)
print('silu width', llm.config.prefill_silu_width)
prompts = [[(31 * j) % 20000 + 30 for j in range(6000)]] + [[(7 * j + n) % 20000 + 30 for j in range(40 + n)] for n in range(5)]
outs = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "silu width|memcheck run done|ERROR SUMMARY|Error" $L/memcheck.log | head
