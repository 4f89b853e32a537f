#!/usr/bin/env bash
# Session 44, on the H200 of call 1 (calls 2 and 3 copied .model/part-01 and -02 to /tmp/model):
# the GGUF's last quarter, checked whole by sha256, then the suite's benches on the real model
# whose rows go stale first: fixed-256x128x128 (ours, HF's static cache + torch.compile, HF eager)
# and latency-b1 (ours, HF eager). Every bench: --preflight (the host quiet 30 s before and
# throughout), each engine warmed up on the measured shapes, our prefix cache cold for every
# measured repetition.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-03 /tmp/model/
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || { ls -la /tmp/model; echo "GGUF incomplete"; exit 3; }
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
OUT=$OUT/suite2 SUITE_ONLY="bench-fixed-256x128x128 bench-latency-b1" timeout 560 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/suite2.log 2>&1
echo "suite2 rc=$?"; tail -n 10 $L/suite2.log
