#!/usr/bin/env bash
# Session 43, call 1: the GGUF's first quarter (.model/part-00), then on any card the GPU tests
# that have not run yet (plain torch's prefill as a CUDA graph, the host waits CUPTI counts, the
# copy ceiling), then the suite's steps that use dummy weights and feed roadmap rows:
# decode-step, decode-step-b1, prefill, step-trace. Each bench warms up on its measured shapes,
# empties our prefix cache before every measured repetition, and the host runs nothing else.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
ROADGATE_TEST_MODEL=dummy:smollm2-135m timeout 150 python3 -m pytest -m gpu -q -rs -p no:cacheprovider \
  tests/gpu/test_prefill_bench.py tests/gpu/test_host_waits.py tests/gpu/test_copy_ceiling.py > $L/tests-new.log 2>&1
echo "new tests rc=$?"; tail -n 1 $L/tests-new.log; grep -E "^(E |FAILED)" $L/tests-new.log | head -20
OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
  timeout 400 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
echo "suite1 rc=$?"; tail -n 6 $L/suite1.log; ls /tmp/model
