"""Session 30: ModelRunner._step_inputs on the development CPU, each step shape built with the
vectorized per-token builder and row by row (model_runner._per_token_builder forced to each),
into the host slots of two buffers used in turn, as the runner does. Minimum over 7 rounds of
300 calls, µs. Run from a tree at or after 9313272: python3 s30_step_inputs.py"""
import sys, timeit
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import numpy as np, torch
import engine.model_runner as M
from engine.config import EngineConfig
from engine.input_batch import InputBatch
from engine.sampling_params import SamplingParams
from engine.scheduler import NewRequest, SchedulerOutput

CONTEXT = 8016
inputs = M.static_inputs(EngineConfig("dummy:smollm2-135m", max_model_len=CONTEXT), torch.device("cpu"))


def step_of(rows, tokens, start):
    """`rows` requests of `start` cached tokens, each computing `tokens` more."""
    batch = InputBatch(256, CONTEXT, 16)
    width = -(-(start + tokens) // 16)
    for i in range(rows):
        batch.add(NewRequest(i, np.arange(start + tokens, dtype=np.int32) % 1000, start + tokens, SamplingParams(), 0,
                             list(range(i * width, (i + 1) * width))))
    out = SchedulerOutput(request_ids=list(range(rows)), num_scheduled_tokens=[tokens] * rows,
                          num_computed_tokens=[start] * rows, samples=[True] * rows)
    return batch, M.StepLayout.of(np.arange(rows), out)


def build(batch, step):
    M.ModelRunner._step_inputs(batch, step, into=inputs.host_slots())
    inputs._turn = 1 - inputs._turn


for rows, tokens, start in [(1, 8000, 0), (1, 4000, 0), (2, 2000, 0), (4, 1000, 0), (8, 1000, 0), (16, 500, 0),
                            (4, 300, 0), (1, 1, 700), (2, 1, 700), (4, 1, 700), (16, 1, 700), (256, 1, 700)]:
    batch, step = step_of(rows, tokens, start)
    times = {}
    for name in ("_vectorized", "_row_by_row"):
        M._per_token_builder = lambda r, t, f=getattr(M, name): f
        times[name] = min(timeit.repeat(lambda: build(batch, step), number=300, repeat=7)) / 300 * 1e6
    print(f"{rows} x {tokens} (after {start}): vectorized {times['_vectorized']:.1f} us, "
          f"row by row {times['_row_by_row']:.1f} us")
