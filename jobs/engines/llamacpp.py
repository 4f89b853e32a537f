"""llama.cpp as a peer, through llama-cpp-python on CPU: the CPU floor.

It loads the same GGUF as our engine and is fed the very token ids our engine
sees: random-token prompts as they are, chat prompts rendered and encoded by our
engine's own tokenizer and chat template. All requests arrive when the run starts.

Measured at its best: a greedy workload runs through llama.cpp's own continuous batching
(`BatchedGreedy`, its C API: every request's sequence shares each decode call, as with
llama-server's parallel slots), warmed up by one whole run of the measured shapes (other
tokens), its KV cache emptied before the timed run. A sampled workload runs one request at a
time through llama-cpp-python's generator and sampler (its Python API has no batched
sampling), warmed up by one request of the longest shapes, then reset; a request's TTFT then
includes its wait in that queue, as it does for ours. Every token is stamped with the host
clock as it comes out.
"""
from __future__ import annotations

import logging
import time

import numpy as np
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
    return llama_cpp.Llama(str(gguf_path(model)), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                           n_threads=n_threads, n_threads_batch=n_threads, n_gpu_layers=0, seed=seed, verbose=False)


def gguf_path(model: str):
    from engine.model_source import alias_path
    path = alias_path(model)
    if path.suffix != ".gguf" or not path.is_file():
        raise ValueError(f"llama.cpp needs a GGUF file; {model!r} is not one")
    return path


def run(workload: Workload, model: str, device: str = "cpu", n_threads: int | None = None,
        n_batch: int = 512) -> EngineRun:
    if device != "cpu":
        raise ValueError("the llama.cpp peer runs on CPU only (it is the CPU floor)")
    import llama_cpp
    # The same thread count torch gives our engine and HF on this host, so the floor is not handicapped.
    n_threads = n_threads or torch.get_num_threads()
    requests = workload.requests()
    prompts = prompt_token_ids(workload, model)
    config = {"engine": "llamacpp", "device": "cpu", "version": llama_cpp.__version__, "n_threads": n_threads,
              "n_batch": n_batch}
    if workload.greedy:
        parallel = min(len(requests), llama_cpp.llama_max_parallel_sequences())
        completions, wall = _run_batched(workload, model, prompts, requests, n_threads, n_batch, parallel)
        config["n_parallel"] = parallel
    else:
        completions, wall = _run_sequential(workload, model, prompts, requests, n_threads, n_batch)
    return EngineRun("llamacpp", config, completions, wall)


def _run_sequential(workload, model, prompts, requests, n_threads, n_batch):
    """One request at a time through llama-cpp-python's generator and its own sampler."""
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
    return completions, time.perf_counter() - start


def _run_batched(workload, model, prompts, requests, n_threads, n_batch, parallel):
    with BatchedGreedy(gguf_path(model), parallel, max(len(p) + r.max_tokens for p, r in zip(prompts, requests)),
                       n_threads, n_batch) as llm:
        llm.generate(warmup_prompts(prompts), [r.max_tokens for r in requests], ignore_eos=True)
        start = time.perf_counter()   # generate() starts with an empty KV cache: nothing is cached
        completions = llm.generate(prompts, [r.max_tokens for r in requests], workload.ignore_eos)
        return completions, time.perf_counter() - start


class BatchedGreedy:
    """llama.cpp's own continuous batching, through its C API (as llama-server's parallel slots
    and llama-batched do): up to `parallel` sequences share every llama_decode call, prompts
    prefilled together and decode steps one token per live sequence; a finished sequence's KV
    is dropped and the next request takes its slot. Greedy: argmax of each row's logits.
    Flash attention is left at llama.cpp's default (auto: on, on CPU; 95.7 vs 81.5 tok/s off).
    Batched it serves 8 cpu-small requests at 95-127 tok/s where the one-at-a-time generator
    gives 70-85 (cpu-avx512_bf16): how a user serving a batch would run it."""

    def __init__(self, path, parallel: int, max_seq_len: int, n_threads: int, n_batch: int):
        import llama_cpp as lc
        self.lc, self.parallel, self.n_batch = lc, parallel, n_batch
        # llama-cpp-python routes llama.cpp's log through this logger: errors only, as verbose=False.
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self.model = lc.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise ValueError(f"llama.cpp cannot load {path}")
        vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab, self.eos = lc.llama_vocab_n_tokens(vocab), lc.llama_vocab_eos(vocab)
        params = lc.llama_context_default_params()
        params.n_ctx = parallel * -(-max_seq_len // 256) * 256   # whole 256-cell pages per sequence
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = n_threads
        self.ctx = lc.llama_init_from_model(self.model, params)
        self.batch = lc.llama_batch_init(n_batch, 0, 1)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)
        self.lc.llama_model_free(self.model)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> list[int]:
        """Feed (token, position, slot, wants logits) items; the argmax of each wanted row, in order."""
        lc, batch, picks = self.lc, self.batch, []
        for start in range(0, len(items), self.n_batch):
            chunk = items[start:start + self.n_batch]
            batch.n_tokens = len(chunk)
            for j, (token, pos, slot, wants) in enumerate(chunk):
                batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = token, pos, 1, wants
                batch.seq_id[j][0] = slot
            if lc.llama_decode(self.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (KV cache full?)")
            picks += [int(np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ctx, j), shape=(self.n_vocab,)).argmax())
                      for j, item in enumerate(chunk) if item[3]]
        return picks

    def generate(self, prompts: list[list[int]], max_tokens: list[int], ignore_eos: bool) -> list[Completion]:
        memory = self.lc.llama_get_memory(self.ctx)
        self.lc.llama_memory_clear(memory, True)
        start = time.perf_counter()
        waiting = list(range(len(prompts)))
        live: dict[int, int] = {}                # slot -> request
        tokens = [[] for _ in prompts]
        times = [[] for _ in prompts]
        reasons = ["length"] * len(prompts)
        done: list[Completion] = []
        while waiting or live:
            items = []
            for slot in range(self.parallel):    # free slots take the next requests, prefilled in this call
                if slot not in live and waiting:
                    live[slot] = i = waiting.pop(0)
                    items += [(t, p, slot, p == len(prompts[i]) - 1) for p, t in enumerate(prompts[i])]
            items += [(tokens[i][-1], len(prompts[i]) + len(tokens[i]) - 1, slot, True)
                      for slot, i in live.items() if tokens[i]]
            # Rows come back in item order: the new prompts' last tokens first, then the decode rows.
            order = [slot for slot, i in live.items() if not tokens[i]] + [slot for slot, i in live.items() if tokens[i]]
            picks = self._decode(items)
            now = time.perf_counter()
            for slot, token in zip(order, picks):
                i = live[slot]
                tokens[i].append(token)
                times[i].append(now)
                stop = not ignore_eos and token == self.eos
                if stop or len(tokens[i]) == max_tokens[i]:
                    reasons[i] = "stop" if stop else "length"
                    done.append(Completion(i, len(prompts[i]), tokens[i], reasons[i], start, times[i], now))
                    self.lc.llama_memory_seq_rm(memory, slot, -1, -1)
                    del live[slot]
        return sorted(done, key=lambda c: c.index)
