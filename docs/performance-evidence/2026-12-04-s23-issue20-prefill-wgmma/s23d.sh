#!/usr/bin/env bash
# Session 23, call 4: the wgmma prefill kernel with 4 K/V stages in 128-row blocks (one barrier
# a tile, two tiles ahead) and warpgroup 0 skipping its all-masked last tile: GPU tests, then
# prefill against e0a868a (.whl/base), alternating.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
sha256sum cuda_src/* engine/ops/*.py engine/config.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k prefill -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; tail -2 $L/tests.log
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . prefill@--no-store,--no-torch,--profile prefill@--no-store,--no-torch,--profile > $L/cmp.log 2>&1; echo "cmp rc=$?"
rm -rf $L/cmp/trees
tar -czf $OUT/logs.tgz -C $OUT logs
tail -12 $L/cmp.log
for f in $(find $L/cmp -name '*prefill*.log' | sort); do echo "== $f"; grep -E 'attn_prefill|ours' $f | head -20; done
