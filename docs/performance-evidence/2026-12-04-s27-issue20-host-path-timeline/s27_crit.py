"""Local: arrival -> the forward call of a 1xN prefill on the stubbed host path (static inputs)."""
import statistics, sys, time, torch, numpy as np
sys.path.insert(0, ".")
from benchmarks.host_profile import stub_model
from engine import LLM, SamplingParams
from engine.model_runner import static_inputs
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
llm = LLM("dummy:smollm2-135m", backend="torch", dtype="bfloat16", max_model_len=int(sys.argv[2]) if len(sys.argv) > 2 else N + 16, kv_cache_tokens=N + 64)
stub_model(llm)
llm.runner.inputs = static_inputs(llm.config, llm.runner.device)
fwd = llm.model.forward
t = {}
def forward(token_ids, *a):
    t.setdefault("fwd", time.perf_counter()); return fwd(token_ids, *a)
llm.model.forward = forward
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
rng = np.random.default_rng(0)
res = []
for rep in range(40):
    llm.reset_prefix_cache(); t.clear()
    out = llm.generate([rng.integers(100, 40000, N).tolist()], p)[0]
    if rep >= 5: res.append((t["fwd"] - out.arrival_time) * 1e6)
res.sort()
print(f"1x{N}: arrival -> forward call, us: median {statistics.median(res):.0f}, p10 {res[len(res)//10]:.0f}")
