#!/usr/bin/env bash
# Session 26, call 2: split-key prefill with a compile-time SPLIT (plain kernel as before), 128-row tiles for
# long queries when keys can be split: prefill kernel tests, then c1da0cd vs this tree on prefill.py (twice,
# alternating), then this tree at forced tile heights on one 4,000/3,000-token prompt.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; L=$OUT/logs; mkdir -p $L; nvidia-smi -L > $L/gpu.txt; sha256sum cuda_src/* engine/*.py engine/ops/*.py > $L/code.sha256
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_kernels.py -k "prefill" -p no:cacheprovider > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "FAILED|passed|failed" $L/tests.log | tail -5
S=prefill@--no-store,--no-torch,--profile,--shapes,1x4000,1x3000,1x2000,1x8000,4x4000,64x1000
OUT=$L/cmp timeout 330 bash benchmarks/compare_trees.sh .whl/base . $S $S 2>&1 | tail -5
for mt in 1 2; do ROADGATE_PREFILL_M_TILES=$mt timeout 60 python3 benchmarks/prefill.py --no-store --no-torch --profile --shapes 1x4000 1x3000 > $L/forced-m$mt.log 2>&1; echo "m$mt: $(grep -E '^prefill|attn_prefill' $L/forced-m$mt.log | tr -s ' ' | tr '\n' '|')"; done
cd $L && tar czf $OUT/logs.tgz . 
