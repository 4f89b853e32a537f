#!/usr/bin/env bash
# Session 21, fourth device call: the host's own cost of a full fixed-256 decode step on the
# GPU host's CPU (benchmarks/host_profile.py --host-only: model and sampler stubbed, inputs
# through the graphs' static buffer), the base tree (1b0460a's engine/ over this checkout)
# and this one alternating, three rounds. Logs under $OUT.
set -uo pipefail
rm -rf /tmp/before && mkdir -p /tmp/before && tar --exclude=./.whl --exclude=./.model -cf - . | tar -C /tmp/before -xf - \
  && cp -r .whl/base/. /tmp/before/
for round in 1 2 3; do
  for side in before after; do
    tree=$PWD; [ $side = before ] && tree=/tmp/before
    (cd "$tree" && python3 benchmarks/host_profile.py --host-only --backend torch) > "$OUT/host-only-$side-$round.log" 2>&1
    echo "$side $round: $(tail -n 4 "$OUT/host-only-$side-$round.log" | tr -s ' ' | tr '\n' ';')"
  done
done
