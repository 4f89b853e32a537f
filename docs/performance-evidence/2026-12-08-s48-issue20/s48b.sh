#!/usr/bin/env bash
# Session 48, carrying .whl, on an H100 (not the rows' card): the GPU checks of d9daf1b (the
# torch sampler's top-k cut by value) and 8e7fcf8 (draws from 23 bits, never u = 1) on dummy
# weights. First every sampling GPU test twice (s47d.sh; fresh random logits and seeds each
# round), then every GPU test and a compute-sanitizer memcheck run (gpu_suite.sh): issue 20's
# "every GPU test passes, compute-sanitizer clean" on the code as it now stands.
source benchmarks/device_env.sh
bash docs/performance-evidence/2026-12-07-s47-issue20/s47d.sh
export ROADGATE_TEST_MODEL=dummy:smollm2-135m
OUT=$OUT/suite SUITE_ONLY="tests memcheck" timeout 330 bash benchmarks/gpu_suite.sh dummy:smollm2-135m > $L/suite.log 2>&1
echo "suite rc=$?"; tail -n 4 $L/suite.log
pack_out
