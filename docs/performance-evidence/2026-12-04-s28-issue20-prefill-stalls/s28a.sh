#!/usr/bin/env bash
# Session 28, call 1 (38028d8): where the wgmma prefill attention kernel's warps wait, per SASS
# instruction (Nsight Compute source counters, one layer's launch at 1x4000 and 1x8000); then
# prefill.py --timeline (feedc0f, first GPU run) and the prefill kernel and plan tests (38028d8).
source benchmarks/device_env.sh
for shape in 1x4000 1x8000; do
  timeout 150 ncu --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    -k regex:attn_prefill_wg -s 5 -c 1 -o $L/prof-$shape python3 benchmarks/prefill.py --no-store --no-torch --shapes $shape --reps 1 \
    > $L/ncu-$shape.log 2>&1; echo "ncu $shape rc=$?"
  ncu -i $L/prof-$shape.ncu-rep --page source --csv --print-source sass > $L/sass-$shape.csv 2> $L/sass-$shape.err; echo "sass rc=$? $(wc -l < $L/sass-$shape.csv)"
  ncu -i $L/prof-$shape.ncu-rep --page details > $L/details-$shape.txt 2>&1
done
timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --timeline --shapes 1x4000 64x1000 > $L/timeline.log 2>&1; echo "timeline rc=$?"; tail -30 $L/timeline.log
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k prefill -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
tar -czf $OUT/logs.tgz -C $OUT logs
