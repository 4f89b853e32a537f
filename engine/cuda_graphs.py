"""CUDA graphs of the decode step, one per padded batch-size bucket.

A decode step at batch B is ~12 launches per layer; replaying them as one graph
takes the host out of the step. Each bucket is captured twice: greedy-only
(argmax) and general sampling. The graphs read their inputs from the runner's
StaticInputs, which each step's one upload fills; padding rows have no cache slot
(-1) and a one-token context, so they write nothing and read only block 0.
Every step, graphed or not, samples into one buffer, `sampled`: a graph starts by
taking its rows' pending tokens (those the host has not read yet) from there, at an
address fixed at capture, so the step needs no launch of its own for them.
Attention is captured for contexts up to max_model_len (the work list is planned
on the device each step, see CudaOps.plan_decode).
"""
from __future__ import annotations

import gc

import torch

from engine.config import EngineConfig
from engine.model import LlamaModel
from engine.ops import AttentionMetadata, SamplingTensors
from engine.ops.pdl import make_programmatic
from engine.step_upload import StaticInputs

_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeBuckets:
    """What the runner sees of the decode graphs besides their replay: the padded batch sizes
    they are captured at, and `sampled`, the buffer every step samples into."""

    def __init__(self, max_num_seqs: int, device: torch.device):
        self.buckets = sorted({b for b in _BUCKETS if b < max_num_seqs} | {max_num_seqs})
        self.sampled = torch.zeros(max_num_seqs, dtype=torch.int64, device=device)

    def bucket_for(self, batch_size: int) -> int | None:
        """The smallest bucket that holds the batch; None if it is larger than all."""
        return next((b for b in self.buckets if b >= batch_size), None)


class DecodeGraphs(DecodeBuckets):
    def __init__(self, config: EngineConfig, model: LlamaModel, kv_cache: torch.Tensor, inputs: StaticInputs):
        super().__init__(config.max_num_seqs, kv_cache.device)
        self.model, self.kv_cache, self.max_model_len = model, kv_cache, config.max_model_len
        self.inputs = inputs.views
        # What a padding row holds, for the warm-up runs and captures (the runner's uploads
        # pad the same way).
        v = self.inputs
        v["slots"].fill_(-1)
        v["seq_lens"].fill_(1)
        v["top_p"].fill_(1)
        v["query_start"].copy_(torch.arange(len(v["query_start"]), dtype=torch.int32))
        v["source_rows"].fill_(-1)
        self._graphs: dict[tuple[int, bool], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.side_stream = model.ops.new_stream()
        pool = torch.cuda.graph_pool_handle()
        for bucket in reversed(self.buckets):      # largest first: the smaller ones reuse its pool
            for greedy in (True, False):
                self._graphs[bucket, greedy] = capture(lambda b=bucket, g=greedy: self._step(b, g), pool,
                                                       self.side_stream, config.programmatic_launch)

    def graph(self, bucket: int, greedy: bool) -> torch.cuda.CUDAGraph:
        """The captured graph itself, for benchmarks that replay it on staged inputs."""
        return self._graphs[bucket, greedy][0]

    def replay(self, bucket: int, greedy: bool) -> torch.Tensor:
        """Run the bucket's graph on the inputs uploaded into its static buffer (rows padded
        to the bucket); sampled tokens [bucket], a view of `sampled`."""
        graph, tokens = self._graphs[bucket, greedy]
        graph.replay()
        return tokens

    def _step(self, b: int, greedy: bool) -> torch.Tensor:
        v = self.inputs
        self.model.ops.take_pending_tokens(v["token_ids"][:b], v["source_rows"][:b], self.sampled)
        meta = AttentionMetadata(query_start_loc=v["query_start"][:b + 1], seq_lens=v["seq_lens"][:b],
                                 block_tables=v["block_tables"][:b], slot_mapping=v["slots"][:b],
                                 max_query_len=1, max_seq_len=self.max_model_len,
                                 plan=None)   # ops that support graphs plan nothing on the host
        hidden = self.model.forward(v["token_ids"][:b], v["positions"][:b], meta, self.kv_cache)
        sampling = SamplingTensors(v["temperature"][:b], v["top_k"][:b], v["top_p"][:b], v["seeds"][:b],
                                   v["counters"][:b], all_greedy=greedy, any_filter=not greedy)
        return self.model.ops.sample(self.model.logits(hidden), sampling, out=self.sampled[:b])


def capture(run, pool, side: torch.cuda.Stream, programmatic: bool) -> tuple[torch.cuda.CUDAGraph, object]:
    """A graph of `run()` and what it returned. One eager run first, on the side stream (off
    the default stream, as capture requires; PyCUDA launches only on streams it made): it
    initialises cuBLAS and allocator state that must not be created during capture.
    `programmatic`: the edges between our own kernels become programmatic (engine.ops.pdl)
    before the graph is instantiated."""
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph(keep_graph=programmatic)
    # No cyclic garbage collection inside the capture: a dead engine it found would unload
    # its PyCUDA modules there, which a capture forbids, and the capture would fail.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph, pool=pool, stream=side):
            out = run()
    finally:
        if collecting:
            gc.enable()
    if programmatic:
        graph.programmatic_edges = make_programmatic(graph.raw_cuda_graph())
        graph.instantiate()
    return graph, out
