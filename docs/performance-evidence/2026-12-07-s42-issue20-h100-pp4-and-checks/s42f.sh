#!/usr/bin/env bash
# Session 42, calls 8 to 10 (call 9 stopped at its new small case, which the plan split): the persistent tall-tile prefill kernel, now taking tiles from a queue
# (call 6's took every gridDim.x-th tile and lost 1 x 4,000 and 1 x 8,000 to the imbalance;
# uncommitted over .whl/HEAD). 1. its tests and the tall tiles' (short timeout); 2. only if
# they pass: prefill.py A/B, B = one block a tile (prefill_persistent=0), then 64 x 1,000
# with B = forced tall tiles (prefill_m_tiles=3, persistent) against its 64-row default; both
# engines warmed up on each shape, repetitions alternating on the same fresh prompts, prefix
# caches emptied every repetition; 3. memcheck, racecheck and synccheck on a persistent case.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py \
  -k "persistent or at_every_tile_height or split_tiles_merge or block_sizes" > $L/tests-persistent.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -n 2 $L/tests-persistent.log; [ $rc -ne 0 ] && grep -E "^E |Error|FAILED" $L/tests-persistent.log | head -20
if [ $rc -eq 0 ]; then
  timeout 150 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --ab prefill_persistent=0 \
    > $L/prefill-ab-persistent.log 2>&1
  echo "prefill A/B rc=$?"; grep -E "attn_prefill" $L/prefill-ab-persistent.log | head -8; tail -n 7 $L/prefill-ab-persistent.log
  timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --shapes 64x1000 \
    --ab prefill_m_tiles=3 > $L/prefill-ab-tall-64x1000.log 2>&1
  echo "64x1000 tall A/B rc=$?"; grep -E "attn_prefill" $L/prefill-ab-tall-64x1000.log | head -4; tail -n 3 $L/prefill-ab-tall-64x1000.log
  for tool in memcheck racecheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 -m pytest -m gpu -x -q -p no:cacheprovider \
      tests/gpu/test_kernels.py -k "test_persistent_prefill and dtype0 and query_lens2" > $L/$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" $L/$tool.log | tail -3
  done
fi
