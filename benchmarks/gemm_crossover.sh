#!/usr/bin/env bash
# On the GPU host: where our decode GEMM beats cuBLAS in the decode step (the norm and SiLU
# kernels before both), to set gemm_max_rows from. For each batch size, the decode step with cuBLAS
# (ROADGATE_GEMM_MAX_ROWS=0) and with ours (=256), one process each, then nano-bench (dummy
# weights) with cuBLAS and with the crossover found. Prints the largest batch size up to
# which ours won at every size measured.
#
#   benchmarks/gemm_crossover.sh ["4:512 8:512 16:512 32:1024 64:1024 128:1024"]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
step_ms() {  # step_ms GEMM_MAX_ROWS BATCH CONTEXT: the decode step's median
  ROADGATE_GEMM_MAX_ROWS=$1 python3 benchmarks/decode_step.py --no-store --batch "$2" --context "$3" 2>&1 |
    grep -o "median [0-9.]*" | cut -d' ' -f2
}
crossover=0 lost=0
for case in ${1:-4:512 8:512 16:512 32:1024 64:1024 128:1024}; do
  batch=${case%:*} context=${case#*:}
  cublas=$(step_ms 0 "$batch" "$context") ours=$(step_ms 256 "$batch" "$context")
  echo "B=$batch context=$context: cuBLAS ${cublas:-failed} ms, ours ${ours:-failed} ms"
  if [ "$lost" = 0 ] && python3 -c "import sys; sys.exit(0 if float('$ours') < float('$cublas') else 1)" 2>/dev/null; then
    crossover=$batch
  else
    lost=1
  fi
done
for rows in 0 $([ "$crossover" = 0 ] || echo "$crossover"); do
  echo "nano-bench, ROADGATE_GEMM_MAX_ROWS=$rows:"
  ROADGATE_GEMM_MAX_ROWS=$rows python3 -m jobs.cli bench --workload nano-bench --model dummy:smollm2-135m \
      --engine ours --backend cuda --no-store 2>&1 | grep "nano-bench "
done
echo "ours won at every batch size up to $crossover (gemm_max_rows $crossover)"
