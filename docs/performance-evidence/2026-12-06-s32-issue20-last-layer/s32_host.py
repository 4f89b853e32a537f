"""Session 32 (session 29's s29_host.py, the upload now StaticInputs.upload): the host's path from the request's arrival to the first attention launch of a
1 x N prefill, untraced, finer than session 27's s27_host.py: perf_counter marks at the entry
(">") and return ("<") of the first call of each function after marks.clear(), as ms after
the request's arrival, medians of 9 warmed repetitions (fresh prompts, prefix cache emptied).
Run from a tree's root: python3 s29_host.py [N ...]."""
import functools, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import numpy as np, torch
from engine import LLM, SamplingParams
import engine.scheduler as S, engine.model_runner as M, engine.ops.cuda_ops as C, engine.model as MD
import engine.prefill_graphs as PG, engine.ops.cuda_build as CB, engine.step_upload as SU

marks = {}
def marked(cls, name, key):
    attr = cls.__dict__[name]
    f = attr.__func__ if isinstance(attr, staticmethod) else attr
    @functools.wraps(f)
    def g(*a, **k):
        marks.setdefault(key + ">", time.perf_counter())
        r = f(*a, **k)
        marks.setdefault(key + "<", time.perf_counter())
        return r
    setattr(cls, name, staticmethod(g) if isinstance(attr, staticmethod) else g)
for cls, name, key in [(S.Scheduler, "schedule", "schedule"), (M.ModelRunner, "_step_inputs", "inputs"),
                       (M.ModelRunner, "_sampling_arrays", "sampling"), (SU.StaticInputs, "upload", "upload"),
                       (M.ModelRunner, "_token_ids", "token_ids"), (PG.PrefillGraphs, "run", "graphs"),
                       (torch.cuda.CUDAGraph, "replay", "replay0"), (M.ModelRunner, "_metadata", "metadata"),
                       (C.CudaOps, "plan_step", "plan"), (MD.LlamaModel, "attend", "attend"),
                       (C.CudaOps, "_attention", "_attention"), (C.CudaOps, "prefill_m_tiles", "m_tiles"),
                       (C.CudaOps, "prefill_split", "split"), (CB.Kernel, "__call__", "launch")]:
    marked(cls, name, key)
lengths = [int(n) for n in sys.argv[1:]] or [4000, 8000]
llm = LLM("dummy:smollm2-135m", backend="cuda", max_model_len=max(lengths) + 16)
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
gen = np.random.default_rng(0)
for tokens in lengths:
    rows = []
    for rep in range(12):
        llm.reset_prefix_cache()
        ids = gen.integers(100, 40000, tokens).tolist()
        torch.cuda.synchronize()
        marks.clear()
        out = llm.generate([ids], p)[0]
        if rep >= 3:
            a = out.arrival_time
            rows.append({k: (v - a) * 1e3 for k, v in marks.items()} | {"token": (out.token_times[0] - a) * 1e3})
    keys = sorted(rows[0], key=lambda k: statistics.median(r[k] for r in rows))
    print(f"1x{tokens}: ms after arrival, medians of {len(rows)}:")
    for k in keys:
        print(f"  {k:<12} {statistics.median(r[k] for r in rows):7.3f}")
