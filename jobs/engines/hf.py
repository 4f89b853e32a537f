"""HF transformers as a peer: batched `generate` with left padding, same weights (the GGUF).

Two configurations: `hf` (eager, dynamic KV cache) and `hf-static` (HF's own fast
path: a static KV cache, with which generate compiles the forward with torch.compile).
Both are warmed up on the very batch shapes they are measured on (every batch of the
workload, once, with prompts of the same lengths and other tokens): a peer's first
full-batch call pays allocator growth, cuBLAS heuristics or compilation (measured on
the H200: 3,482 tok/s on the first call, 11,483 on the next), and it is measured at its best.

HF has no per-request stopping inside a batch, so each batch generates to its
longest request and every row is cut at its own max_tokens (and at EOS unless
the workload ignores it); the row's finish time is its last token's time. A
logits processor stamps the host clock once per decoding step, which gives
every token's time.
"""
from __future__ import annotations

import contextlib
import functools
import time

import torch

from jobs.engines import EngineRun, warmup_prompts
from jobs.metrics import Completion
from jobs.workloads import Workload


class _StepClock:
    """Called by generate() once per step, right before choosing the step's tokens."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def load(model_path, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from engine.model_source import alias_path
    path = alias_path(str(model_path))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    with _no_load_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).to(device)
    return model.eval(), tok


@contextlib.contextmanager
def _no_load_progress_bars():
    """Loading a GGUF, transformers draws two progress bars ("Converting and de-quantizing GGUF
    tensors", "Loading weights"), redrawn a few hundred times into every bench's and nightly
    task's log for a load of seconds. Turned off for the load only: transformers' switch
    covers the second; the first is plain tqdm, so the GGUF loader gets one that is disabled."""
    import transformers.modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging
    bars_were_on, gguf_tqdm = hf_logging.is_progress_bar_enabled(), gguf_loader.tqdm
    hf_logging.disable_progress_bar()
    gguf_loader.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        gguf_loader.tqdm = gguf_tqdm
        if bars_were_on:
            hf_logging.enable_progress_bar()


def run(workload: Workload, model: str, device: str = "cpu", batch_size: int = 256,
        dtype: str = "auto", static_cache: bool = False) -> EngineRun:
    import transformers
    from transformers import LogitsProcessorList
    torch_dtype = {"auto": torch.bfloat16 if device == "cuda" else torch.float32,
                   "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    hf_model, tok = load(model, device, torch_dtype)
    eos = tok.eos_token_id
    requests = workload.requests()
    prompts = [r.prompt if isinstance(r.prompt[0], int) else tok.apply_chat_template(
        r.prompt, add_generation_prompt=True, tokenize=True, return_dict=False) for r in requests]
    prompts = [list(p["input_ids"]) if isinstance(p, dict) else list(p) for p in prompts]
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos

    # The static cache makes generate compile the forward (torch.compile) on its first call.
    cache = {"cache_implementation": "static"} if static_cache else {}

    def generate(batch_prompts, new_tokens, clock=None):
        width = max(len(p) for p in batch_prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch_prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch_prompts], device=device)
        # ignore_eos: EOS does not stop the row, but may still be chosen, as in our engine and
        # llama.cpp (min_new_tokens would forbid it and change the greedy tokens).
        kwargs = {"eos_token_id": None} if workload.ignore_eos else {}
        with torch.no_grad():
            out = hf_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                                    do_sample=not workload.greedy, temperature=workload.temperature or None,
                                    top_p=workload.top_p, top_k=workload.top_k or None, pad_token_id=pad,
                                    logits_processor=LogitsProcessorList([clock] if clock else []),
                                    **cache, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        return out[:, width:].tolist()

    batches = [list(range(lo, min(lo + batch_size, len(prompts)))) for lo in range(0, len(prompts), batch_size)]
    warmup = warmup_prompts(prompts)
    for batch in batches:   # each measured shape once: (batch, width, new tokens)
        generate([warmup[i] for i in batch], max(requests[i].max_tokens for i in batch))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    completions = []
    start = time.perf_counter()
    for batch in batches:
        arrival = time.perf_counter()
        clock = _StepClock()
        rows = generate([prompts[i] for i in batch], max(requests[i].max_tokens for i in batch), clock)
        end = time.perf_counter()
        token_times = clock.times[1:] + [end]      # token k is known when step k + 1 begins
        for i, row in zip(batch, rows):
            tokens = row[:requests[i].max_tokens]
            reason = "length"
            if not workload.ignore_eos and eos in tokens:
                tokens = tokens[:tokens.index(eos) + 1]
                reason = "stop"
            times = token_times[:len(tokens)]
            completions.append(Completion(i, len(prompts[i]), tokens, reason, arrival, times, times[-1]))
    wall = time.perf_counter() - start
    extra = {"peak_gpu_mem_bytes": torch.cuda.max_memory_allocated()} if device == "cuda" else {}
    name = "hf-static" if static_cache else "hf"
    config = {"engine": name, "device": device, "dtype": str(torch_dtype).removeprefix("torch."),
              "batch_size": batch_size, "attention": hf_model.config._attn_implementation,
              "cache": "static" if static_cache else "dynamic", "version": transformers.__version__}
    return EngineRun(name, config, completions, wall, extra)
