#!/usr/bin/env bash
# Session 35, lease 3, one call, dummy weights (the device time left allowed one short call).
# 1. The new start-up test (a KV cache shorter than the step budget, one sequence) on this
# tree; 2. the same test with prefill_graphs.py as committed before the fix (b4b8eef),
# expected to fail; 3. the batch-1 decode step that failed at start-up in lease 2.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
T=tests/gpu/test_model_cuda.py::test_a_kv_cache_shorter_than_the_step_budget_starts_and_keeps_outputs
timeout 100 python3 -m pytest -q -m gpu "$T" -p no:cacheprovider -s > $L/short-kv-fix.log 2>&1
echo "fix rc=$?"; grep -E "short_kv|passed|failed" $L/short-kv-fix.log | cut -c1-300
timeout 40 python3 benchmarks/decode_step.py --no-store --batch 1 --context 256 > $L/decode-b1.log 2>&1
echo "decode b1 rc=$?"; grep -E "median" $L/decode-b1.log
old=$(mktemp -d)
tar --exclude=./.whl --exclude=./.model -cf - . | tar -C $old -xf - && cp .whl/prefill_graphs_b4b8eef.py $old/engine/prefill_graphs.py
(cd $old && PYTHONPATH=/tmp/site:$old timeout 50 python3 -m pytest -q -m gpu "$T" -p no:cacheprovider -s > $L/short-kv-old.log 2>&1)
echo "old rc=$?"; grep -E "short_kv|passed|failed|Error" $L/short-kv-old.log | cut -c1-300 | head -5
tar -czf $OUT/logs.tgz -C $OUT logs
