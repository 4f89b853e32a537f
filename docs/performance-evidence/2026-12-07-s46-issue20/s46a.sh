#!/usr/bin/env bash
# Session 46, call 1, carrying .whl and the GGUF's first quarter (.model/part-00; the device
# refused a tree with two quarters and the wheels: over 64 MiB as it counts). On an H200: the
# suite's steps on dummy weights that feed roadmap rows (decode-step, decode-step-b1, prefill,
# step-trace), each warmed up on its measured shapes, our prefix cache emptied before every
# measured repetition, nothing else on the host. On an H100 (not the rows' card): session 45's
# s45e.sh instead (the collector test with and without the pause, then every GPU test and
# memcheck on dummy weights).
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
grep -q H200 $L/gpu.txt || exec bash docs/performance-evidence/2026-12-07-s45-issue20/s45e.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
  timeout 500 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
echo "suite1 rc=$?"; tail -n 8 $L/suite1.log; ls /tmp/model
pack_out
