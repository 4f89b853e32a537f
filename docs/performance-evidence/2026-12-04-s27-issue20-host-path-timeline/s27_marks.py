"""Local: marks along a 1xN prefill's host path (stubbed model, static inputs), us after arrival."""
import statistics, sys, time, functools, numpy as np
sys.path.insert(0, ".")
from benchmarks.host_profile import stub_model
from engine import LLM, SamplingParams
from engine.model_runner import static_inputs
import engine.scheduler as S, engine.block_manager as B, engine.model_runner as M, engine.input_batch as IB, engine.step_upload as U, engine.llm as L
marks = {}
def mark(cls, name, begin=False):
    attr = cls.__dict__[name]; f = attr.__func__ if isinstance(attr, staticmethod) else attr
    @functools.wraps(f)
    def g(*a, **k):
        if begin: marks.setdefault(name + "<", time.perf_counter())
        r = f(*a, **k); marks.setdefault(name, time.perf_counter()); return r
    setattr(cls, name, staticmethod(g) if isinstance(attr, staticmethod) else g)
for c, n, b in [(S.Scheduler, "schedule", True), (B.BlockManager, "acquire_cached_prefix", True), (B.BlockManager, "grow", True),
                (S.Scheduler, "_count_scheduled", True), (IB.InputBatch, "apply", True), (M.ModelRunner, "_step_inputs", False),
                (M.ModelRunner, "_sampling_arrays", False), (U.StaticInputs, "upload", False), (M.ModelRunner, "_token_ids", False)]:
    mark(c, n, b)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
llm = LLM("dummy:smollm2-135m", backend="torch", dtype="bfloat16", max_model_len=N + 16, kv_cache_tokens=N + 64)
stub_model(llm)
llm.runner.inputs = static_inputs(llm.config, llm.runner.device)
fwd = llm.model.forward
def forward(token_ids, *a):
    marks.setdefault("forward", time.perf_counter()); return fwd(token_ids, *a)
llm.model.forward = forward
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
rng = np.random.default_rng(0)
rows = []
for rep in range(60):
    llm.reset_prefix_cache(); marks.clear()
    out = llm.generate([rng.integers(100, 40000, N).tolist()], p)[0]
    if rep >= 10: rows.append({k: (v - out.arrival_time) * 1e6 for k, v in marks.items()})
keys = sorted(rows[0], key=lambda k: statistics.median(r[k] for r in rows))
print(" | ".join(f"{k} {statistics.median(r[k] for r in rows):.0f}" for k in keys))
