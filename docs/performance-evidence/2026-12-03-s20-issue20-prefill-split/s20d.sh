#!/bin/bash
# Session 20, call D: a long prompt's tall prefill tiles with their keys split over blocks
# (after: this checkout) against HEAD before it (.whl/before: its engine/ and cuda_src/ laid
# over a copy of this checkout). The attention GPU tests on the after tree, then
# benchmarks/prefill.py (dummy weights, ours only, --profile), the sides alternating;
# also stages the GGUF's first part for the next calls.
cd "$(dirname "$0")/../../.."
mkdir -p /tmp/model && cp .model/part-00 /tmp/model/
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
after=$PWD before=/tmp/before
rm -rf $before && mkdir -p $before && tar --exclude=./.git --exclude=./.whl --exclude=./.model -cf - . | tar -C $before -xf - \
  && cp -r .whl/before/. $before/
for side in before after; do
  (cd ${!side} && echo "$side code_hash $(python3 -c 'from jobs.code_identity import code_hash; print(code_hash())')") | tee -a $OUT/ab.log
done
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider \
  -k "prefill or attention" 2>&1 | tail -15 | tee -a $OUT/ab.log
n=0
for side in before after after before; do
  n=$((n + 1))
  [ $SECONDS -gt 420 ] && break
  (cd ${!side} && timeout 120 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 \
     --shapes 1x4000 1x3000 1x6000 1x8000 64x1000) > $OUT/prefill-$n-$side.log 2>&1
  echo "== $n $side" | tee -a $OUT/ab.log
  grep -E "^ +[0-9]+x[0-9]+ |attn_prefill|Error|error" $OUT/prefill-$n-$side.log | tee -a $OUT/ab.log
done
