#!/usr/bin/env bash
# Session 35, lease 2, one call, dummy weights. 1. What the NO_TOKEN check costs: the decode
# step at B=256 / context 1,024 and B=1 / context 256, 463b5b8 (before the sampler's NaN
# check and the embedding's clamp) against this tree, `compare_trees.sh`, two rounds each, the
# order flipped, kernel profiles. 2. Where the 128-key tall-tile kernel's warps wait, by SASS
# instruction: Nsight Compute's source counters, one launch at a 8,192-token query.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
B256="decode-step@--no-store,--batch,256,--context,1024,--profile"
B1="decode-step@--no-store,--batch,1,--context,256,--profile"
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . "$B256" "$B1" "$B256" "$B1" > $L/cmp.log 2>&1
echo "compare rc=$?"; tail -14 $L/cmp.log
grep -h -E "sample_|embed_rows" $L/cmp/*/*.log | head -16
timeout 150 ncu --section SourceCounters --section WarpStateStats -k regex:attn_prefill_ws128 -s 5 -c 1 -o $L/prof-8192 \
  python3 benchmarks/prefill.py --no-store --no-torch --shapes 1x8000 --reps 1 > $L/ncu-8192.log 2>&1; echo "ncu rc=$?"
ncu -i $L/prof-8192.ncu-rep --page source --csv --print-source sass > $L/sass-8192.csv 2> $L/sass-8192.err
echo "sass rc=$? $(wc -l < $L/sass-8192.csv)"; gzip $L/sass-8192.csv; rm -f $L/prof-8192.ncu-rep
tar -czf $OUT/logs.tgz -C $OUT logs
