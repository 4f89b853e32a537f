"""The engine's front door: `LLM(model).generate(prompts, SamplingParams(...))`."""
from __future__ import annotations

import operator
import time
from array import array as typed_array
from collections import deque
from dataclasses import replace
from typing import Iterable, Iterator, Sequence as Seq, Union

import numpy as np
import torch

from engine import prefill_graphs, quantized
from engine.cpu_features import native_bf16
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import StopChecker
from engine.model import LlamaModel
from engine.model_runner import ModelRunner
from engine.model_source import ModelSourceError, resolve
from engine.ops import make_ops, select_backend
from engine.outputs import RequestOutput
from engine.progress import ProgressLine
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence

# A prompt is text, token ids, or chat messages ({"role", "content"} dicts).
Prompt = Union[str, list[int], list[dict]]
_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _resolve_dtype(dtype: str, device: torch.device, quantization: str) -> str:
    if dtype != "auto":
        return _DTYPE_ALIASES.get(dtype, dtype)
    if device.type == "cuda":
        return "bfloat16"
    # Dense weights: float32, exact to HF's float32. Quantized ones meet bf16 activations in
    # their matmul anyway; the rest runs in bf16 where the CPU has it, else in float32.
    return "bfloat16" if quantization != "none" and native_bf16() else "float32"


def _check_quantization(config: EngineConfig, backend: str, device: torch.device, source) -> None:
    if config.quantization == "none":
        return
    if backend != "torch" or device.type != "cpu":
        raise ValueError(f"quantization {config.quantization!r} runs on the torch backend on CPU, "
                         f"not the {backend} backend on {device.type}")
    if not quantized.available():
        raise ValueError(f"quantization {config.quantization!r} needs torch >= 2.5 "
                         f"(aten._weight_int4pack_mm_for_cpu); this is torch {torch.__version__}")
    if source.load_block_weights is None:
        raise ValueError(f"quantization {config.quantization!r} needs a GGUF model with 4-bit (Q4_0/Q4_1) "
                         f"weights; {source.name} has none")


def _check_finite(weights: dict, model_name: str) -> None:
    """A weight that is NaN or infinite makes every output NaN: say which, before any work."""
    for name, w in weights.items():
        # A sum is a NaN or infinite where any value is (a tenth of isfinite's time on the CPU);
        # only then are the values counted, as a large finite tensor's sum can overflow.
        if isinstance(w, torch.Tensor) and w.is_floating_point() and not bool(torch.isfinite(w.sum())):
            bad = int((~torch.isfinite(w)).sum())
            if bad:
                raise ModelSourceError(f"model {model_name}: weight {name} holds {bad} NaN or infinite values")


DEFAULT_CPU_KV_TOKENS = 16384


class PromptError(ValueError):
    """A prompt the engine cannot serve; the message says which and why."""


NOT_A_PROMPT = "a prompt must be a string, a list of token ids, or a list of chat messages"


