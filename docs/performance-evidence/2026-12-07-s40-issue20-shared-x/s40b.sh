#!/usr/bin/env bash
# Session 40, the last device request (~250 s of command time left): s40a.sh cut to fit.
# On an H200: the prefill rows, stored for publishing (1 x 4,000 first; each shape is stored as
# it finishes), then the x-sharing kernel's tests. On an H100: the x-sharing kernel's tests,
# kernel_bench's prefill GEMMs, and, only if the tests passed, the engine's logits with it and
# prefill.py --ab prefill_silu_x_share=2 at 5 repetitions. Conditions as s40a.sh.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
pp4_tests() {
  timeout 60 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_kernels.py \
    -k "(silu_rounds and shared_x) or clusters_of_four" > $L/tests-pp4.log 2>&1
  pp4=$?; echo "pp4 tests rc=$pp4"; tail -n 2 $L/tests-pp4.log; [ $pp4 -ne 0 ] && tail -n 30 $L/tests-pp4.log
}
if grep -q H200 $L/gpu.txt; then
  ROADGATE_DATA_DIR=$OUT/data timeout 170 python3 benchmarks/prefill.py --profile > $L/prefill-publish.log 2>&1
  echo "prefill rc=$?"; grep -E "^prefill|recorded run|^ +[0-9]+x[0-9]+" $L/prefill-publish.log | head -20
  pp4_tests
  exit 0
fi
pp4_tests
timeout 40 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/prefill-gemm.log 2>&1
echo "kernel_bench rc=$?"; tail -n 13 $L/prefill-gemm.log
if [ $pp4 -eq 0 ]; then
  timeout 90 python3 benchmarks/prefill.py --no-store --no-torch --reps 5 --ab prefill_silu_x_share=2 \
    > $L/prefill-ab-x2.log 2>&1
  echo "prefill A/B x_share rc=$?"; grep -E "^ +[0-9]+x[0-9]+ " $L/prefill-ab-x2.log; tail -n 1 $L/prefill-ab-x2.log
  timeout 50 python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/gpu/test_model_cuda.py \
    -k "gemm_tma_keep and mlp-2" > $L/tests-engine.log 2>&1
  echo "engine test rc=$?"; tail -n 2 $L/tests-engine.log
fi
