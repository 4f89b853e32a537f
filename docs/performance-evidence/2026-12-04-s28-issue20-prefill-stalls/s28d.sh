#!/usr/bin/env bash
# Session 28, call 4: 3 K/V stages at 2 warpgroups, a tile's loads issued after the block's first
# barrier and the second barrier gone: prefill kernel tests, then attention against dc79059;
# then 1x4000 with 64-row tiles forced (is the tile-height rule still right with the faster kernel?).
source benchmarks/device_env.sh
timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,5,--shapes,1x4000,1x8000,64x1000"
OUT=$L/cmp timeout 300 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B"; echo "cmp rc=$?"
for f in $L/cmp/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; done
for mt in 1 2; do ROADGATE_PREFILL_M_TILES=$mt timeout 60 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes 1x4000 > $L/mt$mt.log 2>&1; echo "m_tiles=$mt: $(grep -E 'attn_prefill' $L/mt$mt.log | awk '{printf "%s %s | ", $3, $5}') $(grep -E '^ +1x4000' $L/mt$mt.log)"; done
rm -rf $L/cmp/trees; tar -czf $OUT/logs.tgz -C $OUT logs
