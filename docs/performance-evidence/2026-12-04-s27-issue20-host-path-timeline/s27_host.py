"""Session 27: where a 1x4000 prefill's host time goes, untraced: perf_counter marks at the
critical path's points, relative to the request's arrival, medians of 9 warmed repetitions
(fresh prompts, prefix cache emptied). Run from a tree's root: python3 s27_host.py."""
import statistics, sys, time, functools
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import numpy as np, torch
from engine import LLM, SamplingParams
import engine.scheduler as S, engine.model_runner as M, engine.ops.cuda_ops as C

marks = {}
def mark_end(cls, name, key):
    """Marks when the first call of cls.name after marks.clear() returns."""
    attr = cls.__dict__[name]
    f = attr.__func__ if isinstance(attr, staticmethod) else attr
    @functools.wraps(f)
    def g(*a, **k):
        r = f(*a, **k)
        marks.setdefault(key, time.perf_counter())
        return r
    setattr(cls, name, staticmethod(g) if isinstance(attr, staticmethod) else g)
mark_end(S.Scheduler, "schedule", "schedule")
mark_end(M.ModelRunner, "_step_inputs", "inputs")
mark_end(M.ModelRunner, "_upload", "upload")
mark_end(M.ModelRunner, "_metadata", "metadata")
mark_end(C.CudaOps, "_prefill", "attention0")
mark_end(torch.cuda.CUDAGraph, "replay", "replay0")
backend, lengths = (sys.argv[1], [int(n) for n in sys.argv[2:]]) if len(sys.argv) > 1 else ("cuda", [4000, 8000])
llm = LLM("dummy:smollm2-135m", backend=backend, max_model_len=max(lengths) + 16)
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
gen = np.random.default_rng(0)
for tokens in lengths:
    rows = []
    for rep in range(12 if backend == 'cuda' else 4):
        llm.reset_prefix_cache()
        ids = gen.integers(100, 40000, tokens).tolist()
        if backend == 'cuda':
            torch.cuda.synchronize()
        marks.clear()
        out = llm.generate([ids], p)[0]
        if rep >= 3:
            a = out.arrival_time
            rows.append({k: (v - a) * 1e3 for k, v in marks.items()} | {"token": (out.token_times[0] - a) * 1e3})
    keys = sorted(rows[0], key=lambda k: statistics.median(r[k] for r in rows))
    print(f"1x{tokens}: ms after arrival, medians of {len(rows)}: " +
          ", ".join(f"{k} {statistics.median(r[k] for r in rows):.3f}" for k in keys))
