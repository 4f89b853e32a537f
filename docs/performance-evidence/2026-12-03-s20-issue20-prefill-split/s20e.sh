#!/bin/bash
# Session 20, call E: a long prompt's tall prefill tiles with their keys split over blocks
# (after: this checkout, the splits merged by prefill_merge; nosplit: the same with
# ROADGATE_PREFILL_KV_SPLIT=0) against HEAD before it (.whl/before: its engine/ and cuda_src/ laid
# over a copy of this checkout). The attention GPU tests on the after tree, then
# benchmarks/prefill.py (dummy weights, ours only, --profile), the sides alternating.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
after=$PWD nosplit=$PWD before=/tmp/before
rm -rf $before && mkdir -p $before && tar --exclude=./.git --exclude=./.whl --exclude=./.model -cf - . | tar -C $before -xf - \
  && cp -r .whl/before/. $before/
for side in before after; do
  (cd ${!side} && echo "$side code_hash $(python3 -c 'from jobs.code_identity import code_hash; print(code_hash())')") | tee -a $OUT/ab.log
done
PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -p no:cacheprovider \
  -k "prefill or attention" 2>&1 | tail -15 | tee -a $OUT/ab.log
n=0
for side in before after nosplit nosplit after before; do
  n=$((n + 1))
  [ $SECONDS -gt 420 ] && break
  split=-1; [ $side = nosplit ] && split=0      # nosplit: this tree, no tile's keys split
  (cd ${!side} && ROADGATE_PREFILL_KV_SPLIT=$split timeout 120 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5 \
     --shapes 1x4000 1x3000 1x6000 1x8000 64x1000) > $OUT/prefill-$n-$side.log 2>&1
  echo "== $n $side" | tee -a $OUT/ab.log
  grep -E "^ +[0-9]+x[0-9]+ |attn_prefill|prefill_merge|Error|error" $OUT/prefill-$n-$side.log | tee -a $OUT/ab.log
done
