#!/usr/bin/env bash
# Session 44, on the H200 holding the checked GGUF (call 4): the other benches on the real model
# (nano-bench, batch-longtail, the Llama-3.2-1B shape on dummy weights), each with --preflight,
# warmed up, our prefix cache cold for every measured repetition; then correctness on the real
# model: every GPU test and a compute-sanitizer memcheck run.
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || { ls -la /tmp/model; echo "GGUF incomplete"; exit 3; }
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
OUT=$OUT/suite3 SUITE_ONLY="bench-nano-bench bench-batch-longtail bench-nano-bench-llama-1b" \
  timeout 250 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/suite3.log 2>&1
echo "suite3 rc=$?"; tail -n 8 $L/suite3.log
OUT=$OUT/suite4 SUITE_ONLY="tests memcheck" timeout 300 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/suite4.log 2>&1
echo "suite4 rc=$?"; tail -n 4 $L/suite4.log
