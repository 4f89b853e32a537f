#!/usr/bin/env bash
# Session 46, call 4, carrying .whl and the GGUF's last quarter (.model/part-03), on the machine
# calls 1-3 left the first three quarters on. On an H200: session 43's s43c.sh (the GGUF checked
# whole by sha256; fixed-256x128x128 against HF's static cache + torch.compile and HF eager, and
# latency-b1, each with --preflight, warmed up, our prefix cache cold). On an H100: every GPU
# test and memcheck on the real model (the chat-prompt tests dummy weights skip).
source benchmarks/device_env.sh
if grep -q H200 $L/gpu.txt; then
  bash docs/performance-evidence/2026-12-07-s43-issue20-h200-suite/s43c.sh
else
  mkdir -p /tmp/model && cp .model/part-03 /tmp/model/
  use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || { ls -la /tmp/model; echo "GGUF incomplete"; exit 3; }
  echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
  OUT=$OUT/suite4 SUITE_ONLY="tests memcheck" timeout 540 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/suite4.log 2>&1
  echo "suite4 rc=$?"; tail -n 4 $L/suite4.log
fi
pack_out
