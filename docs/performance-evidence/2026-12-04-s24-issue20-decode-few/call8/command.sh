#!/usr/bin/env bash
# Session 24, call 8 (the machine still warm from call 7, the GGUF in /tmp/model): latency-b1 on
# the real model, the few-rows kernel (8) against the work list (0), alternating, not stored and
# without a preflight (the host was not checked quiet).
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD; ls /tmp/model/smollm2.gguf || exit 3; for few in 8 0 8 0; do ROADGATE_DECODE_FEW_ROWS=$few timeout 45 python3 -m jobs.cli bench --workload latency-b1 --model /tmp/model/smollm2.gguf --engine ours --backend cuda --no-store > $OUT/lb1-$few-$SECONDS.log 2>&1; echo "few=$few rc=$? $(grep -A1 TPOT $OUT/lb1-$few-*.log | tail -1)"; done
