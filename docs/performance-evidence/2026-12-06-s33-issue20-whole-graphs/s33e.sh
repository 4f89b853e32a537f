#!/usr/bin/env bash
# Session 33, lease 4 (no GGUF needed): an experiment, short queries' 64-row tiles in the
# warp-specialized kernel (ROADGATE_PREFILL_WS_SHORT=1: a loading warpgroup and one computing one,
# two blocks an SM) against attn_prefill_wgmma's (four one-warpgroup blocks an SM). The prefill
# kernel tests first (the new kernel at every case), then prefill.py --profile for both settings,
# alternating, order flipped: attention's kernel time by shape.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider -x > $L/kernel-tests.log 2>&1
echo "kernel tests rc=$?"; tail -1 $L/kernel-tests.log; grep -E "FAILED|Error" $L/kernel-tests.log | head -5
S="64x1000 16x500 8x2000 1x1000 1x2000"
run=0
for ws in 0 1 1 0; do
  run=$((run + 1)); log=$L/prefill-$run-ws$ws.log
  ROADGATE_PREFILL_WS_SHORT=$ws timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 --shapes $S > $log 2>&1
  echo "run $run ws_short=$ws rc=$?"; grep -E "^prefill|attn_prefill" $log
done
tar -czf $OUT/logs.tgz -C $OUT logs
