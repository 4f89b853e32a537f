"""The contract between the model code and an ops backend.

A backend supplies the arithmetic of a Llama forward pass and the sampler. The
model calls two blocks a layer, `attention_block` and `mlp_block`, each with the
layer's weights and the `Step` that every layer of the forward pass shares.
By default a block runs the ops below in turn, with the GEMMs in torch (cuBLAS on
the GPU); a backend may fuse them where that pays (the cuda one fuses the norm or
activation into the GEMM at 1-2 rows, and RoPE into decode attention). Every
backend implements the same functions with the same shapes, so the torch backend
is the oracle the CUDA kernels are tested against.

Shapes: T tokens in the step (all sequences' new tokens, packed), B sequences,
H hidden size, nh / nkv query / KV heads, d head dim, V vocabulary.
KV cache of one layer (`kv_cache`): its k and v caches, each [num_blocks, block_size, nkv, d].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

# What `sample` gives a row it cannot sample: one with a NaN logit, or none above -inf. The
# runner's read turns it into engine.ModelOutputError; `embed` reads it as token 0, so the
# step launched before that read cannot fault.
NO_TOKEN = -1


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor   # [B+1] int32: packed offsets of each sequence's new tokens
    seq_lens: torch.Tensor          # [B] int32: context length once this step's tokens are in
    block_tables: torch.Tensor      # [B, max_blocks] int32, rows padded with 0
    slot_mapping: torch.Tensor      # [T] int64: cache slot (block * block_size + offset) per token
    max_query_len: int
    max_seq_len: int
    # The backend's own plan of the step (Ops.plan_step), and what it works out there
    # once for all layers; None where it needs none.
    plan: object = None
    # What a backend works out on the device at the step's first layer and every later
    # layer reuses (the cuda backend's decode work list): it cannot be planned on the host
    # when the step is a replayed CUDA graph. Set by the backend; None before.
    device_plan: object = None
    # A step with prefill: the same sequences' attention at their last new token alone
    # (query_start_loc [>= B]: that token's row of q, one query each; max_query_len 1). Only
    # those rows are sampled, so where this is set the model runs its last layer's
    # attention, and everything after it, at these rows alone (LlamaModel.forward): all of
    # query_start_loc's rows (a prefill graph pads them), of which attention reads the first B.
    last: AttentionMetadata | None = None
    # Whether the keys this attention reads were written by the step's own kernels before
    # it, not only by earlier steps (besides each row's newest): set on a prefill step's
    # `last`. A kernel that reads earlier steps' keys before waiting on the kernel before it
    # (cuda_src/attention_decode.cu, attn_decode_few) must not do so here.
    step_wrote_keys: bool = False

    def at_last_tokens(self, rows: torch.Tensor, max_seq_len: int, plan: object = None) -> AttentionMetadata:
        """`last` of this prefill step: its sequences at one query each, q's `rows`."""
        return AttentionMetadata(query_start_loc=rows, seq_lens=self.seq_lens, block_tables=self.block_tables,
                                 slot_mapping=self.slot_mapping, max_query_len=1, max_seq_len=max_seq_len,
                                 plan=plan, step_wrote_keys=True)


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    qkv: torch.Tensor        # [(nh + 2 nkv) d, H]: q | k | v, one GEMM
    o: torch.Tensor          # [H, nh d]
    ffn_norm: torch.Tensor
    gate_up: torch.Tensor    # [2 I, H]: gate | up, one GEMM
    down: torch.Tensor       # [H, I]


@dataclass(frozen=True)
class LayerShape:
    """The model's constants that a decoder layer's ops need; made once per model."""
    num_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float             # of the attention scores: head_dim ** -0.5
    rms_norm_eps: float


@dataclass
class Step:
    """What every layer of one forward pass shares; made once per forward."""
    shape: LayerShape
    positions: torch.Tensor  # [T] int64
    cos_sin: torch.Tensor    # [max_position, d] float32 RoPE table: cos | sin (half-split)
    meta: AttentionMetadata


@dataclass
class SamplingTensors:
    temperature: torch.Tensor       # [B] float32; 0 = greedy
    top_k: torch.Tensor             # [B] int32; 0 = off
    top_p: torch.Tensor             # [B] float32; 1 = off
    seeds: torch.Tensor             # [B] int64
    counters: torch.Tensor          # [B] int64: index of the output token being sampled
    all_greedy: bool
    any_filter: bool                # some row uses top-k or top-p


