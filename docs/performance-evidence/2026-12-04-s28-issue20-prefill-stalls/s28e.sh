#!/usr/bin/env bash
# Session 28, call 8 (09f2c88, the session's final engine; after three calls that staged the GGUF):
# the GPU suite with the real model; memcheck over a generate whose ~1,900-token prompt takes the
# split prefill kernel; the published prefill runs (store in $OUT/data); then where the new
# kernel's warps wait (Nsight Compute source counters, one layer's launch at 1x4000).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree 09f2c88" > $L/tree.txt
timeout 270 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -4
timeout 90 compute-sanitizer --tool memcheck --print-limit 20 python3 -c "
from engine import LLM, SamplingParams
llm = LLM('/tmp/model/smollm2.gguf', backend='cuda', kv_cache_tokens=8192, max_num_seqs=4)
outs = llm.generate(['word ' * 1900, 'Once upon a time', 'word ' * 700],
                    SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=1))
print('memcheck run done:', [len(o.token_ids) for o in outs])" > $L/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -2 $L/memcheck.log
ROADGATE_DATA_DIR=$OUT/data timeout 150 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill" $L/prefill.log; tail -5 $L/prefill.log
tar -czf $OUT/data.tgz -C $OUT data
timeout 70 ncu --section SourceCounters --section WarpStateStats -k regex:attn_prefill_wg -s 5 -c 1 -o $L/prof-1x4000 \
  python3 benchmarks/prefill.py --no-store --no-torch --shapes 1x4000 --reps 1 > $L/ncu-1x4000.log 2>&1; echo "ncu rc=$?"
ncu -i $L/prof-1x4000.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $L/sass-1x4000.csv.gz
ncu -i $L/prof-1x4000.ncu-rep --page details > $L/details-1x4000.txt 2>&1; rm -f $L/prof-1x4000.ncu-rep
tar -czf $OUT/logs.tgz -C $OUT logs
