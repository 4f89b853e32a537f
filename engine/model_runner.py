"""Turns a scheduled batch into tensors, runs the model, samples the next tokens."""
from __future__ import annotations

import torch

from engine.model import LlamaModel
from engine.ops import AttentionMetadata, SamplingTensors
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence
from engine.sync import HostSyncCounter


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: torch.Tensor, block_size: int, device: torch.device):
        self.syncs = HostSyncCounter()
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device

    @torch.inference_mode()
    def step(self, batch: ScheduledBatch, sampling_seqs: list[Sequence]) -> list[int]:
        """Compute this step's tokens; return a sampled token per sequence in
        `sampling_seqs` (those whose prompt is complete after this step)."""
        logits = self.logits(batch, sampling_seqs)
        if not sampling_seqs:
            return []
        tokens = self.model.ops.sample(logits, self._sampling_tensors(sampling_seqs))
        return self.syncs.to_host(tokens)

    @torch.inference_mode()   # no autograd bookkeeping on any op
    def logits(self, batch: ScheduledBatch, sampling_seqs: list[Sequence]) -> torch.Tensor:
        """Run the batch; logits [len(sampling_seqs), V] at each sampling sequence's last token."""
        token_ids, positions, meta, sample_rows = self._prepare(batch, sampling_seqs)
        hidden = self.model.forward(token_ids, positions, meta, self.kv_cache)
        return self.model.logits(hidden[sample_rows])

    def _prepare(self, batch: ScheduledBatch, sampling_seqs: list[Sequence]):
        bs = self.block_size
        token_ids, positions, slots, query_lens, seq_lens = [], [], [], [], []
        sample_rows, sampling = [], {id(s) for s in sampling_seqs}
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            start = seq.num_computed_tokens
            token_ids.extend(seq.token_ids[start:start + n])
            positions.extend(range(start, start + n))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            query_lens.append(n)
            seq_lens.append(start + n)
            if id(seq) in sampling:
                sample_rows.append(len(token_ids) - 1)
        max_blocks = max(len(s.block_table) for s in batch.seqs)
        tables = [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in batch.seqs]
        query_start = [0]
        for n in query_lens:
            query_start.append(query_start[-1] + n)
        dev = self._to_device
        meta = AttentionMetadata(
            query_start_loc=dev(query_start, torch.int32),
            seq_lens=dev(seq_lens, torch.int32),
            block_tables=dev(tables, torch.int32),
            slot_mapping=dev(slots, torch.int64),
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            query_lens_host=query_lens,
            seq_lens_host=seq_lens)
        return (dev(token_ids, torch.int64), dev(positions, torch.int64), meta,
                dev(sample_rows, torch.int64))

    def _to_device(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        # Pinned staging makes the copy truly asynchronous on the GPU.
        host = torch.tensor(values, dtype=dtype)
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)

    def _sampling_tensors(self, seqs: list[Sequence]) -> SamplingTensors:
        params = [s.sampling for s in seqs]
        dev = self._to_device

        return SamplingTensors(
            temperature=dev([p.temperature for p in params], torch.float32),
            top_k=dev([p.top_k for p in params], torch.int32),
            top_p=dev([p.top_p for p in params], torch.float32),
            seeds=dev([s.seed for s in seqs], torch.int64),
            counters=dev([s.num_output_tokens for s in seqs], torch.int64),
            all_greedy=all(p.greedy for p in params),
            any_filter=any(p.top_k > 0 or p.top_p < 1 for p in params))
