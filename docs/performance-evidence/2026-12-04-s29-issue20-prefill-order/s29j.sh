#!/usr/bin/env bash
# Session 29, call 14: where the warp-specialized kernel's warps wait (Nsight Compute source counters,
# one layer's launch of 1 x 4,000), for the next session.
source benchmarks/device_env.sh
timeout 100 ncu --section SourceCounters --section WarpStateStats --section SpeedOfLight -k regex:attn_prefill_ws -s 5 -c 1 -o $L/prof-1x4000 \
  python3 benchmarks/prefill.py --no-store --no-torch --shapes 1x4000 --reps 1 > $L/ncu-1x4000.log 2>&1; echo "ncu rc=$?"
ncu -i $L/prof-1x4000.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $L/sass-1x4000.csv.gz
ncu -i $L/prof-1x4000.ncu-rep --page details > $L/details-1x4000.txt 2>&1; rm -f $L/prof-1x4000.ncu-rep
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issued Warp" $L/details-1x4000.txt | head
tar -czf $OUT/logs.tgz -C $OUT logs
