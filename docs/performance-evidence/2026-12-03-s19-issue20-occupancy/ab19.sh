#!/bin/bash
# Session 19 A/B, each figure its own process: base = fedca78 (.whl/base), occ = b6a983c
# (.whl/occ: register budgets + work list sized by real occupancy), pf = the working tree
# (occ + K/V rows prefetched into L2 a step ahead, by cp.async.bulk.prefetch), pfl = the
# same prefetch by prefetch.global.L2 (.whl/pfl). ab19.sh PHASE
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 ROADGATE_DATA_DIR=/tmp/abdata
LOG=$OUT/ab.log
run() {  # run VARIANT LABEL COMMAND...
  local v=$1 label=$2; shift 2
  [ $SECONDS -gt ${DEADLINE:-540} ] && { echo "skipped $v $label (deadline)" | tee -a $LOG; return; }
  local tree=/tmp/variants/$v   # the scripts put their own checkout first on sys.path: a tree per variant
  if [ ! -d $tree ]; then
    mkdir -p $tree && cp -r benchmarks jobs engine cuda_src pyproject.toml $tree/
    [ "$v" != pf ] && rm -rf $tree/engine $tree/cuda_src && cp -r .whl/$v/engine .whl/$v/cuda_src $tree/
  fi
  local t0=$SECONDS
  (cd $tree && PYTHONPATH=/tmp/site:$tree "$@") > "$OUT/raw-$v-$label-$t0.log" 2>&1
  echo "$v $label ($((SECONDS - t0))s): $(grep -E 'median|ours/cuda' "$OUT/raw-$v-$label-$t0.log" | tail -1)" | tee -a $LOG
}
step() { run "$1" "$2" python3 benchmarks/decode_step.py --no-store "${@:3}"; }
for v in base occ pfl; do diff -q .whl/$v/cuda_src/attention_decode.cu cuda_src/attention_decode.cu; done | tee -a $LOG
echo "phase $1; code_hash pf: $(PYTHONPATH=/tmp/site:$PWD python3 -c 'from jobs.code_identity import code_hash; print(code_hash())')" | tee -a $LOG
case $1 in
1)
  for v in occ pf pf occ; do step $v smollm-1024 --batch 256 --context 1024; done
  for v in base occ pf pf occ base; do step $v llama-mixed --model dummy:llama-3.2-1b --batch 256 --context 100-2048; done
  for v in occ pf pf occ; do step $v smollm-mixed --batch 256 --context 100-2048; done
  for v in base occ pf; do step $v llama-1024 --model dummy:llama-3.2-1b --batch 256 --context 1024; done ;;
2)
  for v in base occ occ base; do run $v nano-llama python3 -m jobs.cli bench --workload nano-bench-llama-1b --engine ours --backend cuda; done
  SUITE_SKIP="tests memcheck kernels decode-step decode-step-b1 host-profile launch-cost prefill step-trace bench-latency-b1 bench-fixed-256x128x128 bench-nano-bench bench-batch-longtail ncu-decode" \
    PYTHONPATH=/tmp/site bash benchmarks/gpu_suite.sh /nonexistent.gguf ;;
3)
  for v in occ pfl pfl occ; do
    step $v smollm-1024 --batch 256 --context 1024
    step $v smollm-mixed --batch 256 --context 100-2048
    step $v llama-mixed --model dummy:llama-3.2-1b --batch 256 --context 100-2048
  done
  for slack in 1.25 2.0 1.75; do
    run occ llama-mixed-slack$slack env ROADGATE_DECODE_SLACK=$slack python3 benchmarks/decode_step.py --no-store --model dummy:llama-3.2-1b --batch 256 --context 100-2048
  done ;;
esac
