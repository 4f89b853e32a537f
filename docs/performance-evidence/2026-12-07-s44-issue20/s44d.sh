#!/usr/bin/env bash
# Session 44, any card: is the fused gate|up's mainloop short of loads in flight? The resident-x
# tiles (call 3) halved the bytes into each SM and ran slower with 3 stages against 5. Here the
# kernel bench's prefill GEMMs (CUDA graphs, events, medians after warm-up) at the committed
# tree, then with six-stages.diff (gemm_tma's shared memory 208 -> 224 KB: ping-pong 5 -> 6
# stages, cooperative silu 3 -> 4), its gemm_tma tests, the bench again and prefill.py (ours
# only, warmed up on the measured shapes, prefix cache emptied before every repetition), then
# reverted: the bench and prefill.py once more. Sequential processes on one machine, not one
# alternating A/B: a first look. Last, a diagnostic: no-silu-diagnostic.diff multiplies gate by
# up without the SiLU (wrong outputs, the same loads, multiplies and stores): the bench says
# how much of the gap to cuBLAS the SiLU's arithmetic is.
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s44-issue20
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-5.log 2>&1; echo "bench rc=$?"; grep gate_up $L/kernel-bench-5.log
git apply $E/six-stages.diff || patch -p1 < $E/six-stages.diff || exit 4
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code-six-stages.sha256
timeout 150 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_kernels.py -k gemm_tma > $L/tests-6.log 2>&1
echo "gemm_tma tests (6 stages) rc=$?"; tail -n 1 $L/tests-6.log; grep -E "^(E |FAILED)" $L/tests-6.log | head -10
for i in 1 2; do
  timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-6-$i.log 2>&1; echo "bench 6 rc=$?"; grep -E "gate_up|qkv \(8192|down \(8192" $L/kernel-bench-6-$i.log
done
timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 --shapes 64x1000 1x8000 > $L/prefill-6.log 2>&1
echo "prefill 6 rc=$?"; grep -E "^prefill " $L/prefill-6.log
git apply -R $E/six-stages.diff || patch -R -p1 < $E/six-stages.diff || exit 5
timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-5b.log 2>&1; echo "bench 5 again rc=$?"; grep gate_up $L/kernel-bench-5b.log
timeout 100 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 --shapes 64x1000 1x8000 > $L/prefill-5.log 2>&1
echo "prefill 5 rc=$?"; grep -E "^prefill " $L/prefill-5.log
git apply $E/no-silu-diagnostic.diff || patch -p1 < $E/no-silu-diagnostic.diff || exit 6
timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-nosilu.log 2>&1; echo "bench no-silu rc=$?"; grep gate_up $L/kernel-bench-nosilu.log
