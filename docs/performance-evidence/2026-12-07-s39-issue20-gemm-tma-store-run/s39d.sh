#!/usr/bin/env bash
# Session 39, call 4 (if a machine comes): gemm_tma_silu_pp4, the ping-pong tiles in clusters of
# 2 x 2 sharing x rows. Its tests (every silu shape at the three tile shapes, the cluster count),
# then kernel_bench's prefill GEMMs (the three silu tile shapes side by side). Short timeouts: a
# hang in the new kernel costs its step only. Prepared in .whl/ as s39a.sh says (no dbg/ needed).
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 110 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py \
  -k "silu_rounds or clusters_of_four or refuses_a_width" > $L/tests-silu.log 2>&1
rc=$?; echo "silu tests rc=$rc"; tail -3 $L/tests-silu.log; [ $rc -ne 0 ] && tail -30 $L/tests-silu.log
timeout 50 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -13 $L/prefill-gemm.log
