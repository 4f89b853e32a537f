#!/usr/bin/env bash
# Session 39, call 2: gemm_tma's fused gate|up in ping-pong tiles (128 W rows, each multiplying
# warpgroup its own tile, one's epilogue while the other multiplies), the default for silu;
# gemm_tma for the MLP's gate|up with SiLU-and-mul only ("mlp"), the plain projections staying
# in cuBLAS, after call 1 measured the plain ones slower than cuBLAS at every shape and the
# fused gate|up faster at 4,096 and 8,192 rows; and SiLU in the fast exponential and reciprocal
# (common.cuh's silu_times, which gemm_tma's fused epilogue, silu_and_mul and gemv_silu share).
# 1. the fused gate|up tests at both widths, alone and first: if the ping-pong kernel fails or
#    hangs, this script switches the device's copy of the engine to the cooperative tiles (and
#    says so) so that the rest still measures something;
# 2. the other gemm_tma and SiLU tests; 3. kernel_bench's prefill GEMMs (both silu widths);
# 4. prefill.py --ab prefill_gemm_tma=mlp (against off; call 1 measured all): both engines warmed up on each
#    shape, repetitions alternating on the same fresh prompts, each engine's prefix cache
#    emptied before every repetition.
# 5. compute-sanitizer synccheck and racecheck over the ping-pong test at one shape.
# Prepared in .whl/ as s39a.sh says (no dbg/ needed).
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py -k "silu_rounds" \
  > $L/tests-silu.log 2>&1
rc=$?; echo "silu tests rc=$rc"; tail -3 $L/tests-silu.log
if [ $rc -ne 0 ]; then
  tail -30 $L/tests-silu.log
  sed -i 's/width = width or _TMA_PINGPONG_COLS/width = width or _TMA_COLS/' engine/ops/cuda_ops.py
  echo "FALLBACK: the rest runs with the cooperative silu tiles (engine/ops/cuda_ops.py edited here)" | tee -a $L/tree.txt
fi
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_model_cuda.py \
  tests/gpu/test_prefill_bench.py -k "(gemm_tma or alternately or silu) and not silu_rounds" > $L/tests.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -3 $L/tests.log
if [ $rc -ne 0 ]; then tail -40 $L/tests.log; exit 0; fi
timeout 60 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -13 $L/prefill-gemm.log
for scope in mlp; do
  timeout 150 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --ab prefill_gemm_tma=$scope \
    > $L/prefill-ab-$scope.log 2>&1
  echo "prefill A/B $scope rc=$?"
  grep -E "^prefill |ms of GPU" $L/prefill-ab-$scope.log
  tail -1 $L/prefill-ab-$scope.log
done
# 5. the ping-pong kernel under compute-sanitizer (its turns are named barriers; its stages mbarriers)
for tool in synccheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 10 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/gpu/test_kernels.py -k "silu_rounds and dtype0 and 1500" > $L/$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "passed|failed|ERROR SUMMARY|hazard" $L/$tool.log | head -4
done
