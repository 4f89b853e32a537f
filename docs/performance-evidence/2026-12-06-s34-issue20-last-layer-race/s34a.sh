#!/usr/bin/env bash
# Session 34, lease 1, call 3 (after two calls that staged the GGUF's first parts). The whole GPU
# suite on the real GGUF at session 33's last commit (5f3ca74, never run on a GPU), then the prefill
# step budget (max_num_batched_tokens) swept on 64 x 1,000 and 1 x 8,000, alternating: does a
# step whose activations fit in L2 make the memory-bound kernels cheaper than it costs the GEMMs?
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
timeout 240 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/gpu-tests-all.log 2>&1
echo "suite rc=$?"; tail -1 $L/gpu-tests-all.log; grep -E "^FAILED|Error" $L/gpu-tests-all.log | head -5
i=0
for b in 8192 4096 16384 2048 16384 4096 8192; do
  i=$((i+1))
  ROADGATE_MAX_NUM_BATCHED_TOKENS=$b timeout 90 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 \
    --profile --shapes 64x1000 1x8000 > $L/budget-$i-$b.log 2>&1
  echo "budget $b rc=$?"; grep -E "^prefill" $L/budget-$i-$b.log
done
for f in $L/budget-*.log; do echo "== $f"; grep -E "^prefill|GPU time|nvjet|attn_|rms_norm|silu|rope" $f; done
