"""Session 30 (no GPU lent): the host's share of the prefill rows on the development CPU, for
the tree in the current directory, so two trees can be run in turn.

The model is stubbed (benchmarks/host_profile.py's stub_model: the forward pass and logits
are zeros), so what is timed is host work only. Printed, medians of the repetitions after
warm-up, fresh random prompts and an emptied prefix cache every repetition:
  1x4000 crit   µs from the request's arrival to the forward call (TTFT's host part)
  BxN generate  ms of the whole generate() call (validation, adding, steps, outputs)
Run from a tree's root: python3 s30_host_ab.py"""
import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import numpy as np
from benchmarks.host_profile import stub_model
from engine import LLM, SamplingParams

params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
rng = np.random.default_rng(0)


def engine(batch, tokens):
    llm = LLM("dummy:smollm2-135m", backend="torch", dtype="bfloat16", max_model_len=tokens + 16,
              kv_cache_tokens=batch * (tokens + 64))
    stub_model(llm)
    return llm


def crit(tokens, reps=40):
    llm = engine(1, tokens)
    forward, marks = llm.model.forward, {}
    def marked(token_ids, *rest):
        marks.setdefault("forward", time.perf_counter())
        return forward(token_ids, *rest)
    llm.model.forward = marked
    times = []
    for rep in range(reps + 5):
        llm.reset_prefix_cache()
        marks.clear()
        out = llm.generate([rng.integers(100, 40000, tokens).tolist()], params)[0]
        if rep >= 5:
            times.append((marks["forward"] - out.arrival_time) * 1e6)
    return statistics.median(times)


def wall(batch, tokens, reps=9):
    llm = engine(batch, tokens)
    times = []
    for rep in range(reps + 2):
        prompts = [rng.integers(100, 40000, tokens).tolist() for _ in range(batch)]
        llm.reset_prefix_cache()
        start = time.perf_counter()
        llm.generate(prompts, params)
        if rep >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


print(f"1x4000 crit {crit(4000):.0f} us | 1x8000 crit {crit(8000):.0f} us | "
      f"64x1000 generate {wall(64, 1000):.2f} ms | 1x4000 generate {wall(1, 4000):.2f} ms")
