#!/usr/bin/env bash
# Session 39, first call: session 38's s38b.sh (gemm_tma with TMA-stored outputs and a 192-wide
# tile: its tests, kernel bench at both widths, the trace probe of session 37's kernel), with the
# knob's prefill A/B now in one process (prefill.py --ab: both engines warmed up on each shape,
# repetitions alternating on the same fresh prompts, each engine's prefix cache emptied before
# every repetition). Most important first: each part's log is kept under $OUT if cut short.
# Prepared in .whl/ (the call carries it): ../shared/gpu-host/wheels/*.whl and pip-downloaded
# sqlalchemy, alembic, nvidia-ml-py, mako, greenlet wheels; HEAD and DIFF; this script; and
#   mkdir -p .whl/dbg && cp docs/performance-evidence/2026-12-06-s38-issue20-gemm-tma-store/dbg/trace.py .whl/dbg/
#   git show 12bfb76:cuda_src/gemm_tma.cu > .whl/dbg/gemm_tma_old.cu   # session 37's kernel
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 180 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py tests/gpu/test_model_cuda.py \
  tests/gpu/test_prefill_bench.py -k "gemm_tma or alternately" > $L/tests.log 2>&1
rc=$?; echo "tests rc=$rc"; tail -3 $L/tests.log
if [ $rc -ne 0 ]; then tail -40 $L/tests.log; exit 0; fi
timeout 60 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -13 $L/prefill-gemm.log
timeout 150 python3 benchmarks/prefill.py --no-store --no-torch --profile --reps 7 --ab prefill_gemm_tma=1 \
  > $L/prefill-ab.log 2>&1
echo "prefill A/B rc=$?"
grep -E "^prefill |gemm_tma|silu_and_mul|nvjet_sm90_tst_(256|192|144)|ms of GPU" $L/prefill-ab.log | head -40
tail -6 $L/prefill-ab.log
timeout 120 python3 .whl/dbg/trace.py > $L/trace.log 2>&1; echo "trace rc=$?"
grep -v Warning $L/trace.log | tail -30
