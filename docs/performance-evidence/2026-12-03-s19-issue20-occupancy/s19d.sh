#!/bin/bash
# Session 19, call D: decode step at mixed lengths (100-2,048) by batch and slack, b6a983c's
# tree; what a per-step slack rule would be built from. One process per figure.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c 'from jobs.code_identity import code_hash; print("code_hash", code_hash())' | tee $OUT/sweep.log
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider 2>&1 | tail -1 | tee -a $OUT/sweep.log
for case in "smollm2-135m 256" "smollm2-135m 64" "smollm2-135m 128" "smollm2-135m 32" "llama-3.2-1b 64"; do
  set -- $case
  for slack in 1.25 1.5 1.0 2.0; do
    [ $SECONDS -gt 340 ] && break 2
    echo "$1 B=$2 slack $slack: $(ROADGATE_DECODE_SLACK=$slack python3 benchmarks/decode_step.py --no-store --model dummy:$1 \
       --batch $2 --context 100-2048 2>&1 | grep -o 'median [0-9.]* ms')" | tee -a $OUT/sweep.log
  done
done
