"""Piecewise CUDA graphs of the steps with prefill, one set per padded token count.

A prefill step is ~8 launches a layer, and on the H200 the host took longer to launch
them (7-9 ms for 30 layers) than the GPU to run them: a 4,000-token prompt waited on
the host. Replaying the step as graphs takes those launches off the host, except
attention's: the prefill kernel's grid is sized on the host from the step's lengths,
so it runs eagerly between the pieces (LlamaModel.piece), as vLLM's piecewise graphs
leave attention out. A step's tokens are padded to the bucket (token 0 at position 0,
no cache slot: the padding writes nothing, and attention reads only the step's own
queries); its sequences and their lengths are free. The last layer's attention, and
everything after it, runs at each sequence's last token alone (AttentionMetadata.last):
the last piece takes a fixed number of rows (kept_rows), the step's first.

A step of one sequence (one long prompt, or a chunk of one) replays the whole forward
pass as one graph instead, attention captured in it: the host launches nothing between
the step's upload and its logits, where the pieces left the GPU idle until the host had
planned and launched the first layer's attention (~0.3 ms of a 4,000-token prompt's
time to first token on the H100, docs/performance.md, session 33). Its attention is
captured at the bucket's length: the prefill kernel's grid holds the bucket's query
tiles, and a shorter prompt's blocks past its own tiles exit at once (the kernel reads
the lengths on the device); the tile height, the kernel and the split of its longest tiles
are the bucket's (CudaOps.prefill_m_tiles, prefill_short_ws, PrefillTiles.split).

Memory: the pieces and whole graphs of all buckets share one pool, captured largest
first. The pieces' attention writes into one buffer for all of them, and their q|k|v
projection into another (its queries a view of it): each layer's attention reads them
before the next piece writes it. A piece's other outputs, but the last one's, go back to
the pool once the next piece is captured, for later pieces to reuse: safe, because a step
replays one bucket's pieces in the order they were captured. A whole graph keeps only
its output; its scratch may lie on the last pieces' kept outputs, which every step that
reads them writes first. What stays held is `held_bytes`.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from engine.config import EngineConfig
from engine.cuda_graphs import capture
from engine.model import Carry, LlamaModel
from engine.ops import AttentionMetadata, Step
from engine.step_upload import StaticInputs

_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)


def token_buckets(max_num_batched_tokens: int) -> list[int]:
    return sorted({b for b in _BUCKETS if b < max_num_batched_tokens} | {max_num_batched_tokens})


def kept_rows(bucket: int, max_num_seqs: int) -> int:
    """The rows a bucket's last piece computes: one a sequence, as many as a step of that
    many tokens can have."""
    return min(bucket, max_num_seqs)


def held_bytes(config: EngineConfig, model_config, element_size: int) -> int:
    """GPU memory the graphs keep: the one q|k|v projection every piece of every bucket writes
    (its queries are a view of it); the engine leaves it out of the KV cache. A projection a
    piece, as the graphs kept before, held 1.56 GB at 8,192 tokens a step and 3.2 GB at 16,384
    (SmolLM2-135M): nearly all the GPU memory outside weights and KV cache (1.73 and 3.41 GB,
    benchmarks/decode_step.py on an H100, session 42; 0.21 and 0.32 GB with one, session 43)."""
    c = model_config
    return config.max_num_batched_tokens * (c.q_size + 2 * c.kv_size) * element_size


class PrefillGraphs:
    def __init__(self, config: EngineConfig, model: LlamaModel, kv_cache: torch.Tensor, inputs: StaticInputs):
        self.model, self.kv_cache, self.inputs = model, kv_cache, inputs.views
        self.programmatic = config.programmatic_launch
        self.max_num_seqs, self.max_model_len = config.max_num_seqs, config.max_model_len
        self.buckets = token_buckets(config.max_num_batched_tokens)
        self.side_stream = model.ops.new_stream()
        self.inputs["slots"].fill_(-1)            # the warm-up runs write nothing to the cache
        self.inputs["last_tokens"].zero_()        # and keep row 0
        s = model.shape
        self.attn = torch.empty((self.buckets[-1], s.num_heads, s.head_dim), dtype=kv_cache.dtype,
                                device=kv_cache.device)
        # The q|k|v projection every piece writes and the attention after it reads: pieces run
        # one at a time, each layer's attention between two of them.
        self.qkv = torch.empty((self.buckets[-1], (s.num_heads + 2 * s.num_kv_heads) * s.head_dim),
                               dtype=kv_cache.dtype, device=kv_cache.device)
        pool = torch.cuda.graph_pool_handle()
        # Per bucket: each piece's graph and the queries it leaves for attention or, the
        # last one, the step's hidden states.
        self._pieces: dict[int, list[tuple[torch.cuda.CUDAGraph, torch.Tensor]]] = {}
        # Per bucket, one sequence's whole step: its graph and the hidden state of its last token.
        self._whole: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        for bucket in reversed(self.buckets):
            self._pieces[bucket] = self._capture(bucket, pool)
            if self.bucket_for(min(bucket, self.max_model_len)) == bucket:   # a lone sequence's step can take it
                self._whole[bucket] = self._capture_whole(bucket, pool)

    def bucket_for(self, num_tokens: int) -> int | None:
        """The smallest bucket that holds the step's tokens; None if none does."""
        return next((b for b in self.buckets if b >= num_tokens), None)

    def run(self, bucket: int, sequences: int, metadata: Callable[[], AttentionMetadata]) -> torch.Tensor:
        """The step of `sequences` sequences uploaded into the static inputs (token arrays padded
        to `bucket`): final hidden states [kept_rows, H], a row a sequence, the padding rows
        garbage. One sequence replays its whole graph, which needs no metadata. Else `metadata`
        makes the step's attention metadata; it is called once the first piece is launched,
        which needs none, so that the host plans attention while the GPU embeds (the GPU waits
        on the host until the first attention is launched)."""
        if sequences == 1:
            graph, hidden = self._whole[bucket]
            graph.replay()
            return hidden
        model, v = self.model, self.inputs
        pieces, attn = self._pieces[bucket], self.attn[:bucket]
        pieces[0][0].replay()
        step = Step(model.shape, v["positions"][:bucket], model.cos_sin, metadata())
        for i, (graph, q) in enumerate(pieces[:-1]):
            if i:
                graph.replay()
            model.attend(i, q, attn, step, self.kv_cache)
        graph, hidden = pieces[-1]
        graph.replay()
        return hidden

    def _capture(self, bucket: int, pool) -> list[tuple[torch.cuda.CUDAGraph, torch.Tensor]]:
        model, v = self.model, self.inputs
        # The pieces read only the positions and cache slots of the step (RoPE, the cache
        # write); attention, which reads the rest, runs outside them.
        meta = AttentionMetadata(query_start_loc=v["query_start"][:2], seq_lens=v["seq_lens"][:1],
                                 block_tables=v["block_tables"][:1], slot_mapping=v["slots"][:bucket],
                                 max_query_len=bucket, max_seq_len=bucket)
        meta.last = meta.at_last_tokens(v["last_tokens"][:kept_rows(bucket, self.max_num_seqs)], bucket)
        step = Step(model.shape, v["positions"][:bucket], model.cos_sin, meta)
        token_ids, attn, qkv = v["token_ids"][:bucket], self.attn[:bucket], self.qkv[:bucket]
        pieces, carry = [], None
        for i in range(len(model.layers) + 1):
            graph, carry = capture(lambda i=i, c=carry: model.piece(i, c, token_ids, step, self.kv_cache, attn, qkv),
                                   pool, self.side_stream, self.programmatic)
            pieces.append((graph, carry.q if isinstance(carry, Carry) else carry))
        return pieces

    def _capture_whole(self, bucket: int, pool) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """One sequence's step at up to `bucket` new tokens as one graph, attention planned for
        as many tokens of as long a context, or max_model_len where that is less: no sequence
        is longer, and a longer one reads past the block table's row (the decode kernel of the
        last layer is planned for any context up to max_model_len, as the decode graphs'). The
        warm-up run reads such a prompt whose keys are all block 0 and writes nothing (no
        cache slots); the pieces captured after it read its length too."""
        model, v = self.model, self.inputs
        longest = min(bucket, self.max_model_len)
        v["query_start"][:2].copy_(torch.tensor([0, longest], dtype=torch.int32))
        v["seq_lens"][:1].fill_(longest)
        v["block_tables"][:1].zero_()
        plan = model.ops.plan_step(np.array([longest]), np.array([longest]))

        def forward() -> torch.Tensor:
            meta = AttentionMetadata(query_start_loc=v["query_start"][:2], seq_lens=v["seq_lens"][:1],
                                     block_tables=v["block_tables"][:1], slot_mapping=v["slots"][:bucket],
                                     max_query_len=longest, max_seq_len=self.max_model_len, plan=plan)
            meta.last = meta.at_last_tokens(v["last_tokens"][:1], self.max_model_len)
            return model.forward(v["token_ids"][:bucket], v["positions"][:bucket], meta, self.kv_cache)
        return capture(forward, pool, self.side_stream, self.programmatic)
