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
# BENCH: a workload (roadgate bench --engine ours --backend cuda --preflight: quiet host,
# cold prefix cache), or decode-step (benchmarks/decode_step.py, B=256, context 1024).
# Default: nano-bench fixed-256x128x128 latency-b1 decode-step. MODEL: the GGUF to run.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_TREE AFTER_TREE [BENCH...]" >&2; exit 2; }
before=$(cd "$1" && pwd) && after=$(cd "$2" && pwd) || exit 2
shift 2
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(nano-bench fixed-256x128x128 latency-b1 decode-step)
OUT=${OUT:-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
MODEL=${MODEL:-/tmp/model/smollm2.gguf}
summary=()

run() {  # run SIDE TREE BENCH N
  local side=$1 tree=$2 bench=$3 log="$OUT/$1/$4-$3.log" rc
  mkdir -p "$OUT/$side"
  (
    cd "$tree" || exit 2
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$tree ROADGATE_DATA_DIR=$OUT/$side/data PYTHONUNBUFFERED=1
    if [ "$bench" = decode-step ]; then
      python3 benchmarks/decode_step.py
    else
      python3 -m jobs.cli bench --workload "$bench" --model "$MODEL" --engine ours --backend cuda --preflight
    fi
  ) > "$log" 2>&1
  rc=$?
  # The figure line (bench's row of ours, decode_step's median), else the last line: the error.
  local figure
  figure=$(grep -E "^(decode step |$bench +ours/)" "$log" | tail -n 1)
  summary+=("$(printf '%-6s %-18s rc=%-3s %s' "$side" "$bench" "$rc" "${figure:-$(tail -n 1 "$log")}")")
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
