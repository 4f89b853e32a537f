#!/usr/bin/env bash
# Before/after on one GPU host: the same benchmarks on two copies of the code, interleaved,
# the order flipping at each benchmark (before-after, after-before, ...): the host's speed
# drifts by more than the changes measured (18% over one lease, 2026-12-01), and a
# steady drift then falls on both sides alike over an even number of benchmarks.
# Each side records into its own results store ($OUT/<side>/data) and names its code by
# content hash; logs go to $OUT/<side>/<n>-<bench>.log, and a table of figures is printed.
#
#   benchmarks/compare_trees.sh BEFORE_TREE AFTER_TREE [BENCH...]
#
# A TREE is a whole checkout, or only some of its code folders (e.g. `git archive REV engine
# cuda_src`: a device run carries 64 MiB, too little for two whole trees); those are laid
# over a copy of this checkout in a temporary folder, removed when the script ends (under
# $OUT the copies would travel back with the logs, past a device call's size limit). Each
# side runs from its own tree: the benchmark scripts put their own checkout first on
# sys.path, so PYTHONPATH cannot pick one.
# BENCH: a workload (roadgate bench --engine ours --backend cuda --preflight: quiet host,
# cold prefix cache), decode-step (benchmarks/decode_step.py, default B=256, context 1024) or
# prefill (benchmarks/prefill.py: each shape's wall time, warmed, fresh prompts, cold prefix
# cache); any may end in @ARG,ARG,... for more arguments (decode-step@--batch=64,--no-store;
# prefill@--no-store,--no-torch,--profile).
# Default: nano-bench fixed-256x128x128 latency-b1 decode-step. MODEL: the GGUF the
# workloads run (default /tmp/model/smollm2.gguf; MODEL= for the workload's own model).
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_TREE AFTER_TREE [BENCH...]" >&2; exit 2; }
checkout=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)

copies=$(mktemp -d "${TMPDIR:-/tmp}/compare_trees.XXXXXX") || exit 2
trap 'rm -rf "$copies"' EXIT
tree_of() {  # tree_of DIR SIDE: DIR if it is a whole tree, else a copy of this checkout with DIR laid over it
  local dir copy="$copies/$2"
  dir=$(cd "$1" && pwd) || return 2
  if [ -d "$dir/jobs" ] && [ -d "$dir/benchmarks" ]; then echo "$dir"; return; fi
  rm -rf "$copy" && mkdir -p "$copy" || return 2
  tar -C "$checkout" --exclude=./.git --exclude=./.whl --exclude=./.model --exclude=./.venv \
      --exclude="./${OUT#"$checkout"/}" -cf - . | tar -C "$copy" -xf - &&
    cp -r "$dir"/. "$copy"/ && echo "$copy"
}
for tree in "$1" "$2"; do [ -d "$tree" ] || { echo "$tree: no such folder" >&2; exit 2; }; done
before=$(tree_of "$1" before) && after=$(tree_of "$2" after) || exit 2
shift 2
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(nano-bench fixed-256x128x128 latency-b1 decode-step)
MODEL=${MODEL-/tmp/model/smollm2.gguf}
summary=()

run() {  # run SIDE TREE BENCH N
  local side=$1 tree=$2 name=${3%%@*} extra=() rc
  [[ $3 == *@* ]] && IFS=, read -ra extra <<< "${3#*@}"
  local log="$OUT/$side/$4-$name.log"
  mkdir -p "$OUT/$side"
  (
    cd "$tree" || exit 2
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$tree ROADGATE_DATA_DIR=$OUT/$side/data PYTHONUNBUFFERED=1
    case $name in
      decode-step) python3 benchmarks/decode_step.py "${extra[@]}" ;;
      prefill) python3 benchmarks/prefill.py "${extra[@]}" ;;
      *) python3 -m jobs.cli bench --workload "$name" ${MODEL:+--model "$MODEL"} --engine ours --backend cuda \
             --preflight "${extra[@]}" ;;
    esac
  ) > "$log" 2>&1
  rc=$?
  # The figure (bench's row of ours, decode_step's median, prefill's wall time of each shape),
  # else the log's last line: the error.
  local figure
  if [ "$name" = prefill ]; then
    figure=$(awk '/^ +[0-9]+x[0-9]+ /{printf "%s%s %s ms", sep, $1, $2; sep = "; "}' "$log")
  else
    figure=$(grep -E "^(decode step |$name +ours/)" "$log" | tail -n 1)
  fi
  summary+=("$(printf '%-6s %-18s rc=%-3s %s' "$side" "$3" "$rc" "${figure:-$(tail -n 1 "$log")}")")
}

n=0
for bench in "${benches[@]}"; do
  n=$((n + 1))
  if [ $((n % 2)) = 1 ]; then
    run before "$before" "$bench" $n; run after "$after" "$bench" $n
  else
    run after "$after" "$bench" $n; run before "$before" "$bench" $n
  fi
done
printf '%s\n' "${summary[@]}"
