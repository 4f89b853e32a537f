#!/usr/bin/env bash
# Session 45, any card: the fused SiLU epilogue in packed 16-bit conversions (three a pair of
# outputs where one at a time took seven), ex2.approx.ftz (no range test) and, for f16 too, the
# fast reciprocal (packed-epilogue.diff, in the tree that travels). Call 12 (s44e.sh) took the
# fused gate|up from 69.7 to 65.4 us at 8,192 rows with the fast reciprocal alone; call 11's
# no-SiLU diagnostic ran 50.7. Here: the tests of every kernel that uses the SiLU, then the
# kernel bench (graphs, events, medians after warm-up), prefill.py (ours, warmed up on the
# measured shapes, prefix cache emptied before every repetition) and the batch-1 decode step,
# with the diff and then reverted, on one machine; then, with it again, every GPU test and a
# compute-sanitizer memcheck run on dummy weights (the GGUF is not carried). One tarball back.
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s45-issue20
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
run_b() {  # $1: label
  timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-$1.log 2>&1; echo "bench $1 rc=$?"; grep gate_up $L/kernel-bench-$1.log
  timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 > $L/prefill-$1.log 2>&1
  echo "prefill $1 rc=$?"; grep -E "^prefill " $L/prefill-$1.log
  timeout 60 python3 benchmarks/decode_step.py --no-store --batch 1 --context 256 > $L/decode-b1-$1.log 2>&1
  echo "decode b1 $1 rc=$?"; grep -E "^decode step" $L/decode-b1-$1.log
}
timeout 200 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_kernels.py -k "silu or gemm_tma or gemv" > $L/tests-packed.log 2>&1
tests_rc=$?; echo "silu tests rc=$tests_rc"; tail -n 1 $L/tests-packed.log; grep -E "^(E |FAILED)" $L/tests-packed.log | head -10
run_b packed
patch -R -p1 < $E/packed-epilogue.diff > /dev/null || exit 5
run_b fast-rcp
patch -p1 < $E/packed-epilogue.diff > /dev/null || exit 6
if [ $tests_rc = 0 ]; then
  OUT=$OUT/suite SUITE_ONLY="tests memcheck" timeout 280 bash benchmarks/gpu_suite.sh dummy:smollm2-135m > $L/suite.log 2>&1
  echo "suite rc=$?"; tail -n 4 $L/suite.log
fi
pack_out
