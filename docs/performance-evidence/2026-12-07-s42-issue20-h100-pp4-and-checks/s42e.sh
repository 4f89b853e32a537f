#!/usr/bin/env bash
# Session 42, call 6: the persistent tall-tile prefill kernel (attn_prefill_ws128_*_persistent,
# uncommitted over .whl/HEAD): 1. its tests and the tall tiles' (short timeout: a hang costs
# this step only); 2. only if they pass: prefill.py A/B, B = one block a tile
# (prefill_persistent=0): both engines warmed up on each shape, repetitions alternating on the
# same fresh prompts, prefix caches emptied every repetition; 3. memcheck and racecheck
# on the persistent test's first case.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py \
  -k "persistent or at_every_tile_height or split_tiles_merge or block_sizes" > $L/tests-persistent.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -n 2 $L/tests-persistent.log; [ $rc -ne 0 ] && grep -E "^E |Error|FAILED" $L/tests-persistent.log | head -20
if [ $rc -eq 0 ]; then
  timeout 150 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --ab prefill_persistent=0 \
    > $L/prefill-ab-persistent.log 2>&1
  echo "prefill A/B rc=$?"; grep -E "^ +[0-9]+x[0-9]+ |attn_prefill" $L/prefill-ab-persistent.log | head -24; tail -n 1 $L/prefill-ab-persistent.log
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool $tool --print-limit 10 python3 -m pytest -m gpu -x -q -p no:cacheprovider \
      tests/gpu/test_kernels.py -k "persistent and bfloat16 and 1000" > $L/$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" $L/$tool.log | tail -3
  done
fi
