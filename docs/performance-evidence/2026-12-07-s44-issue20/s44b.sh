#!/usr/bin/env bash
# Session 44, call 1: the GGUF's first quarter (.model/part-00); then, by the card that came:
# on an H200, the suite's steps on dummy weights that feed roadmap rows (decode-step,
# decode-step-b1, prefill, step-trace); on an H100 (not the rows' card), session 43's prepared
# warp-state profile of the fused gate|up against cuBLAS (s44a.sh; call 1), then, from call 4 on,
# the six-stage experiment (s44d.sh) in its place. Each bench warms up on its
# measured shapes and empties our prefix cache before every measured repetition; the host runs
# nothing else.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
if grep -q H200 $L/gpu.txt; then
  OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
    timeout 450 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
  echo "suite1 rc=$?"; tail -n 6 $L/suite1.log; ls /tmp/model; exit 0
fi
bash docs/performance-evidence/2026-12-07-s44-issue20/s44d.sh
