"""Turns a scheduled batch into tensors, launches the model and the sampler.

The step loop never waits for the step it just launched: `launch` enqueues a
step and returns a `LaunchedStep`; its tokens reach the host later (pinned
copy + event) when the engine `read`s them, by which time the next step is
already queued. A token the host has not read yet is PENDING in its sequence;
the next step takes it straight from the previous step's device output (a row
index map, so compaction of the batch is replayed on the device in stream order).
Inputs are built from a persistent batch (engine.input_batch) whose rows are
edited in place. Decode-only steps replay a CUDA graph when the backend can be
captured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.config import EngineConfig
from engine.input_batch import InputBatch
from engine.model import LlamaModel
from engine.ops import AttentionMetadata, SamplingTensors
from engine.scheduler import ScheduledBatch
from engine.sequence import PENDING_TOKEN, Sequence
from engine.sync import HostSyncCounter


_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
                 np.dtype(np.float32): torch.float32}


@dataclass
class LaunchedStep:
    """A step in flight: one sampled token per row of `seqs`, on the device."""
    seqs: list[Sequence]
    indices: list[int]                 # where each row's token goes in its sequence
    tokens: torch.Tensor               # [>= len(seqs)] int64 on the device (graph rows padded)
    host: torch.Tensor                 # pinned copy of tokens, valid once `ready` has passed
    ready: torch.cuda.Event | None     # None on the CPU: the copy is already done


@dataclass
class StepInputs:
    """Host-built inputs of one step, padded to `rows` rows for a graph bucket."""
    token_ids: np.ndarray              # [T] int64; PENDING_TOKEN where the device has it
    source_rows: np.ndarray            # [T] int64; the previous step's row of a pending token, else -1
    positions: np.ndarray              # [T] int64
    slots: np.ndarray                  # [T] int64
    query_start: np.ndarray            # [B + 1] int32
    seq_lens: np.ndarray               # [B] int32
    block_tables: np.ndarray           # [B, max_blocks] int32
    sample_rows: np.ndarray            # [S] int64


class ModelRunner:
    def __init__(self, config: EngineConfig, model: LlamaModel, kv_cache: torch.Tensor, device: torch.device,
                 graphs=None):
        self.syncs = HostSyncCounter()
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = config.block_size
        self.device = device
        self.max_model_len = config.max_model_len
        self.input_batch = InputBatch(config.max_num_seqs, config.max_model_len, config.block_size)
        self.graphs = graphs            # engine.cuda_graphs.DecodeGraphs, or None (eager only)

    # ------------------------------------------------------------ the step

    @torch.inference_mode()
    def launch(self, batch: ScheduledBatch, previous: LaunchedStep | None) -> LaunchedStep | None:
        """Enqueue the batch's forward pass and sampling; None if nothing is sampled.
        Called for every scheduled batch, empty ones too: the persistent batch follows them all."""
        rows = self.input_batch
        rows.update(batch)
        n = rows.num_rows
        if n == 0:
            return None
        sampled = np.flatnonzero(rows.num_computed[:n] + rows.num_scheduled[:n] == rows.num_tokens[:n])
        decode_only = len(sampled) == n and bool((rows.num_scheduled[:n] == 1).all())
        bucket = self.graphs.bucket_for(n) if self.graphs and decode_only else None
        inputs = self._step_inputs(rows, sampled, pad_to=bucket)
        params = self._sampling_arrays(rows, sampled, pad_to=bucket)
        dev = self._upload({**vars(inputs), **params})
        sampling = SamplingTensors(dev["temperature"], dev["top_k"], dev["top_p"], dev["seeds"], dev["counters"],
                                   all_greedy=not params["temperature"].any(),
                                   any_filter=bool((params["top_k"] > 0).any() or (params["top_p"] < 1).any()))
        if bucket is not None:
            tokens = self.graphs.replay(bucket, self._token_ids(inputs, dev, previous), dev["positions"],
                                        self._metadata(inputs, dev), sampling)
        else:
            logits = self._logits(inputs, dev, previous)
            tokens = self.model.ops.sample(logits, sampling) if len(sampled) else None
        seqs, indices = rows.advance(sampled)
        return self._copy_out(seqs, indices, tokens) if seqs else None

    def read(self, step: LaunchedStep, work_queued_behind: bool) -> list[int]:
        """The step's tokens on the host (waits for its copy if it has not landed)."""
        if step.ready is not None:
            self.syncs.wait(step.ready, work_queued_behind)
        return step.host[:len(step.seqs)].tolist()

    @torch.inference_mode()
    def logits(self, seq: Sequence) -> torch.Tensor:
        """Run a prefill of the whole sequence eagerly, outside the persistent batch;
        logits [1, V] at its last token."""
        rows = InputBatch(1, self.max_model_len, self.block_size)
        rows.update(ScheduledBatch([seq], [seq.num_tokens - seq.num_computed_tokens]))
        inputs = self._step_inputs(rows, np.zeros(1, np.int64))
        return self._logits(inputs, self._upload(vars(inputs)), None)

    # ------------------------------------------------------------ inputs

    def _logits(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None) -> torch.Tensor:
        hidden = self.model.forward(self._token_ids(inputs, dev, previous), dev["positions"],
                                    self._metadata(inputs, dev), self.kv_cache)
        return self.model.logits(hidden[dev["sample_rows"]])

    @staticmethod
    def _step_inputs(rows: InputBatch, sampled: np.ndarray, pad_to: int | None = None) -> StepInputs:
        """The step's inputs over the persistent batch's rows, vectorized; only prefill
        chunks and tokens the host already has (not pending on the device) are copied
        per sequence. Padding rows of a graph bucket: token 0, position 0, no cache
        slot (-1), a one-token query and context."""
        n, bs = rows.num_rows, rows.block_size
        padded_rows = pad_to or n
        query_lens = np.ones(padded_rows, np.int32)
        query_lens[:n] = rows.num_scheduled[:n]
        query_start = np.zeros(padded_rows + 1, np.int32)
        np.cumsum(query_lens, out=query_start[1:])
        start = rows.num_computed[:n]
        seq_lens = np.ones(padded_rows, np.int32)
        seq_lens[:n] = start + query_lens[:n]

        num_tokens, num_real = int(query_start[-1]), int(query_start[n])
        token_row = np.repeat(np.arange(n), query_lens[:n])
        pos = start[token_row] + np.arange(num_real) - query_start[token_row]
        positions = np.zeros(num_tokens, np.int64)
        positions[:num_real] = pos
        slots = np.full(num_tokens, -1, np.int64)
        slots[:num_real] = rows.block_table[token_row, pos // bs].astype(np.int64) * bs + pos % bs

        # A decode row's token is usually still on the device (sampled by the previous
        # step): PENDING here, gathered there from the previous step's output.
        pending = rows.pending_source[:n]
        token_ids = np.zeros(num_tokens, np.int64)
        token_ids[:num_real] = PENDING_TOKEN
        for row in np.flatnonzero((pending < 0) | (query_lens[:n] > 1)).tolist():
            first, chunk = int(start[row]), int(query_lens[row])
            token_ids[query_start[row]:query_start[row] + chunk] = rows.seqs[row].token_ids[first:first + chunk]
        source_rows = np.full(num_tokens, -1, np.int64)
        on_device = np.flatnonzero(pending >= 0)
        source_rows[query_start[on_device + 1] - 1] = pending[on_device]     # a row's newest token

        block_tables = rows.block_table[:padded_rows, :int(rows.num_blocks[:n].max())]
        sample_rows = query_start[sampled + 1].astype(np.int64) - 1
        return StepInputs(token_ids, source_rows, positions, slots, query_start, seq_lens, block_tables,
                          sample_rows)

    def _token_ids(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None) -> torch.Tensor:
        if not (inputs.source_rows >= 0).any():
            return dev["token_ids"]
        # Pending tokens come from the previous step's output, still on the device.
        source = dev["source_rows"]
        return torch.where(source >= 0, previous.tokens[source.clamp_min(0)], dev["token_ids"])

    def _metadata(self, inputs: StepInputs, dev: dict) -> AttentionMetadata:
        query_lens = np.diff(inputs.query_start)
        return AttentionMetadata(
            query_start_loc=dev["query_start"], seq_lens=dev["seq_lens"], block_tables=dev["block_tables"],
            slot_mapping=dev["slots"], max_query_len=int(query_lens.max()), max_seq_len=int(inputs.seq_lens.max()),
            plan=self.model.ops.plan_step(query_lens, inputs.seq_lens))

    @staticmethod
    def _sampling_arrays(rows: InputBatch, sampled: np.ndarray, pad_to: int | None = None) -> dict[str, np.ndarray]:
        width = pad_to or len(sampled)

        def padded(values: np.ndarray, fill) -> np.ndarray:
            out = np.full(width, fill, values.dtype)
            out[:len(sampled)] = values[sampled]
            return out
        return {"temperature": padded(rows.temperature, 0.0), "top_k": padded(rows.top_k, 0),
                "top_p": padded(rows.top_p, 1.0), "seeds": padded(rows.seeds, 0),
                "counters": padded(rows.num_tokens - rows.num_prompt, 0)}

    def _upload(self, arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """All of a step's host arrays to the device in one copy: packed at 16-byte
        offsets into one pinned buffer (pinned: the copy is asynchronous), then viewed
        back as typed tensors on the device."""
        offsets, total = {}, 0
        for name, a in arrays.items():
            offsets[name] = total
            total += -(-a.nbytes // 16) * 16
        staging = torch.empty(max(total, 16), dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        packed = staging.numpy()
        for name, a in arrays.items():
            packed[offsets[name]:offsets[name] + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        on_device = staging.to(self.device, non_blocking=True)
        return {name: on_device[offsets[name]:offsets[name] + a.nbytes].view(_TORCH_DTYPES[a.dtype]).view(a.shape)
                for name, a in arrays.items()}

    def _copy_out(self, seqs: list[Sequence], indices: list[int], tokens: torch.Tensor) -> LaunchedStep:
        if self.device.type != "cuda":
            return LaunchedStep(seqs, indices, tokens, tokens.cpu(), None)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return LaunchedStep(seqs, indices, tokens, host, ready)
