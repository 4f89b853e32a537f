"""Session 27: one traced 1x4000 repetition with Python function events (with_stack), kept as
a gzipped chrome trace, to see what the host does in the GPU's first-layer gaps."""
import gzip, json, shutil, sys, torch
from pathlib import Path
sys.path.insert(0, ".")
from torch.profiler import ProfilerActivity, profile, record_function
from benchmarks.prefill import REPETITION_LABEL, random_prompts, time_ours, timeline
from benchmarks.step_trace import traced_events
from engine import LLM

out = Path(sys.argv[1])
llm = LLM("dummy:smollm2-135m", backend="cuda", max_model_len=8016)
gen = torch.Generator().manual_seed(0)
for shape in [(1, 4000), (64, 1000)]:
    for _ in range(3):
        time_ours(llm, random_prompts(llm, *shape, gen))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        with record_function(REPETITION_LABEL):
            wall, ttft = time_ours(llm, random_prompts(llm, *shape, gen))
    path = out / f"trace-{shape[0]}x{shape[1]}.json"
    events = traced_events(prof, path)
    with open(path, "rb") as f, gzip.open(f"{path}.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    path.unlink()
    t = timeline(events)
    print(shape, f"wall {wall*1e3:.2f} ttft {ttft*1e3:.2f} before {t.before_us:.0f} span {t.span_us:.0f} busy {t.busy_us:.0f} after {t.after_us:.0f}")
    for g in t.gaps[:4]:
        print("  ", g)
