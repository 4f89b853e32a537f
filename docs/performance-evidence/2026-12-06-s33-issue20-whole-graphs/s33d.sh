#!/usr/bin/env bash
# Session 33, lease 3 call 2: what the whole-step graphs cost at start-up. The engine's construction
# time and torch's reserved GPU memory after it, default config on dummy weights, before (e057200's
# engine and cuda_src) and after (HEAD), alternating, two rounds.
source benchmarks/device_env.sh
cat > /tmp/init.py <<'PY'
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from engine import LLM
t = time.perf_counter()
llm = LLM("dummy:smollm2-135m", backend="cuda")
torch.cuda.synchronize()
print(f"{sys.argv[2]}: init {time.perf_counter() - t:.2f} s, reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB, "
      f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, kv_cache_blocks {llm.block_manager.num_blocks}")
PY
mkdir -p /tmp/before && cp -r . /tmp/before/ 2>/dev/null; cp -r .whl/base/. /tmp/before/
for round in 1 2; do
  for side in before after; do
    dir=$([ $side = before ] && echo /tmp/before || echo $PWD)
    (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 120 python3 /tmp/init.py $dir $side) 2>&1 | grep -E "init|Error"
  done
done | tee $L/init.log
