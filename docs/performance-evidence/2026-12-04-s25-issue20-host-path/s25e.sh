#!/usr/bin/env bash
# Session 25, call 14 (run inline, on the machine call 13 left warm with the GGUF in /tmp/model):
# nano-bench on the real GGUF as published (--preflight: quiet host before and throughout,
# warmed, cold prefix cache), stored in $OUT/data.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 ROADGATE_DATA_DIR=$OUT/data; L=$OUT/logs; mkdir -p $L; sha256sum cuda_src/* engine/*.py engine/ops/*.py benchmarks/*.py > $L/code.sha256; ls -la /tmp/model/smollm2.gguf && timeout 200 python3 -m jobs.cli bench --workload nano-bench --model /tmp/model/smollm2.gguf --engine ours --backend cuda --preflight > $L/nano-bench.log 2>&1; echo "nano-bench rc=$?"; tail -5 $L/nano-bench.log; tar -czf $OUT/logs.tgz -C $OUT logs data
