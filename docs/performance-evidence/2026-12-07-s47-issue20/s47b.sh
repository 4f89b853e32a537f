#!/usr/bin/env bash
# Session 47, carrying .whl and the GGUF's first quarter (.model/part-00), on whichever card
# comes. First the sampler's GPU tests after d9daf1b (the reference's top-k cut by value, as
# the kernel's; call 3's suite failed one sampling test once on a tie at the cut), three times
# over, each with fresh random logits and seeds. Then, on an H200 only, s46a.sh's H200 branch:
# the suite's dummy-weight steps that feed roadmap rows (decode-step, decode-step-b1, prefill,
# step-trace), each warmed up on its shapes, our prefix cache emptied before every measured
# repetition, nothing else running on the host.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
for i in 1 2 3; do
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_kernels.py -k sample > $L/test-sample-$i.log 2>&1
  echo "sample tests, round $i: rc=$? $(tail -n 1 $L/test-sample-$i.log)"
done
if grep -q H200 $L/gpu.txt; then bash docs/performance-evidence/2026-12-07-s46-issue20/s46a.sh; else pack_out; fi
