#!/bin/bash
# Session 20, call C: the 64-row prefill tiles (d = 64) held to 3 or 4 blocks an SM by
# __launch_bounds__ (v3: 168 registers, v4: 128 with 68 bytes of spill loads) against 2 (HEAD).
# Each variant is .whl/vN/cuda_src laid over a copy of this checkout. benchmarks/prefill.py
# (dummy weights, ours only, --profile), the sides alternating; the prefill kernel tests on v3 and v4.
cd "$(dirname "$0")/../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
head=$PWD
for v in v3 v4; do
  rm -rf /tmp/$v && mkdir -p /tmp/$v && tar --exclude=./.git --exclude=./.whl --exclude=./.model -cf - . | tar -C /tmp/$v -xf - \
    && cp -r .whl/$v/. /tmp/$v/
done
declare -A tree=([head]=$head [v3]=/tmp/v3 [v4]=/tmp/v4)
for side in head v3 v4; do
  (cd ${tree[$side]} && echo "$side code_hash $(python3 -c 'from jobs.code_identity import code_hash; print(code_hash())')") | tee -a $OUT/ab.log
done
for side in v3 v4; do
  (cd ${tree[$side]} && PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py \
     -p no:cacheprovider -k "prefill" 2>&1 | tail -1 | sed "s/^/$side tests: /") | tee -a $OUT/ab.log
done
n=0
for side in head v3 v4 v4 v3 head head v3 v4; do
  n=$((n + 1))
  [ $SECONDS -gt 480 ] && break
  (cd ${tree[$side]} && timeout 120 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 5) > $OUT/prefill-$n-$side.log 2>&1
  echo "== $n $side" | tee -a $OUT/ab.log
  grep -E "^ +1x4000|^ +1x8000|^ +64x1000|attn_prefill" $OUT/prefill-$n-$side.log | tee -a $OUT/ab.log
done
