#!/usr/bin/env bash
# Session 28, call 9 (09f2c88, the machine of call 8, still warm): the first prefill step's host
# path, untraced (session 27's s27_host.py marks), twice; then where the new kernel's warps wait
# (Nsight Compute source counters, one layer's launch at 1x4000), with the time it needs.
source benchmarks/device_env.sh
for i in 1 2; do timeout 90 python3 .whl/s27_host.py > $L/host-$i.log 2>&1; echo "host $i rc=$?"; grep "^1x" $L/host-$i.log; done
timeout 150 ncu --section SourceCounters --section WarpStateStats -k regex:attn_prefill_wg -s 5 -c 1 -o $L/prof-1x4000 \
  python3 benchmarks/prefill.py --no-store --no-torch --shapes 1x4000 --reps 1 > $L/ncu-1x4000.log 2>&1; echo "ncu rc=$?"
ncu -i $L/prof-1x4000.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $L/sass-1x4000.csv.gz
ncu -i $L/prof-1x4000.ncu-rep --page details > $L/details-1x4000.txt 2>&1; rm -f $L/prof-1x4000.ncu-rep
tar -czf $OUT/logs.tgz -C $OUT logs
