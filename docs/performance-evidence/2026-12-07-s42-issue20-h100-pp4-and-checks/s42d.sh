#!/usr/bin/env bash
# Session 42, call 5 (calls 3 and 4 copied .model/part-01 and -02 to /tmp/model) on the H100 the lease gave (an H200 was asked for; the held H100 answered):
# the GGUF's last quarter, checked whole by sha256, then correctness on the real model through
# the suite's own steps: every GPU test and a compute-sanitizer memcheck run.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-03 /tmp/model/
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || { ls -la /tmp/model; echo "GGUF incomplete"; exit 3; }
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
OUT=$OUT/suite4 SUITE_ONLY="tests memcheck" timeout 560 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/suite4.log 2>&1
echo "suite4 rc=$?"; tail -n 8 $L/suite4.log
