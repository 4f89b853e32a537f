#!/usr/bin/env bash
# Session 29, call 1: the prefill grid with each sequence's tiles in z (every sequence's longest
# tile in the first wave): the prefill kernel tests on it, then prefill attention against
# c197a37 (base), the order flipped between rounds; then 64-row against 128-row tiles at 64 x 1,000.
source benchmarks/device_env.sh
timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,5,--shapes,1x4000,1x8000,64x1000,16x500"
OUT=$L/cmp timeout 300 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B"; echo "cmp rc=$?"
for f in $L/cmp/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; echo "   $(grep -E '^ +[0-9]+x' $f | awk '{printf "%s %s | ", $1, $2}')"; done
for mt in 2 1; do ROADGATE_PREFILL_M_TILES=$mt timeout 80 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes 64x1000 > $L/m$mt.log 2>&1; echo "m$mt: $(grep -E 'attn_prefill' $L/m$mt.log | awk '{printf "%s %s | ", $3, $5}') $(grep -E '^ +64x' $L/m$mt.log)"; done
tar -czf $OUT/logs.tgz -C $OUT logs
