#!/usr/bin/env bash
# Session 21: RMSNorm with each lane's row chunks held in registers against HEAD's kernel.
# TREES (default "head h8 h4", the first call; the second ran TREES="head h4r h8r"):
# h8, h4 hold 8 or 4 chunks of 8 elements and their weights; h4r, h8r hold the row only and
# load the weights after the sum (kept: cuda_src/rms_norm.cu). The others are patches against
# it here: h4-weights-held.patch, h8-weights-held.patch, h8r-row-only.patch.
# Each tree is this checkout with .whl/<tree>/cuda_src/rms_norm.cu laid over a copy; the rms_norm GPU tests run on both variants, then per tree,
# rounds alternating: a SmolLM2 decode step at B=256 / context 192 (fixed-256's size), the
# Llama shape's at B=256 / contexts 100-2048 (H = 2048), and prefill. Logs under $OUT.
set -uo pipefail
TREES=${TREES:-head h8 h4}
for t in $TREES; do
  rm -rf /tmp/$t && mkdir -p /tmp/$t && tar --exclude=./.whl --exclude=./.model -cf - . | tar -C /tmp/$t -xf - \
    && cp -r .whl/$t/. /tmp/$t/
done
for t in ${TREES#head }; do
  (cd /tmp/$t && python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k rms_norm -p no:cacheprovider) \
    > "$OUT/tests-$t.log" 2>&1; echo "tests $t: $(tail -n 1 "$OUT/tests-$t.log")"
done
for round in 1 2; do
  for t in $TREES; do
    cd /tmp/$t
    python3 benchmarks/decode_step.py --no-store --batch 256 --context 192 --profile > "$OUT/$t-$round-decode.log" 2>&1
    python3 benchmarks/decode_step.py --no-store --model dummy:llama-3.2-1b --batch 256 --context 100-2048 --profile \
      > "$OUT/$t-$round-llama.log" 2>&1
    echo "$t $round: $(head -n 1 "$OUT/$t-$round-decode.log" | cut -c1-80) | rms $(grep rms_norm "$OUT/$t-$round-decode.log" | tr -s ' ' | cut -d' ' -f2-4)"
    echo "$t $round llama: $(head -n 1 "$OUT/$t-$round-llama.log" | cut -c1-90) | rms $(grep rms_norm "$OUT/$t-$round-llama.log" | tr -s ' ' | cut -d' ' -f2-4)"
    cd - > /dev/null
  done
done
for t in $TREES; do
  (cd /tmp/$t && python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 3) > "$OUT/$t-prefill.log" 2>&1
  echo "$t prefill: $(grep -i "rms_norm" "$OUT/$t-prefill.log" | tr -s ' ' | head -3 | tr '\n' ';')"
done
# The device sends back only a few files: the logs travel as one archive.
(cd "$OUT" && tar -czf logs.tgz ./*.log && rm -f ./*.log)
