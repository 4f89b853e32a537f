#!/bin/bash
# Session 20, call F: decode chunks of at least 64 keys (v64: MIN_CHUNK = 64, .whl/v64) against
# 128 (HEAD, .whl/before), both laid over a copy of this checkout: decode-attention GPU tests on
# v64, then benchmarks/decode_step.py (dummy weights) per batch, the sides alternating.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for v in before v64; do
  rm -rf /tmp/$v && mkdir -p /tmp/$v && tar --exclude=./.git --exclude=./.whl --exclude=./.model -cf - . | tar -C /tmp/$v -xf - \
    && cp -r .whl/$v/. /tmp/$v/
  (cd /tmp/$v && echo "$v code_hash $(python3 -c 'from jobs.code_identity import code_hash; print(code_hash())')") | tee -a $OUT/ab.log
done
(cd /tmp/v64 && PYTHONPATH=/tmp/site:/tmp/v64 timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider \
   -k "decode_attention and not block_sizes" 2>&1 | tail -1 | sed 's/^/v64 tests: /') | tee -a $OUT/ab.log
for case in "1 256" "1 1000" "16 100-2048" "8 512"; do
  set -- $case
  for side in before v64 v64 before; do
    [ $SECONDS -gt 150 ] && break 2
    echo "B=$1 ctx=$2 $side: $(cd /tmp/$side && python3 benchmarks/decode_step.py --no-store --batch $1 --context $2 2>&1 \
       | grep -o 'median [0-9.]* ms')" | tee -a $OUT/ab.log
  done
done
