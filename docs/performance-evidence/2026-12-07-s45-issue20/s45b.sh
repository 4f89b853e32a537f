#!/usr/bin/env bash
# Session 45, any card, after s45a.sh on the same machine: the fused gate|up's tiles chosen per
# step (prefill_silu_width=0: gemm_tma_width's rounds, the cooperative 256-row tiles at 4,096
# and 8,192 rows) against the ping-pong tiles always (the default, 128). Call 12's kernel bench
# had the cooperative tiles ahead once the SiLU lost its called reciprocal (60.5 against 66.1 us
# at 8,192 rows). prefill.py --ab: both engines in one process, each warmed up on the measured
# shapes, repetitions alternating on the same fresh prompts, our prefix caches emptied before
# every one. Then the kernel bench's GEMMs (s45a's run stopped on a NameError, fixed), and, in a
# fresh process, the GPU tests that s45a's suite lost to a broken CUDA context after the
# text-prompt tests failed on dummy weights (no tokenizer): the engine test that runs the
# chosen tiles against cuBLAS among them.
source benchmarks/device_env.sh
echo "tree $(cat .whl/HEAD) + working changes:" > $L/tree.txt; cat .whl/DIFF >> $L/tree.txt; cat $L/gpu.txt
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
timeout 200 python3 benchmarks/prefill.py --no-store --no-torch --reps 7 --ab prefill_silu_width=0 > $L/prefill-ab-width.log 2>&1
echo "prefill ab rc=$?"; grep -E "^prefill |B / A|ratio" $L/prefill-ab-width.log
E=docs/performance-evidence/2026-12-07-s45-issue20
timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-packed.log 2>&1; echo "bench rc=$?"; grep gate_up $L/kernel-bench-packed.log
patch -R -p1 < $E/packed-epilogue.diff > /dev/null || exit 5
timeout 100 python3 benchmarks/kernel_bench.py --only prefill_gemm > $L/kernel-bench-fast-rcp.log 2>&1; echo "bench fast-rcp rc=$?"; grep gate_up $L/kernel-bench-fast-rcp.log
patch -p1 < $E/packed-epilogue.diff > /dev/null || exit 6
timeout 240 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu -k "gemm_tma_keep or one_sequence_steps or kv_cache_shorter or programmatic_edges or two_engines_differing" > $L/tests-width.log 2>&1
echo "tests rc=$?"; tail -n 1 $L/tests-width.log; grep -E "^(E |FAILED)" $L/tests-width.log | head -10
