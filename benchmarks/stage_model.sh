#!/usr/bin/env bash
# The real GGUF in parts small enough to travel to the GPU host. A device run carries the
# tracked tree and the paths it names, 64 MiB in all, counted in disk blocks; the tree (30 MB
# on disk on 2026-12-07) grows with the shipped evidence, so ../shared/gpu-host/split-model.sh's
# 50 MB first half no longer fits beside it and .whl/ (7 MB). This re-splits that script's
# .model/a and .model/b into .model/part-00, -01, ... of PART_BYTES (default 25 MB: four parts;
# 33 MB parts were refused on 2026-12-07) and prints the device calls:
# one per part, back to back while the machine is warm (it is released after ~30 s idle), and
# the command that puts them together and checks the model's sha256.
#
#   ../shared/gpu-host/split-model.sh && benchmarks/stage_model.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ ! -f .model/a ] || [ ! -f .model/b ]; then
  echo "stage_model: no .model/a and .model/b; run ../shared/gpu-host/split-model.sh first" >&2
  exit 2
fi
rm -f .model/part-*
cat .model/a .model/b | split -b "${PART_BYTES:-25000000}" -d -a 2 - .model/part-
parts=(.model/part-*)
sha=$(cat "${parts[@]}" | sha256sum | cut -d' ' -f1)
echo "staged ${#parts[@]} parts of the GGUF (sha256 ${sha:0:16}…); device calls:"
for p in "${parts[@]}"; do
  echo "  carry [\"$p\"]:  mkdir -p /tmp/model && cp $p /tmp/model/"
done
# A machine released between the calls comes back bare, with some parts missing: the check
# stops the run there instead of letting it fail on a truncated model.
echo "  then, carrying what the run needs:  cat /tmp/model/part-* > /tmp/model/smollm2.gguf &&" \
  "echo '$sha  /tmp/model/smollm2.gguf' | sha256sum -c --quiet && ..."
