#!/usr/bin/env bash
# Session 44, any card: the SiLU's reciprocal as rcp.approx (fast-rcp.diff). Call 11's diagnostic
# put the fused gate|up at 50.7 us without the SiLU against 69.5 with it (8,192 rows): the
# epilogue is not hidden behind the other warpgroup's multiplies. __frcp_rn's called slow path
# is a branch a value, which keeps ptxas from interleaving the 64 values a thread. Here: the
# tests of every kernel that uses silu_times, the kernel bench (graphs, events, medians after
# warm-up), and prefill.py (ours, warmed up on the measured shapes, prefix cache emptied before
# every repetition) and the batch-1 decode step (gemv_silu's prologue computes the SiLU too)
# with the diff, then reverted: the same again on the same machine. One tarball comes back
# (pack_out).
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s44-issue20
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
run_b() {  # $1: label
  timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-$1.log 2>&1; echo "bench $1 rc=$?"; grep gate_up $L/kernel-bench-$1.log
  timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 > $L/prefill-$1.log 2>&1
  echo "prefill $1 rc=$?"; grep -E "^prefill " $L/prefill-$1.log
  timeout 60 python3 benchmarks/decode_step.py --no-store --batch 1 --context 256 > $L/decode-b1-$1.log 2>&1
  echo "decode b1 $1 rc=$?"; grep -E "^decode step" $L/decode-b1-$1.log
}
git apply $E/fast-rcp.diff || patch -p1 < $E/fast-rcp.diff || exit 4
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code-fast-rcp.sha256
timeout 200 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_kernels.py -k "silu or gemm_tma or gemv" > $L/tests-fast-rcp.log 2>&1
echo "silu tests rc=$?"; tail -n 1 $L/tests-fast-rcp.log; grep -E "^(E |FAILED)" $L/tests-fast-rcp.log | head -10
run_b fast-rcp
patch -R -p1 < $E/fast-rcp.diff > /dev/null || exit 5
run_b frcp-rn
pack_out
