import sys, timeit, cProfile, pstats
sys.path.insert(0, ".")
import numpy as np, torch
import engine.model_runner as M
from engine.config import EngineConfig
from engine.input_batch import InputBatch
from engine.sampling_params import SamplingParams
from engine.scheduler import NewRequest, SchedulerOutput
CONTEXT = 8016
inputs = M.static_inputs(EngineConfig("dummy:smollm2-135m", max_model_len=CONTEXT), torch.device("cpu"))
def step_of(rows, tokens, start):
    batch = InputBatch(256, CONTEXT, 16)
    width = -(-(start + tokens) // 16)
    for i in range(rows):
        batch.add(NewRequest(i, np.arange(start + tokens, dtype=np.int32) % 1000, start + tokens, SamplingParams(), 0,
                             list(range(i * width, (i + 1) * width))))
    out = SchedulerOutput(request_ids=list(range(rows)), num_scheduled_tokens=[tokens] * rows,
                          num_computed_tokens=[start] * rows, samples=[True] * rows)
    return batch, M.StepLayout.of(np.arange(rows), out)
pad = int(sys.argv[1]) if len(sys.argv) > 1 else 0
def build(batch, step):
    M.ModelRunner._step_inputs(batch, step, pad_tokens_to=pad or None, into=inputs.host_slots())
    inputs._turn = 1 - inputs._turn
for rows, tokens in [(1, 4000), (1, 8000), (8, 1000)]:
    batch, step = step_of(rows, tokens, 0)
    t = min(timeit.repeat(lambda: build(batch, step), number=300, repeat=7)) / 300 * 1e6
    print(f"{rows} x {tokens}: {t:.1f} us")
batch, step = step_of(1, 4000, 0)
pr = cProfile.Profile(); pr.enable()
for _ in range(300): build(batch, step)
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(14)
