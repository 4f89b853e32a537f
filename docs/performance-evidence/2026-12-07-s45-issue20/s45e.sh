#!/usr/bin/env bash
# Session 45, any card: s45a's GPU suite lost 11 tests to a broken CUDA context after a test
# failed (dummy weights, text prompts): PyCUDA warned "cuModuleUnload failed: operation not
# permitted when stream is capturing", i.e. the cyclic collector freed a dead engine inside a
# graph capture. capture() now pauses the collector (gc-pause.diff). The test that makes a
# module's cycle garbage inside a capture, with the fix, then without it (it should fail); then,
# the fix back, every GPU test and memcheck on dummy weights (the chat-prompt tests skip there
# now, 9391ca8), which s45a's suite could not finish cleanly. One tarball back.
source benchmarks/device_env.sh
E=docs/performance-evidence/2026-12-07-s45-issue20
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
T="tests/gpu/test_model_cuda.py -k dead_engines_modules"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-gc-pause.log 2>&1; echo "with the pause rc=$?"; tail -n 1 $L/test-gc-pause.log
patch -R -p1 < $E/gc-pause.diff > /dev/null || exit 5
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-no-pause.log 2>&1; echo "without rc=$?"; tail -n 1 $L/test-no-pause.log; grep -m3 -E "^E |cuModuleUnload" $L/test-no-pause.log
patch -p1 < $E/gc-pause.diff > /dev/null || exit 6
OUT=$OUT/suite SUITE_ONLY="tests memcheck" timeout 300 bash benchmarks/gpu_suite.sh dummy:smollm2-135m > $L/suite.log 2>&1
echo "suite rc=$?"; tail -n 4 $L/suite.log
pack_out
