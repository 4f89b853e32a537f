"""Turns the scheduler's step into tensors, launches the model and the sampler.

The step loop never waits for the step it just launched: `launch` enqueues a
step and returns a `LaunchedStep`, the asynchronous handle of its sampled
tokens; they reach the host later (pinned copy + event) when the engine `read`s
them, by which time the next step is already queued. A token the host has not
read yet is taken straight from the previous step's device output (a row index
map, so compaction of the batch is replayed on the device in stream order).
Per-request state lives in the persistent batch (engine.input_batch), edited in
place from the scheduler's diffs; the runner never sees the scheduler's
requests. When the backend can be captured, decode-only steps replay a CUDA graph
(engine.cuda_graphs) and steps with prefill replay piecewise ones (engine.prefill_graphs).
Every step's inputs are built in a pinned host buffer and land, in one copy, in one
device buffer at fixed places (StaticInputs), the buffer the graphs were captured on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from engine.config import EngineConfig
from engine.input_batch import InputBatch
from engine.model import LlamaModel
from engine.outputs import ModelOutputError
from engine.ops import AttentionMetadata, SamplingTensors
from engine.ops.base import NO_TOKEN
from engine.ops.driver import copy_async
from engine.prefill_graphs import kept_rows
from engine.sampling_params import SamplingParams
from engine.scheduler import NewRequest, SchedulerOutput
from engine.step_upload import StaticInputs, upload
from engine.sync import HostSyncCounter


@dataclass
class LaunchedStep:
    """A step in flight: one sampled token per request of `request_ids`, on the device."""
    request_ids: list[int]
    rows: np.ndarray                   # their rows in the persistent batch at launch
    num_removals: int                  # the persistent batch's layout version at launch
    positions: np.ndarray              # where each token goes in its request
    tokens: torch.Tensor               # [>= len(request_ids)] int64 on the device (graph rows padded)
    host: torch.Tensor                 # pinned copy of tokens (a longer buffer), valid once `ready` has passed
    ready: torch.cuda.Event | None     # None on the CPU: the copy is already done


@dataclass
class StepInputs:
    """Host-built inputs of one step, padded to `rows` rows for a graph bucket."""
    token_ids: np.ndarray              # [T] int64; 0 where the device has the token
    source_rows: np.ndarray            # [T] int64; the previous step's row of a pending token, else -1
    positions: np.ndarray              # [T] int64
    slots: np.ndarray                  # [T] int64
    query_start: np.ndarray            # [B + 1] int32
    seq_lens: np.ndarray               # [B] int32
    block_tables: np.ndarray           # [B, max_blocks] int32
    sample_rows: np.ndarray            # [S] int64: the sampled rows of the forward's output
    # A step with prefill: each row's last token this step, the forward's output rows
    # (AttentionMetadata.last); for a prefill graph padded with token 0 to its kept rows.
    last_tokens: np.ndarray | None     # [B] int32


@dataclass
class StepLayout:
    """The step's requests over the persistent batch, in the scheduler's batch order."""
    rows: np.ndarray                   # [B] their rows
    start: np.ndarray                  # [B] tokens of each already in the cache
    query_lens: np.ndarray             # [B] tokens each computes this step
    sampled: np.ndarray                # [S] indices into the B requests that sample

    @classmethod
    def of(cls, rows: np.ndarray, out: SchedulerOutput) -> StepLayout:
        return cls(rows, np.array(out.num_computed_tokens, np.int64), np.array(out.num_scheduled_tokens, np.int64),
                   np.flatnonzero(out.samples))


def _no_token_message(step: LaunchedStep, failed: np.ndarray) -> str:
    """ModelOutputError's line for the step's `failed` token indices."""
    where = ", ".join(f"request {step.request_ids[i]} at sequence position {int(step.positions[i])}"
                      for i in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return (f"the model's logits held no token to sample (a NaN, or nothing above -inf) for {where}{more}: "
            f"its weights are broken, or its activations overflow this dtype")


# The dtype of every array of a step (StepInputs' fields, then the sampling arrays).
STEP_DTYPES = {"token_ids": np.int64, "source_rows": np.int64, "positions": np.int64, "slots": np.int64,
               "query_start": np.int32, "seq_lens": np.int32, "sample_rows": np.int64, "last_tokens": np.int32,
               "temperature": np.float32, "top_k": np.int32, "top_p": np.float32, "seeds": np.int64,
               "counters": np.int64, "block_tables": np.int32}


def static_inputs(config: EngineConfig, device: torch.device, syncs: HostSyncCounter) -> StaticInputs:
    """Slots for every array of a step, sized for the largest: the budget's tokens,
    max_num_seqs rows of block tables max_model_len wide; `syncs` counts the waits on them."""
    tokens, rows = max(config.max_num_batched_tokens, config.max_num_seqs), config.max_num_seqs
    width = math.ceil(config.max_model_len / config.block_size)
    shapes = {"token_ids": (tokens,), "source_rows": (tokens,), "positions": (tokens,), "slots": (tokens,),
              "query_start": (rows + 1,), "seq_lens": (rows,), "sample_rows": (rows,), "last_tokens": (rows,),
              "temperature": (rows,), "top_k": (rows,), "top_p": (rows,), "seeds": (rows,), "counters": (rows,),
              "block_tables": (rows, width)}    # last: an upload copies only the rows used
    return StaticInputs({name: (STEP_DTYPES[name], shape) for name, shape in shapes.items()}, device, syncs)


def _step_array(into: dict[str, np.ndarray] | None, name: str, rows: int, width: int | None = None) -> np.ndarray:
    """Where a step's array is built: the leading corner of its slot in the host buffer the
    step uploads from (`into`: StaticInputs.host_slots()), or, without, an array of its own."""
    if into is None:
        return np.empty((rows,) if width is None else (rows, width), STEP_DTYPES[name])
    return into[name][:rows] if width is None else into[name][:rows, :width]


def _per_token_builder(rows: int, tokens: int):
    """How a step builds its per-token arrays: row by row (a few slices a row) for one row or
    rows of 1,000 tokens on average, else vectorized (a dozen calls over every token). On the
    development host, _step_inputs took (µs, vectorized against row by row; session 30's
    s30_step_inputs.py): 1 x 8,000 83 against 43, 1 x 4,000 57 / 35, 8 x 1,000 84 / 76, one
    decode row 30 / 25; but 16 x 500 84 / 109, 4 x 300 39 / 42 and 16 decode rows 31 / 83."""
    return _row_by_row if rows == 1 or tokens >= 1000 * rows else _vectorized


def _vectorized(batch: InputBatch, step: StepLayout, query_start: np.ndarray, positions: np.ndarray,
                slots: np.ndarray, token_ids: np.ndarray) -> None:
    """Each token's position, cache slot and id, over all the step's tokens at once: its
    request's values repeated, and `take`s at flat indices of the batch's 2-D arrays, cheaper
    than gathers by (row, column). A fixed cost of a dozen calls, whatever the row count."""
    bs, n = batch.block_size, len(step.rows)
    np.add(np.repeat(step.start - query_start[:n], step.query_lens), np.arange(len(positions)), out=positions)
    token_row = np.repeat(step.rows, step.query_lens)
    block, offset = np.divmod(positions, bs)
    block_ids = batch.block_table.ravel().take(token_row * batch.block_table.shape[1] + block)
    np.multiply(block_ids, bs, out=slots, dtype=np.int64)
    slots += offset
    token_ids[:] = batch.token_ids.ravel().take(token_row * batch.token_ids.shape[1] + positions)


def _row_by_row(batch: InputBatch, step: StepLayout, query_start: np.ndarray, positions: np.ndarray,
                slots: np.ndarray, token_ids: np.ndarray) -> None:
    """The same, a row at a time: a row's tokens are a run (consecutive positions, a slice of
    its row of token ids, its cache slots the lanes of a slice of its blocks), so each array
    is a few slices, whatever the row's length, and no per-token index is computed."""
    bs = batch.block_size
    lanes = np.arange(bs)
    for row, start, count, first in zip(step.rows.tolist(), step.start.tolist(), step.query_lens.tolist(),
                                        query_start.tolist()):
        end = first + count
        positions[first:end] = np.arange(start, start + count)
        token_ids[first:end] = batch.token_ids[row, start:start + count]
        first_block = start // bs
        blocks = batch.block_table[row, first_block:(start + count - 1) // bs + 1]
        run = (blocks[:, None].astype(np.int64) * bs + lanes).ravel()
        slots[first:end] = run[start - first_block * bs:start - first_block * bs + count]


class ModelRunner:
    def __init__(self, config: EngineConfig, model: LlamaModel, kv_cache: torch.Tensor, device: torch.device,
                 capture_graphs: bool = False):
        self.syncs = HostSyncCounter()
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = config.block_size
        self.device = device
        self.max_model_len = config.max_model_len
        self.input_batch = InputBatch(config.max_num_seqs, config.max_model_len, config.block_size)
        if device.type == "cuda":      # where each step's sampled tokens land on the host (_copy_out)
            self._token_copies = [(torch.empty(config.max_num_seqs, dtype=torch.int64, pin_memory=True),
                                   torch.cuda.Event()) for _ in range(2)]
            self._copy_turn = 0
            # The stream the engine launches on, kept: Event.record() without one looks up
            # the current stream each time, tens of µs of a batch-1 step on a slow host.
            self._stream = torch.cuda.current_stream(device)
        # Every step's inputs, on the device at fixed places: what the graphs read, where
        # there are graphs (engine.cuda_graphs.DecodeGraphs, engine.prefill_graphs.PrefillGraphs).
        self.inputs = static_inputs(config, device, self.syncs)
        self.graphs = self.prefill_graphs = None
        if capture_graphs:
            from engine.cuda_graphs import DecodeGraphs
            from engine.prefill_graphs import PrefillGraphs
            self.graphs = DecodeGraphs(config, model, kv_cache, self.inputs)
            self.prefill_graphs = PrefillGraphs(config, model, kv_cache, self.inputs)

    # ------------------------------------------------------------ the step

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, previous: LaunchedStep | None) -> LaunchedStep | None:
        """Enqueue the step's forward pass and sampling; None if nothing is sampled.
        Called for every step, empty ones too: the persistent batch follows every diff."""
        batch = self.input_batch
        step = StepLayout.of(batch.apply(out), out)
        n = len(step.rows)
        if n == 0:
            batch.mark_sampled(step.sampled)
            return None
        decode_only = len(step.sampled) == n and bool((step.query_lens == 1).all())
        bucket = self.graphs.bucket_for(n) if self.graphs and decode_only else None
        prefill_bucket = (self.prefill_graphs.bucket_for(int(step.query_lens.sum()))
                          if self.prefill_graphs and not decode_only else None)
        host = self.inputs.host_slots()
        inputs = self._step_inputs(batch, step, pad_to=bucket, pad_tokens_to=prefill_bucket, into=host)
        params = self._sampling_arrays(batch, step, pad_to=bucket, into=host)
        dev = self.inputs.upload({**vars(inputs), **params}, in_place=True)
        all_greedy = not params["temperature"].any()
        if bucket is not None:      # the graph takes pending tokens and samples from the inputs' slots itself
            tokens = self.graphs.replay(bucket, all_greedy)
        else:
            logits = self._logits(inputs, dev, previous, prefill_bucket)
            sampling = SamplingTensors(dev["temperature"], dev["top_k"], dev["top_p"], dev["seeds"], dev["counters"],
                                       all_greedy=all_greedy,
                                       any_filter=bool((params["top_k"] > 0).any() or (params["top_p"] < 1).any()))
            # Into the buffer the next step's graph takes its pending tokens from.
            out_tokens = self.graphs.sampled[:len(step.sampled)] if self.graphs else None
            tokens = self.model.ops.sample(logits, sampling, out=out_tokens) if len(step.sampled) else None
        sampled_rows = step.rows[step.sampled]
        batch.mark_sampled(sampled_rows)
        if not len(step.sampled):
            return None
        # A decode step samples every request (the scheduler's list is never changed after).
        request_ids = (out.request_ids if len(step.sampled) == n
                       else [out.request_ids[i] for i in step.sampled.tolist()])
        positions = (step.start + step.query_lens)[step.sampled]
        return self._copy_out(request_ids, sampled_rows, batch.num_removals, positions, tokens)

    def read(self, step: LaunchedStep, work_queued_behind: bool) -> list[int]:
        """The step's tokens on the host (waits for its copy if it has not landed); the
        persistent batch keeps them for the rows' later steps."""
        if step.ready is not None:
            self.syncs.wait(step.ready, work_queued_behind)
        tokens = step.host[:len(step.request_ids)].numpy()
        if tokens.min(initial=0) < 0:
            raise ModelOutputError(_no_token_message(step, np.flatnonzero(tokens == NO_TOKEN)))
        self.input_batch.record_tokens(step.request_ids, step.rows, step.num_removals, step.positions, tokens)
        return tokens.tolist()

    @torch.inference_mode()
    def logits(self, token_ids: list[int], block_ids: list[int]) -> torch.Tensor:
        """Run a prefill of the whole sequence eagerly, outside the persistent batch;
        logits [1, V] at its last token."""
        batch = InputBatch(1, self.max_model_len, self.block_size)
        out = SchedulerOutput(new_requests=[NewRequest(-1, token_ids, len(token_ids), SamplingParams(), 0, block_ids)],
                              request_ids=[-1], num_scheduled_tokens=[len(token_ids)], num_computed_tokens=[0],
                              samples=[True])
        inputs = self._step_inputs(batch, StepLayout.of(batch.apply(out), out))
        return self._logits(inputs, upload(vars(inputs), self.device), None)

    # ------------------------------------------------------------ inputs

    def _logits(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None,
                prefill_bucket: int | None = None) -> torch.Tensor:
        # The graphs read the token ids where _token_ids leaves them; forward takes them.
        token_ids = self._token_ids(inputs, dev, previous)
        if prefill_bucket is not None:
            hidden = self.prefill_graphs.run(prefill_bucket, len(inputs.seq_lens),
                                             lambda: self._metadata(inputs, dev))
        else:
            hidden = self.model.forward(token_ids, dev["positions"], self._metadata(inputs, dev), self.kv_cache)
        return self.model.logits(hidden[dev["sample_rows"]])

    @staticmethod
    def _step_inputs(batch: InputBatch, step: StepLayout, pad_to: int | None = None,
                     pad_tokens_to: int | None = None, into: dict[str, np.ndarray] | None = None) -> StepInputs:
        """The step's inputs over the persistent batch's rows, vectorized, built `into` host
        slots (see _step_array). Padding rows of a decode graph's bucket (`pad_to` rows): token 0,
        position 0, no cache slot (-1), a one-token query and context. Padding tokens of a
        prefill graph's bucket (`pad_tokens_to` tokens, no rows): token 0, position 0, no cache slot;
        its kept rows past the step's (kept_rows): token 0."""
        n = len(step.rows)
        padded_rows = pad_to or n
        query_lens = np.ones(padded_rows, np.int32)
        query_lens[:n] = step.query_lens
        query_start = _step_array(into, "query_start", padded_rows + 1)
        query_start[0] = 0
        np.cumsum(query_lens, out=query_start[1:])
        seq_lens = _step_array(into, "seq_lens", padded_rows)
        seq_lens[:n] = step.start + step.query_lens
        seq_lens[n:] = 1

        num_real = int(query_start[n])
        num_tokens = max(int(query_start[-1]), pad_tokens_to or 0)
        positions = _step_array(into, "positions", num_tokens)
        cache_slots = _step_array(into, "slots", num_tokens)
        token_ids = _step_array(into, "token_ids", num_tokens)
        per_token = _per_token_builder(n, num_real)
        per_token(batch, step, query_start, positions[:num_real], cache_slots[:num_real], token_ids[:num_real])
        positions[num_real:] = 0
        cache_slots[num_real:] = -1
        token_ids[num_real:] = 0

        # A decode row's newest token is usually still on the device (sampled by the
        # previous step): gathered there from the previous step's output.
        pending = batch.pending_source[step.rows]
        on_device = np.flatnonzero(pending >= 0)
        newest = query_start[on_device + 1] - 1
        token_ids[newest] = 0
        source_rows = _step_array(into, "source_rows", num_tokens)
        source_rows.fill(-1)
        source_rows[newest] = pending[on_device]

        width = int(batch.num_blocks[step.rows].max())
        block_tables = _step_array(into, "block_tables", padded_rows, width)
        block_tables[:n] = batch.block_table[step.rows, :width]
        block_tables[n:] = 0
        sample_rows = _step_array(into, "sample_rows", len(step.sampled))
        # A step with prefill returns a row a sequence (AttentionMetadata.last), a decode step a
        # row a token: a row a sequence too.
        sample_rows[:] = step.sampled
        last_tokens = None
        if num_real > n or pad_tokens_to:     # a prefill graph's last piece reads them in any case
            kept = kept_rows(pad_tokens_to, batch.max_num_seqs) if pad_tokens_to else n
            last_tokens = _step_array(into, "last_tokens", kept)
            np.subtract(query_start[1:n + 1], 1, out=last_tokens[:n])
            last_tokens[n:] = 0
        return StepInputs(token_ids, source_rows, positions, cache_slots, query_start, seq_lens, block_tables,
                          sample_rows, last_tokens)

    def _token_ids(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None) -> torch.Tensor:
        """The step's token ids, in place in dev["token_ids"] (where graphs read them)."""
        if (inputs.source_rows >= 0).any():
            # Pending tokens come from the previous step's output, still on the device.
            self.model.ops.take_pending_tokens(dev["token_ids"], dev["source_rows"], previous.tokens)
        return dev["token_ids"]

    def _metadata(self, inputs: StepInputs, dev: dict) -> AttentionMetadata:
        query_lens = np.diff(inputs.query_start)
        meta = AttentionMetadata(
            query_start_loc=dev["query_start"], seq_lens=dev["seq_lens"], block_tables=dev["block_tables"],
            slot_mapping=dev["slots"], max_query_len=int(query_lens.max()), max_seq_len=int(inputs.seq_lens.max()),
            plan=self.model.ops.plan_step(query_lens, inputs.seq_lens))
        if inputs.last_tokens is not None:
            n = len(query_lens)
            meta.last = meta.at_last_tokens(   # a prefill graph's kept rows past n: attention reads n
                dev["last_tokens"], meta.max_seq_len,
                self.model.ops.plan_step(np.ones(n, np.int64), inputs.seq_lens, inputs.last_tokens[:n]))
        return meta

    @staticmethod
    def _sampling_arrays(batch: InputBatch, step: StepLayout, pad_to: int | None = None,
                         into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The sampled rows' sampling parameters, built `into` host slots (see _step_array)."""
        rows = step.rows[step.sampled]
        width = pad_to or len(rows)

        def padded(name: str, values: np.ndarray, fill) -> np.ndarray:
            out = _step_array(into, name, width)
            out[:len(rows)] = values
            out[len(rows):] = fill
            return out
        # The counter of a sampled token is its index among the request's outputs.
        counters = (step.start + step.query_lens)[step.sampled] - batch.num_prompt[rows]
        return {"temperature": padded("temperature", batch.temperature[rows], 0.0),
                "top_k": padded("top_k", batch.top_k[rows], 0), "top_p": padded("top_p", batch.top_p[rows], 1.0),
                "seeds": padded("seeds", batch.seeds[rows], 0), "counters": padded("counters", counters, 0)}

    def _copy_out(self, request_ids: list[int], rows: np.ndarray, num_removals: int, positions: np.ndarray,
                  tokens: torch.Tensor) -> LaunchedStep:
        if self.device.type != "cuda":      # a copy: `tokens` may be the buffer the next step samples into
            return LaunchedStep(request_ids, rows, num_removals, positions, tokens, tokens.clone(), None)
        # Two pinned buffers and events in turn: a launched step is read before the step
        # after the next one is launched, so its buffer is free again by then.
        host, ready = self._token_copies[self._copy_turn]
        self._copy_turn = 1 - self._copy_turn
        copy_async(host.data_ptr(), tokens.data_ptr(), tokens.numel() * tokens.element_size(), tokens.device.index)
        ready.record(self._stream)
        return LaunchedStep(request_ids, rows, num_removals, positions, tokens, host, ready)
