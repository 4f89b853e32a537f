#!/usr/bin/env bash
# Session 43, call 1: the GGUF's first quarter (.model/part-00); then, on any card, the GPU tests
# that have not run yet (plain torch's prefill as a CUDA graph, the host waits CUPTI counts, the
# copy ceiling). On an H200: the suite's steps that use dummy weights and feed roadmap rows
# (decode-step, decode-step-b1, prefill, step-trace). On an H100 (not the rows' card): prefill.py
# and step_trace.py unstored, then session 42's shared-qkv.diff applied: its GPU tests and
# decode_step.py's memory at 8,192 and 16,384 tokens a step. Each bench warms up on its measured
# shapes, empties our prefix cache before every measured repetition; the host runs nothing else.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 150 python3 -m pytest -m gpu -q -rs -p no:cacheprovider \
  tests/gpu/test_prefill_bench.py tests/gpu/test_host_waits.py tests/gpu/test_copy_ceiling.py > $L/tests-new.log 2>&1
echo "new tests rc=$?"; tail -n 1 $L/tests-new.log; grep -E "^(E |FAILED)" $L/tests-new.log | head -20
if grep -q H200 $L/gpu.txt; then
  OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
    timeout 400 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
  echo "suite1 rc=$?"; tail -n 6 $L/suite1.log; ls /tmp/model; exit 0
fi
timeout 120 python3 benchmarks/prefill.py --no-store > $L/prefill.log 2>&1; echo "prefill rc=$?"; tail -n 4 $L/prefill.log
timeout 60 python3 benchmarks/step_trace.py --no-store > $L/step-trace.log 2>&1; echo "step-trace rc=$?"; tail -n 3 $L/step-trace.log
qkv=docs/performance-evidence/2026-12-07-s42-issue20-h100-pp4-and-checks/shared-qkv.diff
git apply $qkv || patch -p1 < $qkv || exit 4
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code-shared-qkv.sha256
timeout 150 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu/test_model_cuda.py > $L/tests-qkv.log 2>&1
echo "shared-qkv gpu tests rc=$?"; tail -n 1 $L/tests-qkv.log; grep -E "^(E |FAILED)" $L/tests-qkv.log | head -10
for budget in 8192 16384; do
  ROADGATE_MAX_NUM_BATCHED_TOKENS=$budget timeout 100 python3 benchmarks/decode_step.py --no-store > $L/decode-step-qkv-$budget.log 2>&1
  echo "shared-qkv budget $budget rc=$?"; grep -E "^decode step|GPU memory" $L/decode-step-qkv-$budget.log
done
