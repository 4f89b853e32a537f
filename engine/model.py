"""The Llama forward pass over a paged KV cache, written against the ops contract.

Everything goes through the ops backend, a layer as its attention block and its
MLP block (a backend may fuse the ops inside each). Q/K/V and gate/up
projections are fused into one GEMM each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.model_config import ModelConfig
from engine.ops import AttentionMetadata, LayerShape, LayerWeights, Ops, Step
from engine.quantized import BlockWeight, PackedBlocks


def rope_cos_sin(config: ModelConfig, max_position: int, device) -> torch.Tensor:
    """[max_position, head_dim] table: cos of each frequency (twice) | sin (twice), float32."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if config.rope_scaling:
        inv_freq = _llama3_scaled(inv_freq, config.rope_scaling)
    freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = d // 2
    return torch.cat((emb.cos()[:, :half], emb.sin()[:, :half]), dim=-1).to(device)


def _llama3_scaled(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


@dataclass
class Carry:
    """What one piece of the forward pass (LlamaModel.piece) hands the next: a layer's
    rotated queries (for its attention) and the residual stream."""
    q: torch.Tensor            # [T, nh, d]
    residual: torch.Tensor     # [T, H] float32


class LlamaModel:
    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], ops: Ops,
                 device: torch.device, dtype: torch.dtype, max_position: int):
        self.config = config
        self.ops = ops
        c = config

        def pop(name: str) -> torch.Tensor | BlockWeight:
            if name not in weights:
                raise ValueError(f"weights lack tensor {name}")
            return weights.pop(name)

        def place(w: torch.Tensor | BlockWeight) -> torch.Tensor | PackedBlocks:
            if isinstance(w, BlockWeight):
                return w.pack() if w.packable() else place(w.dequantize())
            return w.to(device=device, dtype=dtype)

        def take(name: str) -> torch.Tensor | PackedBlocks:
            return place(pop(name))

        def fused(*names: str) -> torch.Tensor | PackedBlocks:
            parts = [pop(n) for n in names]
            if all(isinstance(p, BlockWeight) for p in parts) and len({p.bits for p in parts}) == 1:
                return place(BlockWeight.cat(parts))
            # A file mixing types inside one fused group runs that group dense.
            return place(torch.cat([p.dequantize() if isinstance(p, BlockWeight) else p for p in parts]).contiguous())

        embed = pop("model.embed_tokens.weight")
        self.embed = place(embed.dequantize() if isinstance(embed, BlockWeight) else embed)   # looked up by rows
        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            self.layers.append(LayerWeights(
                attn_norm=take(p + "input_layernorm.weight"),
                qkv=fused(p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"),
                o=take(p + "self_attn.o_proj.weight"),
                ffn_norm=take(p + "post_attention_layernorm.weight"),
                gate_up=fused(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                down=take(p + "mlp.down_proj.weight")))
        self.norm = take("model.norm.weight")
        if not c.tie_word_embeddings:
            self.lm_head = take("lm_head.weight")
        elif isinstance(embed, BlockWeight) and embed.packable():
            self.lm_head = place(embed)   # the same parameters, packed for the head's matmul
        else:
            self.lm_head = self.embed
        weights.pop("lm_head.weight", None)   # some tied checkpoints store a copy
        self.cos_sin = rope_cos_sin(c, max_position, device)
        self.shape = LayerShape(c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim ** -0.5, c.rms_norm_eps)

    def weights(self):
        """Every weight the model holds, each once (a tied head is the embedding, or its packed copy)."""
        yield from (self.embed, self.norm)
        if self.lm_head is not self.embed:
            yield self.lm_head
        for layer in self.layers:
            yield from vars(layer).values()

    @property
    def num_parameters(self) -> int:
        tied_copy = self.lm_head if self.config.tie_word_embeddings and self.lm_head is not self.embed else None
        return sum(w.num_parameters if isinstance(w, PackedBlocks) else w.numel()
                   for w in self.weights() if w is not tied_copy)

    def tensors(self):
        """Every tensor the model holds on its device (packed weights as their parts)."""
        for w in (*self.weights(), self.cos_sin):
            yield from w.tensors() if isinstance(w, PackedBlocks) else (w,)

    def decode_bytes(self) -> int:
        """Weight bytes one decode step reads: every layer, the final norm, the head
        (an untied embedding only at the step's token rows, which is negligible)."""
        read = [w for w in self.weights() if w is not self.embed]
        if self.lm_head is self.embed:
            read.append(self.lm_head)
        return sum(w.nbytes if isinstance(w, PackedBlocks) else w.numel() * w.element_size() for w in read)

    def forward(self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_cache: torch.Tensor) -> torch.Tensor:
        """Packed new tokens of all sequences -> final hidden states: [T, H], or, where the
        step keeps only each sequence's last token (meta.last), [B, H] at those tokens.

        kv_cache: [num_layers, 2, num_blocks, block_size, nkv, d].
        """
        ops = self.ops
        step = Step(self.shape, positions, self.cos_sin, meta)
        h = ops.embed(token_ids, self.embed)
        residual = None
        for i, layer in enumerate(self.layers):
            kv = (kv_cache[i, 0], kv_cache[i, 1])
            if meta.last is not None and i == len(self.layers) - 1:
                q, residual = ops.attention_inputs(h, residual, layer, kv, step)
                attn = torch.empty(q.shape, dtype=q.dtype, device=q.device)
                self.attend(i, q, attn, step, kv_cache)
                return self._finish(attn, residual, step)
            h, residual = ops.attention_block(h, residual, layer, kv, step)
            h, residual = ops.mlp_block(h, residual, layer, step)
        return ops.rms_norm(h, self.norm, self.shape.rms_norm_eps, residual)[0]

    # The forward pass cut at attention, for CUDA graphs of steps with prefill
    # (engine.prefill_graphs): attention is the one op whose launch the host sizes from the
    # step's lengths (the prefill kernel's tiles), so it runs between captured pieces. The
    # pieces run the ops `forward` runs for a prefill, in the same order.

    def piece(self, i: int, carry: Carry | None, token_ids: torch.Tensor, step: Step,
              kv_cache: torch.Tensor, attn: torch.Tensor, qkv: torch.Tensor | None = None) -> Carry | torch.Tensor:
        """Piece i of num_layers + 1: piece 0 embeds the tokens, piece i > 0 finishes layer
        i - 1 (output projection and MLP) from `carry` and its attention's output `attn`
        [T, nh, d]; then layer i's attention inputs (its Carry, its queries a view of `qkv`
        [T, (nh + 2 nkv) d] where given: every layer may share one, as each layer's attention
        reads its queries before the next piece writes), or, after the last layer, the final
        norm (hidden states, as `forward` returns them)."""
        ops = self.ops
        if i == len(self.layers):
            return self._finish(attn, carry.residual, step)
        if i == 0:
            h, residual = ops.embed(token_ids, self.embed), None
        else:
            layer = self.layers[i - 1]
            h = ops.linear(attn.flatten(1), layer.o)
            h, residual = ops.mlp_block(h, carry.residual, layer, step)
        q, residual = ops.attention_inputs(h, residual, self.layers[i], (kv_cache[i, 0], kv_cache[i, 1]), step,
                                           qkv)
        return Carry(q, residual)

    def attend(self, i: int, q: torch.Tensor, attn: torch.Tensor, step: Step, kv_cache: torch.Tensor) -> None:
        """Layer i's attention of queries q (piece i's), between pieces i and i + 1: into attn.
        The last layer's runs at each sequence's last token alone where the step says so."""
        if step.meta.last is not None and i == len(self.layers) - 1:
            step = Step(step.shape, step.positions, step.cos_sin, step.meta.last)
        self.ops.attention(q, (kv_cache[i, 0], kv_cache[i, 1]), step, out=attn)

    def _finish(self, attn: torch.Tensor, residual: torch.Tensor, step: Step) -> torch.Tensor:
        """The last layer from its attention's output (output projection, MLP), then the final
        norm: at the rows meta.last keeps where it is set (the rest of attn was not computed)."""
        ops, layer, last = self.ops, self.layers[-1], step.meta.last
        if last is not None:
            attn, residual = attn.index_select(0, last.query_start_loc), residual.index_select(0, last.query_start_loc)
        h = ops.linear(attn.flatten(1), layer.o)
        h, residual = ops.mlp_block(h, residual, layer, step)
        return ops.rms_norm(h, self.norm, self.shape.rms_norm_eps, residual)[0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.ops.logits(hidden, self.lm_head)
