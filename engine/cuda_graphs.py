"""CUDA graphs of the decode step, one per padded batch-size bucket.

A decode step at batch B is ~12 launches per layer; replaying them as one graph
takes the host out of the step. Each bucket is captured twice: greedy-only
(argmax) and general sampling. Inputs live in static buffers that a replay
overwrites; padding rows have no cache slot (-1) and a one-token context, so they
write nothing and read only block 0. Attention is captured for contexts up to
max_model_len (split-KV partitions sized for it; splits past a row's length exit).
"""
from __future__ import annotations

import math

import torch

from engine.config import EngineConfig
from engine.model import LlamaModel
from engine.ops import AttentionMetadata, SamplingTensors

_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeGraphs:
    def __init__(self, config: EngineConfig, model: LlamaModel, kv_cache: torch.Tensor, device: torch.device):
        self.model, self.kv_cache, self.max_model_len = model, kv_cache, config.max_model_len
        self.buckets = sorted({b for b in _BUCKETS if b < config.max_num_seqs} | {config.max_num_seqs})
        rows = self.buckets[-1]
        width = math.ceil(config.max_model_len / config.block_size)

        def zeros(*shape, dtype=torch.int64, fill=0):
            return torch.full(shape, fill, dtype=dtype, device=device)
        self.token_ids, self.positions = zeros(rows), zeros(rows)
        self.slots = zeros(rows, fill=-1)
        self.seq_lens = zeros(rows, dtype=torch.int32, fill=1)
        self.block_tables = zeros(rows, width, dtype=torch.int32)
        self.query_start = torch.arange(rows + 1, dtype=torch.int32, device=device)
        self.temperature, self.top_p = zeros(rows, dtype=torch.float32), zeros(rows, dtype=torch.float32, fill=1)
        self.top_k, self.seeds, self.counters = zeros(rows, dtype=torch.int32), zeros(rows), zeros(rows)
        self._graphs: dict[tuple[int, bool], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        # Warm-up runs and captures go on a side stream of the ops' own (PyCUDA launches
        # only on streams it made), off the default stream as capture requires.
        self.side_stream = model.ops.new_stream()
        pool = torch.cuda.graph_pool_handle()
        for bucket in reversed(self.buckets):      # largest first: the smaller ones reuse its pool
            for greedy in (True, False):
                self._graphs[bucket, greedy] = self._capture(bucket, greedy, pool)

    def bucket_for(self, batch_size: int) -> int | None:
        """The smallest bucket that holds the batch; None if it is larger than all."""
        return next((b for b in self.buckets if b >= batch_size), None)

    def graph(self, bucket: int, greedy: bool) -> torch.cuda.CUDAGraph:
        """The captured graph itself, for benchmarks that replay it on staged inputs."""
        return self._graphs[bucket, greedy][0]

    def replay(self, bucket: int, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
               sampling: SamplingTensors) -> torch.Tensor:
        """Run the bucket's graph on these (bucket-padded) inputs; sampled tokens [bucket]."""
        width = meta.block_tables.shape[1]
        for static, fresh in ((self.token_ids, token_ids), (self.positions, positions),
                              (self.slots, meta.slot_mapping), (self.seq_lens, meta.seq_lens),
                              (self.temperature, sampling.temperature), (self.top_k, sampling.top_k),
                              (self.top_p, sampling.top_p), (self.seeds, sampling.seeds),
                              (self.counters, sampling.counters)):
            static[:bucket].copy_(fresh)
        self.block_tables[:bucket, :width].copy_(meta.block_tables)
        graph, tokens = self._graphs[bucket, sampling.all_greedy]
        graph.replay()
        return tokens

    def _step(self, b: int, greedy: bool) -> torch.Tensor:
        meta = AttentionMetadata(query_start_loc=self.query_start[:b + 1], seq_lens=self.seq_lens[:b],
                                 block_tables=self.block_tables[:b], slot_mapping=self.slots[:b],
                                 max_query_len=1, max_seq_len=self.max_model_len,
                                 plan=None)   # ops that support graphs plan nothing on the host
        hidden = self.model.forward(self.token_ids[:b], self.positions[:b], meta, self.kv_cache)
        sampling = SamplingTensors(self.temperature[:b], self.top_k[:b], self.top_p[:b], self.seeds[:b],
                                   self.counters[:b], all_greedy=greedy, any_filter=not greedy)
        return self.model.ops.sample(self.model.logits(hidden), sampling)

    def _capture(self, b: int, greedy: bool, pool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        # One eager run first, on a side stream: it initialises cuBLAS and allocator state
        # that must not be created during capture.
        side = self.side_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(b, greedy)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=side):
            tokens = self._step(b, greedy)
        return graph, tokens
