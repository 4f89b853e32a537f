#!/usr/bin/env bash
# Session 27, call 13 (83d5af0 + cuBLAS workspace memsets moved beside the kernel before them in
# captured graphs, uncommitted; after three calls that staged the GGUF): the GPU suite's tests with
# the real model; HEAD (.whl/base) against this tree on prefill, interleaved, two rounds; then the
# prefill rows on this tree into $OUT/data (published only if the change is kept).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf ROADGATE_REPORT_DIR=$L
timeout 280 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -4
cat $L/hoisted_memsets.json; echo
OUT=$L/cmp timeout 240 bash benchmarks/compare_trees.sh .whl/base . "prefill@--no-store,--no-torch,--profile,--shapes,1x4000,64x1000" "prefill@--no-store,--no-torch,--profile,--shapes,1x4000,64x1000" > $L/cmp.log 2>&1
echo "cmp rc=$?"; tail -4 $L/cmp.log; grep -h "GPU time\|Memset" $L/cmp/*/[12]-prefill.log | head -16
ROADGATE_DATA_DIR=$OUT/data timeout 200 python3 benchmarks/prefill.py --profile > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill|recorded|GPU time" $L/prefill.log
rm -rf $L/cmp/trees
tar -czf $OUT/data.tgz -C $OUT data; tar -czf $OUT/logs.tgz -C $OUT logs
