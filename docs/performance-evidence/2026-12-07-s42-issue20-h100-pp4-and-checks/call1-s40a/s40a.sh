#!/usr/bin/env bash
# Session 40, call 1. On an H200 first: the prefill rows, stored for publishing (prefill.py on
# the tree, default prefill_gemm_tma=mlp with the ping-pong silu tiles; the engine and plain
# torch in one process, both warmed up on each shape, fresh prompts and our prefix cache
# emptied every repetition). Then, on either card, session 39's unrun kernel
# gemm_tma_silu_pp4 (the ping-pong silu tiles in clusters of 2 x 2 sharing x rows):
# 1. its tests alone, short timeout (a hang costs this step only); 2. kernel_bench's prefill
# GEMMs (the three silu tiles side by side); 3. only if 1 passed: the engine's logits with it,
# and prefill.py --ab prefill_silu_x_share=2 (both engines warmed up on each shape,
# repetitions alternating on the same fresh prompts, prefix caches emptied every repetition).
# On an H100, last: Nsight Compute on the four silu GEMMs (dbg/silu_gemms.py).
# Prepared in .whl/: the wheels, HEAD, DIFF, this script and dbg/silu_gemms.py.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
if grep -q H200 $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 240 python3 benchmarks/prefill.py --profile > $L/prefill-publish.log 2>&1
  echo "prefill rc=$?"; grep -E "^prefill|^ +[0-9]+x[0-9]+" $L/prefill-publish.log | head -20
fi
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 70 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py \
  -k "(silu_rounds and shared_x) or clusters_of_four or refuses_a_width" > $L/tests-pp4.log 2>&1
pp4=$?; echo "pp4 tests rc=$pp4"; tail -n 2 $L/tests-pp4.log; [ $pp4 -ne 0 ] && tail -n 30 $L/tests-pp4.log
timeout 45 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -n 13 $L/prefill-gemm.log
if [ $pp4 -eq 0 ]; then
  timeout 60 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_model_cuda.py \
    -k "gemm_tma_keep" > $L/tests-engine.log 2>&1
  echo "engine tests rc=$?"; tail -n 2 $L/tests-engine.log
  timeout 130 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --ab prefill_silu_x_share=2 \
    > $L/prefill-ab-x2.log 2>&1
  echo "prefill A/B x_share rc=$?"; grep -E "^ +[0-9]+x[0-9]+ " $L/prefill-ab-x2.log; tail -n 1 $L/prefill-ab-x2.log
fi
if ! grep -q H200 $L/gpu.txt; then
  M='gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__m_xbar2l1tex_read_bytes.sum,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed'
  timeout 150 ncu --metrics "$M" -k regex:"gemm_tma_silu|nvjet|silu_and_mul" -s 5 -c 10 python3 .whl/dbg/silu_gemms.py \
    > $L/ncu-silu.log 2>&1
  echo "ncu rc=$?"; grep -E "gemm_tma|nvjet|silu_and_mul|duration|gmma|lts__|xbar|dram|sm__throughput" $L/ncu-silu.log | head -70
fi
