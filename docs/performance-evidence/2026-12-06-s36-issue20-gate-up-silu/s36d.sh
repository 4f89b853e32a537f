#!/usr/bin/env bash
# Session 36, dummy weights (third version: the loaders arrive through cp.async.mbarrier.arrive.noinc; one m64n256k16 over gate and up). A prefill's gate|up projection and SiLU-and-mul in one kernel of
# our own (cuda_src/gate_up_silu.cu, prefill_gate_up_silu) against cuBLAS then silu_and_mul.
# 1. Its kernel tests and the linear-layer ones; the model-level test (first-token logits of
# 1,500-, 3,000- and 7,000-token prompts, fused against not). 2. prefill.py with the knob off,
# on, on, off: wall time and kernel profile of 1 x 4,000, 1 x 8,000 and 64 x 1,000, warmed on
# those shapes, fresh prompts, prefix cache emptied each repetition.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_model_cuda.py \
  -k "gate_up_silu" > $L/tests.log 2>&1
echo "tests rc=$?"; grep -E "passed|failed|Error" $L/tests.log | tail -6
n=0
for on in 0 1 1 0; do
  n=$((n+1))
  ROADGATE_PREFILL_GATE_UP_SILU=$on timeout 90 python3 benchmarks/prefill.py --no-store --no-torch --profile \
    --reps 5 > $L/prefill-$n-fused$on.log 2>&1
  echo "prefill $n fused=$on rc=$?"
  grep -E "^prefill |attn_prefill|gate_up_silu|silu_and_mul|nvjet|ms of GPU" $L/prefill-$n-fused$on.log | head -40
done
tar -czf $OUT/logs.tgz -C $OUT logs
