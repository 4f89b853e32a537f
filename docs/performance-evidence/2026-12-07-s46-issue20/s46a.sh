#!/usr/bin/env bash
# Session 46, call 1, carrying .whl and the GGUF's first quarter (.model/part-00; the device
# refused a tree with two quarters and the wheels: over 64 MiB as it counts). On an H200: the
# suite's steps on dummy weights that feed roadmap rows (decode-step, decode-step-b1, prefill,
# step-trace), each warmed up on its measured shapes, our prefix cache emptied before every
# measured repetition, nothing else on the host. On an H100 (not the rows' card): the test of
# 8996a32's collector pause (a module's cycle made garbage inside a graph capture), with the
# pause and then without it (gc-pause.diff reverted: it should fail); call 4's real-model suite
# runs every other GPU test. Then the batch-1 decode step's time by kernel (the next lever's
# profile: its 0.60 ms step against a ~0.07 ms weight-byte floor).
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
if ! grep -q H200 $L/gpu.txt; then
  D=docs/performance-evidence/2026-12-07-s45-issue20/gc-pause.diff
  T="tests/gpu/test_model_cuda.py -k dead_engines_modules"
  timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-gc-pause.log 2>&1
  echo "with the pause rc=$?"; tail -n 1 $L/test-gc-pause.log
  patch -R -p1 < $D > /dev/null || exit 5
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider $T > $L/test-no-pause.log 2>&1
  echo "without rc=$?"; tail -n 1 $L/test-no-pause.log; grep -m3 -E "^E |cuModuleUnload" $L/test-no-pause.log
  patch -p1 < $D > /dev/null
  timeout 150 python3 benchmarks/decode_step.py --no-store --batch 1 --context 256 --profile > $L/decode-b1.log 2>&1
  echo "decode-b1 rc=$?"; tail -n 40 $L/decode-b1.log; ls /tmp/model; exit 0
fi
OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
  timeout 500 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
echo "suite1 rc=$?"; tail -n 8 $L/suite1.log; ls /tmp/model
pack_out
