#!/usr/bin/env bash
# Session 33, call 4 (machine warm): before (e057200's engine and cuda_src) and after (one
# sequence's prefill step as one whole graph), interleaved, order flipped; the decode step and
# its memory report beside (the whole graphs' pool). On an H200, prefill.py --profile recorded.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes" > $L/tree.txt; cp .whl/DIFF $L/
B="prefill@--no-store,--no-torch,--reps,7,--shapes,1x4000,1x8000,64x1000,1x2100,1x3000"
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B" "decode-step@--no-store" > $L/prefill-ab.log 2>&1
echo "ab rc=$?"; tail -8 $L/prefill-ab.log
grep -h "GPU memory" $L/cmp/*/*.log
if grep -q "H200" $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 200 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
  grep -E "^prefill|attn_|recorded|ours:" $L/prefill.log
  tar -czf $OUT/data.tgz -C $OUT data
fi
tar -czf $OUT/logs.tgz -C $OUT logs
