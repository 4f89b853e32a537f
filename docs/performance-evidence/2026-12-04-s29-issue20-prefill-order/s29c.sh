#!/usr/bin/env bash
# Session 29, call 3: the 128-row wgmma prefill kernel on 128-key tiles (P V waited within the
# tile: P's registers and the next S's do not fit together): the prefill kernel tests, then
# prefill attention against HEAD (base), the order flipped between rounds.
source benchmarks/device_env.sh
timeout 200 python3 -m pytest -q -x -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -3 $L/tests.log
B="prefill@--no-store,--no-torch,--profile,--reps,5,--shapes,1x4000,1x8000,8x2000"
OUT=$L/cmp timeout 240 bash benchmarks/compare_trees.sh .whl/base . "$B" "$B"; echo "cmp rc=$?"
for f in $L/cmp/*/*.log; do echo "$f: $(grep -E 'attn_prefill' $f | awk '{printf "%s %s | ", $3, $5}')"; grep -h "^prefill" $f; done
tar -czf $OUT/logs.tgz -C $OUT logs
