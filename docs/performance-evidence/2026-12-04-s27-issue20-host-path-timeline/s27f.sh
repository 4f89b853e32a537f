#!/usr/bin/env bash
# Session 27, call 9 (093d077, after three calls that staged the GGUF): the GPU suite's tests with
# the real model and a memcheck run on the tree whose prefill graphs launch their first piece
# before attention is planned; the published prefill runs (store in $OUT/data), each shape also
# traced once (--timeline); then 3 parts for the 128-row split against HEAD (.whl/exp3).
source benchmarks/device_env.sh
use_gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 || exit 3
export ROADGATE_TEST_MODEL=/tmp/model/smollm2.gguf
git_rev=093d077; echo "tree $git_rev" > $L/tree.txt
timeout 300 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -4
OUT=$L/suite SUITE_ONLY=memcheck timeout 150 bash benchmarks/gpu_suite.sh /tmp/model/smollm2.gguf > $L/memcheck-summary.log 2>&1
grep -E "ERROR SUMMARY|memcheck run done" $L/suite/memcheck.log | tail -2; rm -f $L/suite/suite.tgz
ROADGATE_DATA_DIR=$OUT/data timeout 240 python3 benchmarks/prefill.py --profile --timeline > $L/prefill.log 2>&1; echo "prefill rc=$?"
grep -E "^prefill|host ms|recorded|timeline|GPU time" $L/prefill.log; tail -5 $L/prefill.log
OUT=$L/cmp timeout 150 bash benchmarks/compare_trees.sh . .whl/exp3 "prefill@--no-store,--no-torch,--profile,--shapes,1x4000" > $L/cmp3.log 2>&1
echo "3 parts rc=$?"; tail -2 $L/cmp3.log; grep -h "attn_prefill" $L/cmp/*/1-prefill.log
rm -rf $L/cmp/trees
tar -czf $OUT/data.tgz -C $OUT data; tar -czf $OUT/logs.tgz -C $OUT logs
