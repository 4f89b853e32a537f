"""llama.cpp as a peer, through llama-cpp-python on CPU: the CPU floor.

It loads the same GGUF as our engine and is fed the very token ids our engine
sees: random-token prompts as they are, chat prompts rendered and encoded by our
engine's own tokenizer and chat template. llama-cpp-python serves one sequence
at a time, so the requests, all arriving when the run starts, are served in
order; a request's TTFT includes its wait in that queue, as it does for ours.
Every token is stamped with the host clock as the generator yields it.

Warm-up: one request of the longest measured prompt and output lengths (it serves one
sequence at a time, so that is its largest shape), other tokens; then its context is
reset, so the first measured prompt starts with nothing cached. Between measured
requests llama-cpp-python keeps the previous prompt's matching prefix, as shipped.
"""
from __future__ import annotations

import time

import torch

from jobs.engines import EngineRun, warmup_prompts
from jobs.metrics import Completion
from jobs.workloads import Workload


def prompt_token_ids(workload: Workload, model: str) -> list[list[int]]:
    """The workload's prompts as our engine's tokenizer and chat template turn them into ids."""
    requests = workload.requests()
    if workload.source == "random_tokens":
        return [list(r.prompt) for r in requests]
    from engine.model_source import resolve
    tokenizer = resolve(model).tokenizer
    if tokenizer is None:
        raise ValueError(f"model {model!r} has no tokenizer to render the chat prompts of {workload.name!r}")
    return [tokenizer.encode_chat(r.prompt) for r in requests]


def load(model: str, n_ctx: int, n_threads: int, n_batch: int, seed: int):
    import llama_cpp
    from engine.model_source import alias_path
    path = alias_path(model)
    if path.suffix != ".gguf" or not path.is_file():
        raise ValueError(f"llama.cpp needs a GGUF file; {model!r} is not one")
    return llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=n_threads,
                           n_threads_batch=n_threads, n_gpu_layers=0, seed=seed, verbose=False)


def run(workload: Workload, model: str, device: str = "cpu", n_threads: int | None = None,
        n_batch: int = 512) -> EngineRun:
    if device != "cpu":
        raise ValueError("the llama.cpp peer runs on CPU only (it is the CPU floor)")
    import llama_cpp
    # The same thread count torch gives our engine and HF on this host, so the floor is not handicapped.
    n_threads = n_threads or torch.get_num_threads()
    requests = workload.requests()
    prompts = prompt_token_ids(workload, model)
    n_ctx = max(len(p) for p in prompts) + max(r.max_tokens for r in requests)
    llm = load(model, n_ctx, n_threads, n_batch, workload.seed)
    eos = llm.token_eos()
    sampling = dict(temp=workload.temperature, top_p=workload.top_p, top_k=workload.top_k,
                    # llama-cpp-python's defaults (min_p 0.05) would filter what the other engines keep.
                    min_p=0.0, typical_p=1.0, repeat_penalty=1.0)

    def generate(index: int, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float], str]:
        llm.set_seed(workload.request_seed(index))
        tokens, times, reason = [], [], "length"
        for token in llm.generate(prompt, **sampling):
            tokens.append(token)
            times.append(time.perf_counter())
            if not workload.ignore_eos and token == eos:
                reason = "stop"
                break
            if len(tokens) == max_tokens:
                break
        return tokens, times, reason

    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    generate(longest, warmup_prompts([prompts[longest]])[0], max(r.max_tokens for r in requests))
    llm.reset()                  # a cold cache for the timed run: no prompt starts out cached
    completions = []
    start = time.perf_counter()
    for i, (prompt, request) in enumerate(zip(prompts, requests)):
        tokens, times, reason = generate(i, prompt, request.max_tokens)
        completions.append(Completion(i, len(prompt), tokens, reason, start, times, times[-1]))
    wall = time.perf_counter() - start
    config = {"engine": "llamacpp", "device": "cpu", "version": llama_cpp.__version__, "n_threads": n_threads,
              "n_batch": n_batch}
    return EngineRun("llamacpp", config, completions, wall)
