"""Marks along a 1 x N prefill's host path on this CPU (stubbed model, static inputs, torch backend):
entry (>) and return (<) of the first call of each function, µs after the request's arrival,
medians of 50 warmed repetitions (fresh prompts, prefix cache emptied). Session 27's s27_marks.py, finer."""
import functools, statistics, sys, time
sys.path.insert(0, ".")
import numpy as np
from benchmarks.host_profile import stub_model
from engine import LLM, SamplingParams
from engine.model_runner import static_inputs
import engine.scheduler as S, engine.block_manager as B, engine.model_runner as M, engine.input_batch as IB
import engine.step_upload as U
marks = {}
def mark(cls, name, key):
    attr = cls.__dict__[name]; f = attr.__func__ if isinstance(attr, staticmethod) else attr
    @functools.wraps(f)
    def g(*a, **k):
        marks.setdefault(key + ">", time.perf_counter()); r = f(*a, **k); marks.setdefault(key + "<", time.perf_counter()); return r
    setattr(cls, name, staticmethod(g) if isinstance(attr, staticmethod) else g)
for c, n in [(S.Scheduler, "schedule"), (B.BlockManager, "acquire_cached_prefix"), (B.BlockManager, "allocate"),
             (S.Scheduler, "_count_scheduled"), (M.ModelRunner, "launch"), (IB.InputBatch, "apply"),
             (U.StaticInputs, "host_slots"), (M.ModelRunner, "_step_inputs"), (M.ModelRunner, "_sampling_arrays"),
             (U.StaticInputs, "upload"), (M.ModelRunner, "_token_ids"), (M.ModelRunner, "_metadata")]:
    mark(c, n, n)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
llm = LLM("dummy:smollm2-135m", backend="torch", dtype="bfloat16", max_model_len=N + 16, kv_cache_tokens=N + 64)
stub_model(llm)
llm.runner.inputs = static_inputs(llm.config, llm.runner.device)
fwd = llm.model.forward
def forward(token_ids, *a):
    marks.setdefault("forward>", time.perf_counter()); return fwd(token_ids, *a)
llm.model.forward = forward
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
rng = np.random.default_rng(0)
rows = []
for rep in range(60):
    llm.reset_prefix_cache(); marks.clear()
    out = llm.generate([rng.integers(100, 40000, N).tolist()], p)[0]
    if rep >= 10: rows.append({k: (v - out.arrival_time) * 1e6 for k, v in marks.items()})
keys = sorted(rows[0], key=lambda k: statistics.median(r[k] for r in rows))
for k in keys: print(f"  {k:<24} {statistics.median(r[k] for r in rows):7.1f}")
