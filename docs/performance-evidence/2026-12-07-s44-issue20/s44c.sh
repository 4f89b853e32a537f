#!/usr/bin/env bash
# Session 44, any card: the fused gate|up with x's rows resident (gemm_tma_silu_rx_*), first run.
# Its kernel tests (every gemm_tma test), the kernel bench's prefill GEMMs (each tile side by side,
# CUDA graphs, events, medians after warm-up), Nsight Compute on it against the staged tiles and
# cuBLAS (bytes into the SMs, time), and, if the tests pass, the engine A/B: prefill.py with
# prefill_silu_x=resident against the default, both engines warmed up on the measured shapes,
# repetitions alternating on the same fresh prompts, our prefix caches emptied before each.
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s44-issue20
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 200 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_kernels.py -k gemm_tma > $L/tests-rx.log 2>&1
rc=$?; echo "gemm_tma tests rc=$rc"; tail -n 1 $L/tests-rx.log; grep -E "^(E |FAILED)" $L/tests-rx.log | head -20
timeout 120 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench.log 2>&1; echo "kernel_bench rc=$?"; cat $L/kernel-bench.log | tail -n 14
timeout 100 ncu --metrics gpu__time_duration.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active \
  -k 'regex:gemm_tma_silu|nvjet' -s 3 -c 3 python3 $E/dbg/silu_rx.py > $L/ncu-rx.log 2>&1
echo "ncu rc=$?"; grep -E "^  [a-z_]+|duration|xbar|lts__t|throughput|gmma" $L/ncu-rx.log
[ $rc = 0 ] || exit 0
timeout 200 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 9 --ab prefill_silu_x=resident > $L/prefill-ab.log 2>&1
echo "prefill ab rc=$?"; tail -n 12 $L/prefill-ab.log
