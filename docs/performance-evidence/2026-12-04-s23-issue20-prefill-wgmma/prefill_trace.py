"""Session 23: where a prefill's wall time goes besides its kernels. One warmed generate of
each shape under torch.profiler (CPU + CUDA activities): the GPU's busy time (union of kernel
and copy intervals), its idle gaps, when the first GPU work starts after generate() begins,
and what the host was doing (innermost CPU op) during the largest gaps."""
import json, statistics, sys, tempfile, time
from pathlib import Path
import torch
from torch.profiler import ProfilerActivity, profile, record_function
sys.path.insert(0, ".")
from engine import LLM, SamplingParams

llm = LLM("dummy:smollm2-135m", backend="cuda", max_model_len=8016)
p = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
g = torch.Generator().manual_seed(0)
for batch, n in ((1, 4000), (1, 8000), (64, 1000)):
    prompts = lambda: torch.randint(100, 49000, (batch, n), generator=g).tolist()
    for _ in range(2):
        llm.reset_prefix_cache(); llm.generate(prompts(), p)
    llm.reset_prefix_cache(); ids = prompts()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("generate"):
            t0 = time.perf_counter(); outs = llm.generate(ids, p); torch.cuda.synchronize(); wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(f"{d}/t.json"); ev = json.loads(Path(f"{d}/t.json").read_text())["traceEvents"]
    gen = next(e for e in ev if e.get("name") == "generate" and e.get("ph") == "X")
    g0, g1 = gen["ts"], gen["ts"] + gen["dur"]
    gpu = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, gaps, end = 0.0, [], None
    for s, e, name in gpu:
        if end is not None and s > end: gaps.append((s - end, end, name))
        busy += max(0.0, e - max(s, end if end is not None else s)); end = e if end is None else max(end, e)
    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")]
    def host_at(t):
        inside = [e for e in cpu if e["ts"] <= t <= e["ts"] + e["dur"] and e["name"] != "generate"]
        return min(inside, key=lambda e: e["dur"])["name"][:60] if inside else "-"
    print(f"== {batch}x{n}: wall {wall*1e3:.2f} ms (traced), generate range {(g1-g0)/1e3:.2f} ms, TTFT {outs[0].ttft*1e3:.2f} ms")
    print(f"   first GPU work {(gpu[0][0]-g0)/1e3:.2f} ms after generate starts (host: {host_at(gpu[0][0]-1)}); last ends {(g1-end)/1e3:.2f} ms before it returns")
    print(f"   GPU busy {busy/1e3:.2f} ms of {(end-gpu[0][0])/1e3:.2f} ms span; {len(gaps)} gaps, {sum(x[0] for x in gaps)/1e3:.2f} ms idle; > 20 us: {sum(x[0] for x in gaps if x[0] > 20)/1e3:.2f} ms in {sum(1 for x in gaps if x[0] > 20)}")
    for dur, at, nxt in sorted(gaps, reverse=True)[:8]:
        print(f"   gap {dur:8.1f} us at +{(at-g0)/1e3:6.2f} ms before {nxt[:40]:40s} host: {host_at(at + dur/2)}")