class Ops(Protocol):
    name: str
    # Whether a decode step on these ops can be captured in a CUDA graph and replayed
    # (the engine then captures one per batch bucket, unless enforce_eager).
    supports_graphs: bool

    def plan_step(self, query_lens: np.ndarray, seq_lens: np.ndarray,
                  query_starts: np.ndarray | None = None) -> object:
        """What this backend works out on the host once a step, from each sequence's new
        tokens and context length (AttentionMetadata.plan); None: nothing. query_starts:
        each sequence's first query row in q, where they are not packed (AttentionMetadata.last)."""

    def embed(self, token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """[T] ids, [V, H] table -> [T, H]; a NO_TOKEN id reads row 0."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused residual add + RMSNorm over a float32 residual stream:
        r = float(x) (+ residual); returns (weight * norm(r) in x's dtype, r in float32)."""

    def rope_and_cache(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                       step: Step) -> None:
        """Rotate q [T, nh, d] and k [T, nkv, d] in place (half-split RoPE at the step's
        positions), and write k and v into the cache at the step's slot_mapping."""

    def attention(self, q: torch.Tensor, kv_cache: torch.Tensor, step: Step,
                  out: torch.Tensor | None = None) -> torch.Tensor:
        """Causal attention of each sequence's new queries over its cached context -> [T, nh, d],
        into `out` (contiguous, q's shape and dtype) where given. Rows of q past the step's
        packed queries (padding) are left as `out` had them."""

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """[T, 2I] (gate | up) -> silu(gate) * up, [T, I]."""

    def take_pending_tokens(self, token_ids: torch.Tensor, source_rows: torch.Tensor,
                            previous: torch.Tensor) -> None:
        """In place, token_ids[i] = previous[source_rows[i]] where source_rows[i] >= 0: a
        decode row's newest token, sampled by the step before and not read by the host yet.
        token_ids, source_rows [T] int64; previous [R] int64 (that step's sampled tokens)."""
        torch.where(source_rows >= 0, previous[source_rows.clamp_min(0)], token_ids, out=token_ids)

    def sample(self, logits: torch.Tensor, sampling: SamplingTensors,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """[B, V] logits -> [B] int64 token ids (greedy, or Gumbel-max over the
        temperature-scaled, top-k/top-p filtered distribution with counter-based noise),
        NO_TOKEN for a row with a NaN logit or none above -inf; written into `out` ([B]
        int64, contiguous) where it is given."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [T, K] @ weight [N, K]^T -> [T, N] in x's dtype; into `out` where given (a buffer
        the caller keeps: the prefill graphs' q|k|v). The torch backend also takes an
        engine.quantized.PackedBlocks weight (quantization "gguf")."""
        return F.linear(x, weight) if out is None else torch.mm(x, weight.t(), out=out)

    def norm_linear(self, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                    weight: torch.Tensor, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """rms_norm(x, norm_weight, eps, residual), then the linear layer (into `out` where
        given): (y, float32 residual)."""
        normed, residual = self.rms_norm(x, norm_weight, eps, residual)
        return self.linear(normed, weight, out), residual

    def silu_linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """silu_and_mul(x), then the linear layer."""
        return self.linear(self.silu_and_mul(x), weight)

    def attention_inputs(self, x: torch.Tensor, residual: torch.Tensor | None, layer: LayerWeights,
                         kv_cache: torch.Tensor, step: Step,
                         qkv_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention block's input: norm_linear into the packed q|k|v projection (`qkv_out`
        where given, [T, (nh + 2 nkv) d]), then rope_and_cache. Returns (q [T, nh, d] rotated,
        a view of the projection; float32 residual); k and v are in the cache."""
        s = step.shape
        qkv, residual = self.norm_linear(x, residual, layer.attn_norm, s.rms_norm_eps, layer.qkv, qkv_out)
        T, d, nkv = qkv.shape[0], s.head_dim, s.num_kv_heads
        q, k, v = qkv.split([s.num_heads * d, nkv * d, nkv * d], dim=-1)
        q = q.reshape(T, s.num_heads, d)
        self.rope_and_cache(q, k.reshape(T, nkv, d), v.reshape(T, nkv, d), kv_cache, step)
        return q, residual

    def attention_block(self, x: torch.Tensor, residual: torch.Tensor | None, layer: LayerWeights,
                        kv_cache: torch.Tensor, step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """norm -> q|k|v projection -> RoPE on q, k -> k, v into the cache -> attention ->
        output projection. Returns (out [T, H], float32 residual)."""
        q, residual = self.attention_inputs(x, residual, layer, kv_cache, step)
        return self.linear(self.attention(q, kv_cache, step).flatten(1), layer.o), residual

    def mlp_block(self, x: torch.Tensor, residual: torch.Tensor | None, layer: LayerWeights,
                  step: Step) -> tuple[torch.Tensor, torch.Tensor]:
        """norm -> gate|up projection -> silu(gate) * up -> down projection.
        Returns (out [T, H], float32 residual)."""
        gate_up, residual = self.norm_linear(x, residual, layer.ffn_norm, step.shape.rms_norm_eps, layer.gate_up)
        return self.silu_linear(gate_up, layer.down), residual

    def logits(self, hidden: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Float32 logits [T, V] of hidden [T, H] with the head [V, H]. Float32, not the
        model dtype, where it is cheap (the GPU multiplies 16-bit operands into float32
        outputs): bf16 logits round near-ties into exact ties, which flip greedy picks
        between otherwise equivalent implementations."""
        return F.linear(hidden.float(), head.float())
