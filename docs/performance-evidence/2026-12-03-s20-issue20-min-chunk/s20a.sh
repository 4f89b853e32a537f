#!/bin/bash
# Session 20, call A: the decode GPU tests on the decode_min_chunk tree, then the decode step
# by batch and least chunk size (ROADGATE_DECODE_MIN_CHUNK), dummy weights, one process per figure.
cd "$(dirname "$0")/../../.."   # the checkout, with min-chunk-tried.patch applied
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c 'from jobs.code_identity import code_hash; print("code_hash", code_hash())' | tee $OUT/sweep.log
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider -k "decode" 2>&1 | tail -3 | tee -a $OUT/sweep.log
for case in "1 256" "1 1000" "8 512" "2 512" "16 100-2048" "64 100-2048"; do
  set -- $case
  for mc in 128 512 256 1024 2048; do
    [ $SECONDS -gt 540 ] && break 2
    echo "B=$1 ctx=$2 min_chunk $mc: $(ROADGATE_DECODE_MIN_CHUNK=$mc python3 benchmarks/decode_step.py --no-store \
       --batch $1 --context $2 2>&1 | grep -o 'median [0-9.]* ms')" | tee -a $OUT/sweep.log
  done
done
