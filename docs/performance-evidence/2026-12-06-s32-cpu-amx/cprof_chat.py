import sys, cProfile, pstats
sys.path.insert(0, ".")
from jobs.workloads import get_workload
from jobs.engines import warmup_prompts
from engine import LLM, SamplingParams
w = get_workload("chat-16x64")
llm = LLM("smollm2-135m-instruct", backend="torch", max_num_seqs=256, max_num_batched_tokens=8192)
reqs = w.requests()
prompts = [llm.encode_prompt(r.prompt) for r in reqs]
params = [w.sampling_params(r, i) for i, r in enumerate(reqs)]
llm.generate(warmup_prompts(prompts), [SamplingParams(max_tokens=r.max_tokens, ignore_eos=True) for r in reqs])
llm.reset_prefix_cache()
pr = cProfile.Profile(); pr.enable(); llm.generate(prompts, params); pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(22)
