#!/usr/bin/env bash
# Session 32, call 4 (machine still warm, GGUF staged): the whole GPU suite on 2c255e7 with the real
# GGUF, then benchmarks/prefill.py --profile recorded (this H100's own series; plain torch beside).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
echo "tree $(cat .whl/HEAD)" > $L/tree.txt
timeout 200 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x > $L/gpu-tests-all.log 2>&1
echo "tests rc=$?"; tail -1 $L/gpu-tests-all.log
ROADGATE_DATA_DIR=$OUT/data timeout 150 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill|attn_|recorded|ours:" $L/prefill.log
tar -czf $OUT/data.tgz -C $OUT data
tar -czf $OUT/logs.tgz -C $OUT logs
