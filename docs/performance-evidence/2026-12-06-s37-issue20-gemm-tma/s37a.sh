#!/usr/bin/env bash
# Session 37, dummy weights. A prefill's GEMMs fed by the TMA unit (cuda_src/gemm_tma.cu,
# prefill_gemm_tma): 1. its kernel tests and the model-level test; 2. the kernel against
# cuBLAS at prefill shapes (kernel_bench --only prefill_gemm); 3. prefill.py with the knob
# off, on, on, off (warmed on the shapes, fresh prompts, prefix cache emptied each repetition).
[ -n "$L" ] || source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/tree.txt
cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 240 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_model_cuda.py \
  -k "gemm_tma" > $L/tests.log 2>&1
rc=$?; echo "tests rc=$rc"; grep -E "passed|failed|Error|error" $L/tests.log | tail -12
if [ $rc -ne 0 ]; then tail -60 $L/tests.log; tar -czf $OUT/logs.tgz -C $OUT logs; exit 0; fi
timeout 120 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; cat $L/prefill-gemm.log | tail -15
n=0
for on in 0 1 1 0; do
  n=$((n+1))
  ROADGATE_PREFILL_GEMM_TMA=$on timeout 90 python3 benchmarks/prefill.py --no-store --no-torch --profile \
    --reps 5 > $L/prefill-$n-tma$on.log 2>&1
  echo "prefill $n tma=$on rc=$?"
  grep -E "^prefill |attn_prefill|gemm_tma|silu_and_mul|nvjet|rms_norm|ms of GPU" $L/prefill-$n-tma$on.log | head -40
done
tar -czf $OUT/logs.tgz -C $OUT logs
