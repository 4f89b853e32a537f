"""Turns a scheduled batch into tensors, launches the model and the sampler.

The step loop never waits for the step it just launched: `launch` enqueues a
step and returns a `LaunchedStep`; its tokens reach the host later (pinned
copy + event) when the engine `read`s them, by which time the next step is
already queued. A token the host has not read yet is PENDING in its sequence;
the next step takes it straight from the previous step's device output (a row
index map, so compaction of the batch is replayed on the device in stream order).
Decode-only steps replay a CUDA graph when the backend can be captured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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
    def __init__(self, model: LlamaModel, kv_cache: torch.Tensor, block_size: int, device: torch.device,
                 graphs=None):
        self.syncs = HostSyncCounter()
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.graphs = graphs            # engine.cuda_graphs.DecodeGraphs, or None (eager only)

    # ------------------------------------------------------------ the step

    @torch.inference_mode()
    def launch(self, batch: ScheduledBatch, sampling_seqs: list[Sequence],
               previous: LaunchedStep | None) -> LaunchedStep | None:
        """Enqueue the batch's forward pass and sampling; None if nothing is sampled."""
        decode_only = bool(sampling_seqs) and all(n == 1 for n in batch.num_new_tokens) \
            and len(sampling_seqs) == len(batch.seqs)
        bucket = self.graphs.bucket_for(len(batch.seqs)) if self.graphs and decode_only else None
        inputs = self._host_inputs(batch, sampling_seqs, previous, pad_to=bucket)
        params = self._sampling_arrays(sampling_seqs, pad_to=bucket)
        dev = self._upload({**vars(inputs), **params})
        sampling = SamplingTensors(dev["temperature"], dev["top_k"], dev["top_p"], dev["seeds"], dev["counters"],
                                   all_greedy=all(s.sampling.greedy for s in sampling_seqs),
                                   any_filter=any(s.sampling.top_k > 0 or s.sampling.top_p < 1
                                                  for s in sampling_seqs))
        if bucket is not None:
            tokens = self.graphs.replay(bucket, self._token_ids(inputs, dev, previous), dev["positions"],
                                        self._metadata(inputs, dev), sampling)
        else:
            logits = self._logits(inputs, dev, previous)
            if not sampling_seqs:
                return None
            tokens = self.model.ops.sample(logits, sampling)
        indices = [s.append_pending() for s in sampling_seqs]
        return self._copy_out(sampling_seqs, indices, tokens)

    def read(self, step: LaunchedStep, work_queued_behind: bool) -> list[int]:
        """The step's tokens on the host (waits for its copy if it has not landed)."""
        if step.ready is not None:
            self.syncs.wait(step.ready, work_queued_behind)
        return step.host[:len(step.seqs)].tolist()

    @torch.inference_mode()
    def logits(self, batch: ScheduledBatch, sampling_seqs: list[Sequence]) -> torch.Tensor:
        """Run the batch eagerly; logits [len(sampling_seqs), V] at each sampling sequence's last token."""
        inputs = self._host_inputs(batch, sampling_seqs, None)
        return self._logits(inputs, self._upload(vars(inputs)), None)

    # ------------------------------------------------------------ inputs

    def _logits(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None) -> torch.Tensor:
        hidden = self.model.forward(self._token_ids(inputs, dev, previous), dev["positions"],
                                    self._metadata(inputs, dev), self.kv_cache)
        return self.model.logits(hidden[dev["sample_rows"]])

    def _host_inputs(self, batch: ScheduledBatch, sampling_seqs: list[Sequence],
                     previous: LaunchedStep | None, pad_to: int | None = None) -> StepInputs:
        bs = self.block_size
        rows = pad_to or len(batch.seqs)
        pad = rows - len(batch.seqs)
        # Padding rows of a graph bucket: one token, no cache slot, a one-token context.
        token_ids, positions, slots = [], [], []
        seq_lens, query_lens = [1] * rows, [1] * rows
        width = max(len(s.block_table) for s in batch.seqs)
        block_tables = np.zeros((rows, width), np.int32)
        pending_rows = {id(s): r for r, s in enumerate(previous.seqs)} if previous else {}
        source_rows = {}                                  # token index -> previous step's row
        sampling = {id(s) for s in sampling_seqs}
        sample_rows = []
        # Python scalars for decode rows (most rows, one token each); numpy for prefill chunks.
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
            start = seq.num_computed_tokens
            table = seq.block_table_array()
            if n == 1:
                token = seq.token_ids[start]
                if token == PENDING_TOKEN:
                    source_rows[len(token_ids)] = pending_rows[id(seq)]
                token_ids.append(token)
                positions.append(start)
                slots.append(int(table[start // bs]) * bs + start % bs)
            else:
                chunk = seq.token_ids[start:start + n]
                if chunk[-1] == PENDING_TOKEN:            # only the newest token can be pending
                    source_rows[len(token_ids) + n - 1] = pending_rows[id(seq)]
                token_ids.extend(chunk)
                pos = np.arange(start, start + n)
                positions.extend(pos.tolist())
                slots.extend((table[pos // bs] * bs + pos % bs).tolist())
            block_tables[i, :len(table)] = table
            query_lens[i] = n
            seq_lens[i] = start + n
            if id(seq) in sampling:
                sample_rows.append(len(token_ids) - 1)
        token_ids += [0] * pad
        positions += [0] * pad
        slots += [-1] * pad
        sources = np.full(len(token_ids), -1, np.int64)
        if source_rows:
            sources[list(source_rows)] = list(source_rows.values())
        query_start = np.zeros(rows + 1, np.int32)
        np.cumsum(query_lens, out=query_start[1:])
        return StepInputs(np.asarray(token_ids, np.int64), sources, np.asarray(positions, np.int64),
                          np.asarray(slots, np.int64), query_start, np.asarray(seq_lens, np.int32),
                          block_tables, np.asarray(sample_rows, np.int64))

    def _token_ids(self, inputs: StepInputs, dev: dict, previous: LaunchedStep | None) -> torch.Tensor:
        if not (inputs.source_rows >= 0).any():
            return dev["token_ids"]
        # Pending tokens come from the previous step's output, still on the device.
        source = dev["source_rows"]
        return torch.where(source >= 0, previous.tokens[source.clamp_min(0)], dev["token_ids"])

    @staticmethod
    def _metadata(inputs: StepInputs, dev: dict) -> AttentionMetadata:
        query_lens = np.diff(inputs.query_start)
        return AttentionMetadata(
            query_start_loc=dev["query_start"], seq_lens=dev["seq_lens"], block_tables=dev["block_tables"],
            slot_mapping=dev["slots"], max_query_len=int(query_lens.max()), max_seq_len=int(inputs.seq_lens.max()),
            query_lens_host=query_lens.tolist(), seq_lens_host=inputs.seq_lens.tolist())

    @staticmethod
    def _sampling_arrays(seqs: list[Sequence], pad_to: int | None = None) -> dict[str, np.ndarray]:
        pad = (pad_to or len(seqs)) - len(seqs)
        params = [s.sampling for s in seqs]
        return {"temperature": np.asarray([p.temperature for p in params] + [0.0] * pad, np.float32),
                "top_k": np.asarray([p.top_k for p in params] + [0] * pad, np.int32),
                "top_p": np.asarray([p.top_p for p in params] + [1.0] * pad, np.float32),
                "seeds": np.asarray([s.seed for s in seqs] + [0] * pad, np.int64),
                "counters": np.asarray([s.num_output_tokens for s in seqs] + [0] * pad, np.int64)}

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