class LLM:
    def __init__(self, model: str, **settings):
        """`settings` are EngineConfig's fields (backend, dtype, max_num_seqs, ...)."""
        requested = EngineConfig.from_env(model, **settings)
        quantize = requested.quantization != "none"
        # Quantized weights run on the torch backend only: `auto` means it, even beside a GPU.
        backend = select_backend("torch" if quantize and requested.backend == "auto" else requested.backend)
        # The torch backend runs on any device (the GPU too, as the kernels' oracle).
        self.device = torch.device(requested.device or ("cuda" if backend == "cuda" else "cpu"))
        if backend == "cuda" and self.device.type != "cuda":
            raise ValueError("backend 'cuda' runs on a CUDA device only")
        dtype = _resolve_dtype(requested.dtype, self.device, requested.quantization)
        self.dtype = _TORCH_DTYPES[dtype]
        self.source = resolve(model)
        _check_quantization(requested, backend, self.device, self.source)
        self.model_config = c = self.source.config
        self.tokenizer = self.source.tokenizer
        if requested.max_model_len is not None and requested.max_model_len > c.max_position:
            raise ValueError(f"max_model_len {requested.max_model_len} exceeds the model's context "
                             f"length {c.max_position}")
        config = replace(requested, backend=backend, device=str(self.device), dtype=dtype)

        load = self.source.load_block_weights if quantize else self.source.load_weights
        weights = dict(load(self.device, self.dtype))
        _check_finite(weights, self.source.name)
        max_pos = min(config.max_model_len or c.max_position, c.max_position)
        self.model = LlamaModel(c, weights, make_ops(config), self.device, self.dtype, max_pos)
        del weights

        num_blocks = self._num_kv_blocks(config)
        # What the engine runs with, passed whole from here on.
        self.config = config = replace(config, num_kv_blocks=num_blocks,
                                       max_model_len=min(max_pos, num_blocks * config.block_size))
        # Zeroed, so that a slot no sequence has written yet can never hold a NaN
        # (attention gives unused slots zero weight, and 0 * NaN would be NaN).
        self.kv_cache = torch.zeros((c.num_layers, 2, num_blocks, config.block_size, c.num_kv_heads, c.head_dim),
                                    device=self.device, dtype=self.dtype)
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager, StopChecker(self.tokenizer))
        self.runner = ModelRunner(config, self.model, self.kv_cache, self.device,
                                  capture_graphs=self._captures_graphs(config))
        self._next_request_id = 0
        self._in_flight = None     # the launched step whose tokens the host has not read yet
        # Host seconds per phase of step(); read_and_finish includes waiting for the GPU
        # (runner.syncs.wait_s): a host-bound loop shows little wait.
        self.host_time = dict.fromkeys(("schedule", "launch", "read_and_finish"), 0.0)

    @property
    def backend(self) -> str:
        return self.config.backend

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    # ------------------------------------------------------------ set-up

    def _kv_bytes_per_token(self) -> int:
        c = self.model_config
        return c.num_layers * 2 * c.num_kv_heads * c.head_dim * torch.finfo(self.dtype).bits // 8

    def _captures_graphs(self, config: EngineConfig) -> bool:
        return self.model.ops.supports_graphs and not config.enforce_eager

    def _num_kv_blocks(self, config: EngineConfig) -> int:
        if config.kv_cache_tokens is not None:
            tokens = config.kv_cache_tokens
        elif self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            c = self.model_config
            elem = torch.finfo(self.dtype).bits // 8
            # Activations of the largest step, and fp32 logits for every sequence.
            activations = config.max_num_batched_tokens * (2 * c.intermediate_size + c.q_size + 2 * c.kv_size
                                                           + 4 * c.hidden_size) * elem * 2
            logits = config.max_num_seqs * c.vocab_size * 4 * 3
            graphs = prefill_graphs.held_bytes(config, c, elem) if self._captures_graphs(config) else 0
            budget = total * config.gpu_memory_utilization - (total - free) - activations - logits - graphs
            tokens = int(budget // self._kv_bytes_per_token())
        else:
            tokens = DEFAULT_CPU_KV_TOKENS
        num_blocks = tokens // config.block_size
        if num_blocks < 1:
            raise ValueError(f"KV cache of {tokens} tokens holds less than one block of {config.block_size}")
        return num_blocks

    # ------------------------------------------------------------ requests

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids; a PromptError says what makes it one the engine cannot serve."""
        return self._encode(prompt).tolist()

    def _encode(self, prompt: Prompt) -> np.ndarray:
        """The prompt's token ids as int32, validated (the request keeps this array: nothing
        downstream converts them again)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise PromptError(f"model {self.source.name} has no tokenizer; pass token ids")
            ids = np.array(self.tokenizer.encode(prompt), np.int32)
        elif isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
            if self.tokenizer is None:
                raise PromptError(f"model {self.source.name} has no tokenizer; pass token ids")
            try:
                ids = np.array(self.tokenizer.encode_chat(prompt), np.int32)
            except ValueError as e:   # no chat template, or the template failed on these messages
                raise PromptError(str(e)) from None
        elif isinstance(prompt, list):
            ids = self._vocabulary_ids(prompt)
        else:
            raise PromptError(NOT_A_PROMPT)
        if not len(ids):
            raise PromptError("the prompt is empty")
        if len(ids) >= self.max_model_len:
            raise PromptError(f"the prompt has {len(ids)} tokens; max_model_len is {self.max_model_len} "
                              "(room for at least one output token is needed)")
        return ids

    def _vocabulary_ids(self, prompt: list) -> np.ndarray:
        """The prompt's token ids as int32, once every one is checked to be an integer (an int,
        a bool, or another type with __index__, numpy's included) in the vocabulary. The check
        and the conversion are one C loop over the tokens (array.array): before the first step,
        so every token of every prompt in a batch costs the batch time; numpy's conversion plus
        a check of each token's type took ~1.4 times as long (45.8 against 33.0 µs a 1,000-token
        prompt on the development host, when a list of Python ints was made too)."""
        try:
            values = np.frombuffer(typed_array("q", prompt), np.int64)
        except TypeError:           # an element that is no integer: a float, a string, None, a list
            raise PromptError(NOT_A_PROMPT) from None
        except OverflowError:       # an int past int64's range: compared as Python ints
            try:
                values = np.array([operator.index(t) for t in prompt], object)
            except TypeError:
                raise PromptError(NOT_A_PROMPT) from None
        vocab = self.model_config.vocab_size
        if values.size and (values.min() < 0 or values.max() >= vocab):
            bad = np.flatnonzero((values < 0) | (values >= vocab))
            raise PromptError(f"token id {values[bad[0]]} is outside the vocabulary [0, {vocab})")
        return values.astype(np.int32)

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None) -> Sequence:
        return self._add(self._encode(prompt), params)

    def _add(self, prompt: np.ndarray, params: SamplingParams | None) -> Sequence:
        params = params or SamplingParams()
        rid = self._next_request_id
        self._next_request_id += 1
        seed = params.seed if params.seed is not None else (self.config.seed * 1_000_003 + rid) & (2**63 - 1)
        seq = Sequence(rid, prompt, params, seed,
                       max_num_tokens=min(len(prompt) + params.max_tokens, self.max_model_len))
        self.scheduler.add(seq)
        return seq

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or self._in_flight is not None

    def step(self) -> list[Sequence]:
        """Launch one engine step, then take in the previous step's tokens (which
        the GPU has usually finished while this one was prepared); return the
        sequences that finished."""
        clock = self.host_time
        t0 = time.perf_counter()
        scheduled = self.scheduler.schedule()
        t1 = time.perf_counter()
        launched = self.runner.launch(scheduled, self._in_flight)
        self.scheduler.publish_computed_blocks()
        t2 = time.perf_counter()
        finished = []
        if self._in_flight:
            tokens = self.runner.read(self._in_flight, work_queued_behind=launched is not None)
            finished = self.scheduler.update_from_output(self._in_flight.request_ids, tokens, time.perf_counter())
        self._in_flight = launched
        t3 = time.perf_counter()
        clock["schedule"] += t1 - t0
        clock["launch"] += t2 - t1
        clock["read_and_finish"] += t3 - t2
        return finished

    @staticmethod
    def _stop_string_at(text: str, stop: list[str]) -> int | None:
        """Where the first stop string starts in `text`."""
        hits = [i for i in (text.find(s) for s in stop) if i >= 0]
        return min(hits) if hits else None

    def _output(self, seq: Sequence) -> RequestOutput:
        ids = seq.output_token_ids
        p = seq.sampling
        text = ""
        if self.tokenizer is not None:
            text = self.tokenizer.decode(ids)
            cut = self._stop_string_at(text, p.stop) if p.stop and seq.finish_reason == "stop" else None
            if cut is not None:
                text = text[:cut]
        return RequestOutput(seq.request_id, seq.prompt, text, ids, seq.finish_reason,
                             seq.arrival_time, seq.token_times, seq.finish_time, seq.num_preemptions)

    def next_token_logits(self, prompt: Prompt) -> torch.Tensor:
        """Float32 logits of the token after `prompt` (one prefill, nothing kept):
        the figure backends are compared on."""
        ids = self._encode(prompt)
        if not self.block_manager.can_allocate(-1, len(ids)):
            raise RuntimeError("the KV cache is busy; call next_token_logits between generations")
        try:
            return self.runner.logits(ids, self.block_manager.allocate(-1, len(ids)))[0].float().cpu()
        finally:
            self.block_manager.release(-1)

    # ------------------------------------------------------------ batch API

    def generate(self, prompts: Prompt | Seq[Prompt],
                 sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
                 show_progress: bool = False) -> list[RequestOutput]:
        """Generate for every prompt; outputs in prompt order."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                        and isinstance(prompts[0], (int, dict))):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"{len(sampling_params)} sampling params for {len(prompts)} prompts")
            params = list(sampling_params)
        else:
            params = [sampling_params or SamplingParams()] * len(prompts)
        # Validate everything before any work starts, so bad input loses nothing.
        encoded = [self._encode(p) for p in prompts]
        return list(self._stream(zip(encoded, params), max_in_flight=len(prompts) or 1,
                                 show_progress=show_progress, total=None))

    def stream(self, requests: Iterable[tuple[Prompt, SamplingParams]], max_in_flight: int | None = None,
               show_progress: bool = False, total: int | None = None) -> Iterator[RequestOutput]:
        """Generate for a (possibly endless) stream of requests, yielding outputs
        in input order while holding at most `max_in_flight` requests. `show_progress`
        draws a status line on stderr; `total`, the number of requests, gives it an ETA."""
        yield from self._stream(((self._encode(prompt), params) for prompt, params in requests),
                                max_in_flight, show_progress, total)

    def _stream(self, requests: Iterable[tuple[np.ndarray, SamplingParams]], max_in_flight: int | None,
                show_progress: bool, total: int | None) -> Iterator[RequestOutput]:
        window = max_in_flight or 4 * self.config.max_num_seqs
        pending: deque[Sequence] = deque()    # added, not yet yielded, in input order
        source = iter(requests)
        exhausted = False
        progress = ProgressLine(total) if show_progress else None
        yielded = yielded_tokens = 0
        try:
            while True:
                while not exhausted and len(pending) < window:
                    try:
                        prompt, params = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    pending.append(self._add(prompt, params))
                while pending and pending[0].is_finished:
                    out = self._output(pending.popleft())
                    yielded += 1
                    yielded_tokens += len(out.token_ids)
                    yield out
                if not pending and exhausted:
                    return
                if self.has_unfinished():
                    self.step()
                if progress:
                    progress.update(yielded, yielded_tokens, pending)
        finally:
            if progress:
                progress.close(yielded, yielded_tokens)

    def memory_report(self) -> dict:
        """GPU bytes by owner: weights (with the RoPE table), the KV cache,
        and the rest of torch's peak (activations, logits, graph pools)."""
        tensors = [*self.model.tensors(), self.kv_cache]
        owned = sum(t.numel() * t.element_size() for t in tensors)
        kv = self.kv_cache.numel() * self.kv_cache.element_size()
        peak = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else owned
        return {"weights": owned - kv, "kv_cache": kv, "peak_allocated": peak, "other": peak - owned}

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (between benchmark repetitions: each must prefill
        cold). False, and nothing changed, while requests are in flight."""
        return self.block_manager.reset_prefix_cache()

    @property
    def stats(self) -> dict:
        pc = self.block_manager.stats
        return {"steps": self.scheduler.stats.steps, "preemptions": self.scheduler.stats.preemptions,
                "prefix_cache_queries": pc.queries, "prefix_cache_hits": pc.hits,
                "prefix_cache_hit_tokens": pc.hit_tokens, "host_syncs": self.runner.syncs.count,
                "lagged_reads": self.runner.syncs.lagged_reads, "gpu_wait_s": self.runner.syncs.wait_s,
                **{f"host_{phase}_s": seconds for phase, seconds in self.host_time.items()},
                "kv_cache_blocks": self.block_manager.num_blocks, "block_size": self.config.block_size}

