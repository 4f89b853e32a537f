#!/usr/bin/env bash
# Session 47, carrying .whl: after 8e7fcf8 (draws from 23 bits, never u = 1) and d9daf1b (top-k
# cut by value in the reference), every GPU test whose name says it samples, twice over (fresh
# random logits and seeds each time), on dummy weights.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
for i in 1 2; do
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/gpu -k "sample or sampl" > $L/test-sample-$i.log 2>&1
  echo "round $i rc=$? $(tail -n 1 $L/test-sample-$i.log)"; grep -m 5 "^FAILED" $L/test-sample-$i.log
done
