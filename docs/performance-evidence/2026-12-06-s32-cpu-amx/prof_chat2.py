"""chat-16x64 through ours (float32, torch backend), the measured generate only, under torch.profiler."""
import sys, time
sys.path.insert(0, ".")
from torch.profiler import profile, ProfilerActivity
from jobs.workloads import get_workload
from jobs.engines import warmup_prompts
from engine import LLM, SamplingParams
w = get_workload("chat-16x64")
llm = LLM("smollm2-135m-instruct", backend="torch", max_num_seqs=256, max_num_batched_tokens=8192)
reqs = w.requests()
prompts = [llm.encode_prompt(r.prompt) for r in reqs]
params = [w.sampling_params(r, i) for i, r in enumerate(reqs)]
print("prompt tokens", [len(p) for p in prompts], sum(len(p) for p in prompts))
llm.generate(warmup_prompts(prompts), [SamplingParams(max_tokens=r.max_tokens, ignore_eos=True) for r in reqs])
for _ in range(2):
    llm.reset_prefix_cache(); t = time.perf_counter(); llm.generate(prompts, params); print("wall", time.perf_counter() - t)
llm.reset_prefix_cache()
with profile(activities=[ProfilerActivity.CPU]) as p:
    llm.generate(prompts, params)
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
