"""The contract between the model code and an ops backend.

A backend supplies the arithmetic of a Llama forward pass and the sampler.
Linear layers come with the elementwise op before them (`norm_linear`,
`silu_linear`, and `attention_inputs`: norm, q|k|v projection, RoPE and the
cache write): by default the ops in turn, with the GEMM in torch (cuBLAS on the
GPU); a backend may fuse them where that pays (the cuda one does at 1-2 rows).
Every backend implements the same functions with the same shapes, so the torch
backend is the oracle the CUDA kernels are tested against.

Shapes: T tokens in the step (all sequences' new tokens, packed), B sequences,
H hidden size, nh / nkv query / KV heads, d head dim, V vocabulary.
KV cache of one layer: [num_blocks, block_size, nkv, d].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor   # [B+1] int32: packed offsets of each sequence's new tokens
    seq_lens: torch.Tensor          # [B] int32: context length once this step's tokens are in
    block_tables: torch.Tensor      # [B, max_blocks] int32, rows padded with 0
    slot_mapping: torch.Tensor      # [T] int64: cache slot (block * block_size + offset) per token
    max_query_len: int
    max_seq_len: int
    # The backend's own host-side plan of the step (Ops.plan_step); None where it needs none.
    plan: object = None


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

    def plan_step(self, query_lens: np.ndarray, seq_lens: np.ndarray) -> object:
        """What this backend works out on the host once a step, from each sequence's new
        tokens and context length (AttentionMetadata.plan); None: nothing."""

    def embed(self, token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """[T] ids, [V, H] table -> [T, H]."""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused residual add + RMSNorm over a float32 residual stream:
        r = float(x) (+ residual); returns (weight * norm(r) in x's dtype, r in float32)."""

    def rope_and_cache(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       positions: torch.Tensor, cos_sin: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Rotate q [T, nh, d] and k [T, nkv, d] in place (half-split RoPE; cos_sin is
        [max_pos, d] = cos | sin), and write k and v into the cache at slot_mapping."""

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Causal attention of each sequence's new queries over its cached context -> [T, nh, d]."""

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """[T, 2I] (gate | up) -> silu(gate) * up, [T, I]."""

    def sample(self, logits: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        """[B, V] logits -> [B] int64 token ids (greedy, or Gumbel-max over the
        temperature-scaled, top-k/top-p filtered distribution with counter-based noise)."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x [T, K] @ weight [N, K]^T -> [T, N] in x's dtype."""
        return F.linear(x, weight)

    def norm_linear(self, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                    weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """rms_norm(x, norm_weight, eps, residual), then the linear layer: (y, float32 residual)."""
        normed, residual = self.rms_norm(x, norm_weight, eps, residual)
        return self.linear(normed, weight), residual

    def attention_inputs(self, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                         eps: float, qkv_weight: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                         k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                         num_heads: int, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention block's input: norm_linear into the packed q|k|v projection, then
        rope_and_cache. Returns (q [T, nh, d] rotated, float32 residual); k and v are in the cache."""
        qkv, residual = self.norm_linear(x, residual, norm_weight, eps, qkv_weight)
        d = cos_sin.shape[1]
        T = qkv.shape[0]
        q, k, v = qkv.split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
        q = q.reshape(T, num_heads, d)
        self.rope_and_cache(q, k.reshape(T, num_kv_heads, d), v.reshape(T, num_kv_heads, d), positions, cos_sin,
                            k_cache, v_cache, slot_mapping)
        return q, residual

    def self_attention(self, x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                       qkv_weight: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
                       num_heads: int, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention block up to the output projection: attention_inputs, then
        attention. Returns (attention output [T, nh, d], float32 residual)."""
        q, residual = self.attention_inputs(x, residual, norm_weight, eps, qkv_weight, positions, cos_sin, k_cache,
                                            v_cache, meta.slot_mapping, num_heads, num_kv_heads)
        return self.attention(q, k_cache, v_cache, meta, scale), residual

    def silu_linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """silu_and_mul(x), then the linear layer."""
        return self.linear(self.silu_and_mul(x), weight)

    def logits(self, hidden: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """Float32 logits [T, V] of hidden [T, H] with the head [V, H]. Float32, not the
        model dtype, where it is cheap (the GPU multiplies 16-bit operands into float32
        outputs): bf16 logits round near-ties into exact ties, which flip greedy picks
        between otherwise equivalent implementations."""
        return F.linear(hidden.float(), head.float())
