#!/usr/bin/env bash
# Session 36, dummy weights. The tall tiles in FA3's shape (prefill_ws_tall = 2: two computing
# warpgroups of 64 rows at 224 registers, S of a K/V tile issued beside P V of the one before),
# with and without the two taking turns at issuing (ping-pong; .whl/nopp holds the kernel
# source without), against the default (three at 144, each tile's P V waited for).
# Call 1 (ORDER="3 pp nopp"): the prefill kernel tests of the tree (ping-pong), then
# prefill.py once a variant; call 2 (ORDER="nopp pp 3"): the same order reversed. prefill.py:
# wall time and kernel profile of 1 x 4,000, 1 x 8,000 and 64 x 1,000, warmed on those
# shapes, fresh prompts, prefix cache emptied each repetition.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
if [ -n "$TESTS" ]; then
  timeout 250 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/gpu/test_kernels.py \
    -k "consumer or tall or at_every_tile_height or block_sizes or split_tiles" > $L/tests.log 2>&1
  echo "tests rc=$?"; tail -4 $L/tests.log
fi
rm -rf /tmp/nopp && mkdir -p /tmp/nopp && tar --exclude=./.whl -cf - . | tar -C /tmp/nopp -xf - &&
  cp .whl/nopp/attention_prefill.cu /tmp/nopp/cuda_src/
for v in $ORDER; do
  case $v in 3) dir=.; tall=3;; pp) dir=.; tall=2;; nopp) dir=/tmp/nopp; tall=2;; esac
  ROADGATE_PREFILL_WS_TALL=$tall timeout 100 python3 $dir/benchmarks/prefill.py --no-store --no-torch --profile \
    --reps 5 > $L/prefill-$v.log 2>&1
  echo "prefill $v rc=$?"
  grep -E "^prefill |attn_prefill" $L/prefill-$v.log | head -12
done
tar -czf $OUT/logs.tgz -C $OUT logs
