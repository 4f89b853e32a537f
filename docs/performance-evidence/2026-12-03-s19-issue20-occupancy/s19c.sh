#!/bin/bash
# Session 19, call C: occ (b6a983c) against pfl (the same + rows prefetched into L2 a step
# ahead by prefetch.global.L2), via compare_trees.sh; then the Llama shape's slack sweep.
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
S=--no-store,--batch=256
B="decode-step@$S,--context=1024 decode-step@$S,--context=100-2048 decode-step@$S,--model=dummy:llama-3.2-1b,--context=100-2048"
OUT=/tmp/cmp bash benchmarks/compare_trees.sh .whl/occ .whl/pfl $B $B | tee $OUT/cmp.log
for slack in 1.25 1.75 2.0; do
  echo "slack $slack llama mixed: $(ROADGATE_DECODE_SLACK=$slack PYTHONPATH=/tmp/site:$PWD python3 benchmarks/decode_step.py --no-store \
     --model dummy:llama-3.2-1b --batch 256 --context 100-2048 2>&1 | grep -o 'median.*ratio [0-9.]*x')" | tee -a $OUT/cmp.log
done
tar czf $OUT/cmp-logs.tgz -C /tmp/cmp before after --exclude=data
