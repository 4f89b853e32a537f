# Sourced first by a device call's script on the GPU host (one run from the checkout's root,
# carrying .whl/): installs the carried wheels (GPU-HOST.md's pip line), puts the checkout
# on PYTHONPATH, makes $L = $OUT/logs, and records there the GPU and the content hash of the
# code that runs (every GPU run names its code). use_gguf joins the GGUF's parts that
# benchmarks/stage_model.sh's calls left in $MODEL_DIR (default /tmp/model) into
# $MODEL_DIR/smollm2.gguf and checks its sha256 (the one that script prints): it fails, and
# the call should stop there, where a part is missing.
#
#   source benchmarks/device_env.sh
#   use_gguf b179c952...  || exit 3        # then ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
#   ...
#   pack_out                               # last: everything under $OUT as one $OUT/out.tgz
#
# A call brings back at most 8 files from $OUT (the device README's limits): a script that
# writes more ends with pack_out, or loses all but 8 of them.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs
mkdir -p "$L"
nvidia-smi -L > "$L/gpu.txt" 2>&1
# The host CPU too: host-bound figures (step-trace's GPU idle between decode steps) follow it.
(nproc; grep -m3 -E "^(cpu family|model|model name)\s*:" /proc/cpuinfo) > "$L/host.txt" 2>&1   # a VM may name no model
sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > "$L/code.sha256"

use_gguf() {  # use_gguf SHA256
  local dir=${MODEL_DIR:-/tmp/model}
  cat "$dir"/part-* > "$dir/smollm2.gguf" && echo "$1  $dir/smollm2.gguf" | sha256sum -c --quiet
}

pack_out() {  # everything under $OUT into $OUT/out.tgz, alone there
  tar czf /tmp/out.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/out.tgz "$OUT/out.tgz"
}
