#!/usr/bin/env bash
# Session 46: call 1 ran the collector test without the pause and it passed, so it did not
# reach what it meant to: torch.cuda.graph's own gc.collect() leaves the test's cycle in the
# oldest generation, and 100 throwaway allocations set off no full collection. The test now
# allocates until one starts (or the heap's size) and asserts that no collection starts while
# the stream captures. With the pause, then without it (gc-pause.diff reverted: it should fail).
# Then, the pause back, every GPU test and memcheck on dummy weights: 2cbaf08 removed the
# x-sharing gemm_tma variant, and the remaining gemm_tma kernels' rank arithmetic went back to
# what sessions 37-39 ran (their SASS changed there alone). One tarball back.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
D=docs/performance-evidence/2026-12-07-s45-issue20/gc-pause.diff
T="tests/gpu/test_model_cuda.py -k dead_engines_modules"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-gc-pause.log 2>&1
echo "with the pause rc=$?"; tail -n 1 $L/test-gc-pause.log
patch -R -p1 < $D > /dev/null || exit 5
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-no-pause.log 2>&1
echo "without rc=$?"; tail -n 1 $L/test-no-pause.log; grep -m4 -E "^E |cuModuleUnload|capturing" $L/test-no-pause.log
patch -p1 < $D > /dev/null || exit 6
OUT=$OUT/suite SUITE_ONLY="tests memcheck" timeout 330 bash benchmarks/gpu_suite.sh dummy:smollm2-135m > $L/suite.log 2>&1
echo "suite rc=$?"; tail -n 4 $L/suite.log
pack_out
