#!/usr/bin/env bash
# Session 42, call 2 (c63bcde, the tree of .whl/HEAD; an H200 was asked for, the held H100 answered): stage the GGUF's first quarter
# (.model/part-00; the tree takes 30 MB on disk, so a part is 25 MB) and run the suite's steps
# that use dummy weights and feed roadmap rows:
# decode-step (B=256/ctx 1024, roofline), decode-step-b1, prefill (1x4000, 1x8000, 64x1000),
# and step-trace (syncs and copies per step). Each bench
# warms up on its measured shapes, empties our prefix cache before every measured repetition,
# and the host runs nothing else.
source benchmarks/device_env.sh
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
OUT=$OUT/suite1 SUITE_ONLY="decode-step decode-step-b1 prefill step-trace" \
  timeout 520 bash benchmarks/gpu_suite.sh > $L/suite1.log 2>&1
echo "suite1 rc=$?"; tail -n 12 $L/suite1.log; ls /tmp/model
