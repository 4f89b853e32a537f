#!/usr/bin/env bash
# Session 42, not run (too little device time was left to start a machine): plain torch's prefill
# replayed as a CUDA graph (the peer at its best; apply torch-graph-peer.diff first,
# uncommitted over .whl/HEAD): its GPU test, then prefill.py --no-store with both plain-torch
# figures beside ours (each warmed up on every shape, fresh prompts every repetition, our
# prefix cache emptied before each).
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 60 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_prefill_bench.py > $L/test-prefill-bench.log 2>&1
rc=$?; echo "test rc=$rc"; tail -n 1 $L/test-prefill-bench.log; [ $rc -ne 0 ] && grep -E "^E " $L/test-prefill-bench.log | head
timeout 90 python3 benchmarks/prefill.py --no-store > $L/prefill-torch-graph.log 2>&1; echo "prefill rc=$?"; tail -n 5 $L/prefill-torch-graph.log
