#!/usr/bin/env bash
# Session 38: gemm_tma with its outputs stored by the TMA unit and a 192-wide tile: its tests,
# kernel bench (both widths), prefill.py with the knob on then off (warmed on the shapes, fresh
# prompts, prefix cache emptied each repetition); then the trace probe of session 37's kernel
# (.whl/dbg/trace.py) for where its time went. Most important first: each part's log is kept
# under $OUT if the call is cut short.
# Prepared in the checkout's .whl/ (the call carries it): ../shared/gpu-host/wheels/*.whl and
# pip-downloaded sqlalchemy, alembic, nvidia-ml-py, mako, greenlet wheels; HEAD (git rev-parse
# HEAD) and DIFF (git diff --stat, untracked files); this script as .whl/s38b.sh; and
#   mkdir -p .whl/dbg && cp docs/performance-evidence/2026-12-06-s38-issue20-gemm-tma-store/dbg/trace.py .whl/dbg/
#   git show 12bfb76:cuda_src/gemm_tma.cu > .whl/dbg/gemm_tma_old.cu   # session 37's kernel
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 150 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_model_cuda.py \
  -k "gemm_tma" > $L/tests.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -3 $L/tests.log
if [ $rc -ne 0 ]; then tail -40 $L/tests.log; exit 0; fi
timeout 60 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -13 $L/prefill-gemm.log
n=0
for on in 1 0; do
  n=$((n+1))
  ROADGATE_PREFILL_GEMM_TMA=$on timeout 70 python3 benchmarks/prefill.py --no-store --no-torch --profile \
    --reps 5 > $L/prefill-$n-tma$on.log 2>&1
  echo "prefill $n tma=$on rc=$?"
  grep -E "^prefill |gemm_tma|silu_and_mul|nvjet_sm90_tst_(256|192|144)|rms_norm|ms of GPU" $L/prefill-$n-tma$on.log | head -30
done
timeout 120 python3 .whl/dbg/trace.py > $L/trace.log 2>&1; echo "trace rc=$?"
grep -v Warning $L/trace.log | tail -30
