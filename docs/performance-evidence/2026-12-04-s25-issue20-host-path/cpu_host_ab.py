# Session 25, development CPU: host µs of a decode step on the graph path (stub model, stub graphs), for either tree:
#   .venv/bin/python cpu_host_ab.py TREE BATCH   (TREE: a checkout, e.g. `git archive d930c11 | tar -x -C /tmp/base`)
# Run alternately: d930c11 265.1, HEAD 267.5, d930c11 258.8, HEAD 246.4 µs at batch 1.
"""Host µs of a decode step on the graph path, CPU, stub model and stub graphs; works on either tree."""
import sys, time, statistics
tree, B = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)
import torch
torch.set_num_threads(1)
from engine import LLM, SamplingParams
from engine.model_runner import static_inputs
import benchmarks.host_profile as hp

class StubGraphs:
    def __init__(self, llm, n): self.llm, self.sampled = llm, torch.zeros(n, dtype=torch.int64)
    def bucket_for(self, b): return b
    def replay(self, bucket, greedy):
        v = self.llm.runner.inputs.views
        self.llm.model.ops.take_pending_tokens(v["token_ids"][:bucket], v["source_rows"][:bucket], self.sampled)
        return self.sampled[:bucket].zero_()

llm = LLM("dummy:smollm2-135m", backend="torch", dtype="bfloat16", kv_cache_tokens=B * 400, max_num_seqs=B)
hp.stub_model(llm)
llm.runner.inputs = static_inputs(llm.config, llm.runner.device)
llm.runner.graphs = StubGraphs(llm, B)
def one():
    for i in range(B):
        llm.add_request(list(range(100 + i, 228 + i)), SamplingParams(max_tokens=128, ignore_eos=True))
    llm.step()
    t = time.perf_counter(); n = 0
    while llm.has_unfinished():
        llm.step(); n += 1
    return (time.perf_counter() - t) / n * 1e6
one()
print(tree, "B", B, "us/step", round(statistics.median(one() for _ in range(7)), 1))
