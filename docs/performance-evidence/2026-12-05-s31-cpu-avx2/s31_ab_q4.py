"""cpu-small-q4 through ours, as the bench runs it (warm-up on the shapes, prefix cache reset
before each timed generate): median of 5 walls. Run from a tree's root; prints one line."""
import statistics, sys, time
sys.path.insert(0, ".")
from engine import LLM, SamplingParams
from jobs.workloads import get_workload
wl = get_workload(sys.argv[1] if len(sys.argv) > 1 else "cpu-small-q4")
llm = LLM("smollm2-135m-instruct", backend="torch", quantization=wl.quantization, dtype=wl.dtype if wl.dtype != "auto" else "auto")
reqs = wl.requests()
prompts = [llm.encode_prompt(r.prompt) for r in reqs]
params = [wl.sampling_params(r, i) for i, r in enumerate(reqs)]
llm.generate(prompts, params)
walls, ttfts, toks = [], [], 0
for _ in range(5):
    llm.reset_prefix_cache()
    t = time.perf_counter(); outs = llm.generate(prompts, params); walls.append(time.perf_counter() - t)
    ttfts.append(statistics.median(o.token_times[0] - o.arrival_time for o in outs))
    toks = sum(len(o.token_ids) for o in outs)
w = statistics.median(walls)
print(f"wall {w:.3f}s ({min(walls):.3f}-{max(walls):.3f})  {toks / w:.1f} tok/s  ttft p50 {statistics.median(ttfts):.3f}s")
