#!/usr/bin/env bash
# Session 21, third device call: the real GGUF's GPU tests on this tree, then the host's
# time by phase of a fixed-256 step (benchmarks/host_profile.py, dummy weights) on the
# base tree (.whl/base: 1b0460a's engine/ and cuda_src/ over this checkout) and this one,
# alternating. Logs under $OUT.
set -uo pipefail
cat /tmp/model/part-* > /tmp/model/smollm2.gguf && sha256sum /tmp/model/smollm2.gguf | cut -c1-16
ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf python3 -m pytest -q -m gpu tests/gpu/test_model_cuda.py \
  -p no:cacheprovider > "$OUT/model-tests.log" 2>&1; tail -n 1 "$OUT/model-tests.log"
rm -rf /tmp/before && mkdir -p /tmp/before && tar --exclude=./.whl --exclude=./.model -cf - . | tar -C /tmp/before -xf - \
  && cp -r .whl/base/. /tmp/before/
for round in 1 2; do
  for side in before after; do
    tree=$PWD; [ $side = before ] && tree=/tmp/before
    (cd "$tree" && python3 benchmarks/host_profile.py --workload fixed-256x128x128) > "$OUT/host-$side-$round.log" 2>&1
    echo "$side $round: $(head -n 4 "$OUT/host-$side-$round.log" | tr -s ' ' | tr '\n' ';')"
  done
done
