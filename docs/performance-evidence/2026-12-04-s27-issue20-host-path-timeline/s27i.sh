#!/usr/bin/env bash
# Session 27, call 15 (83d5af0: call 9's engine plus token-id prompts converted in one C loop):
# the prefill rows (store in $OUT/data), and the prefill-graph, prompt and kernel tests that run
# without the GGUF.
source benchmarks/device_env.sh
ROADGATE_DATA_DIR=$OUT/data timeout 200 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill|recorded|GPU time" $L/prefill.log
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -1 $L/tests.log
tar -czf $OUT/data.tgz -C $OUT data; tar -czf $OUT/logs.tgz -C $OUT logs
