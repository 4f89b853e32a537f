"""The GGUF's own 4-bit weights, run as they are stored: a CPU int4 matmul at decode sizes.

A Q4_0 / Q4_1 tensor is 32-element blocks along each row, each block w = q * d + m with
q in 0..15 (Q4_0: m = -8 d); a Q8_0 one (the file's embedding, and so its tied head) has
q in -128..127 and m = 0. `BlockWeight` keeps exactly that (the integers and the per-block
d and m); `PackedBlocks` is its form for a kernel: our own (engine/cpu_int4.c, where the CPU
has AVX-512 BF16 (bf16 activations) or AVX2 + FMA (float32); the file's d and m as they
are), else
`aten._weight_int4pack_mm_for_cpu`, which computes x @ ((q - 8) * scale + zero)^T per group
of 32 with bf16 activations: scale = d and zero = m + 8 d, the same numbers rounded to bf16.
The step streams a quarter of the bytes of bf16 weights and an eighth of float32 ones.

Rounding: the activations and the block factors enter the kernel as bf16 (the kernel's
float32 variant is a scalar loop, ~50x slower here); tests/test_quantized.py bounds the error.
The Q8_0 head runs through our kernel's float32 build where the CPU runs float32 activations
(AVX2, no native bf16): 30 MB a step where the dequantized float32 head reads 113. Elsewhere it
runs dequantized: torch's int8 weight-only matmul takes one scale per row, and requantizing
Q8_0's per-block scales to it moved the head's argmax on 1 row in 8 (measured).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine import cpu_int4
from engine.cpu_features import native_bf16

GROUP = 32                   # elements per GGUF block, and per group of the packed kernel
# Above this many rows (a prefill) the int4 kernel, which unpacks every weight for each tile of
# rows, loses to a dense bf16 GEMM: 6.3 vs 2.6 ms for the 1536x576 gate at 480 rows, 0.85 vs
# 0.37 at 64, even at 16 (cpu-avx512_bf16; at decode sizes it reads 4x fewer bytes and wins).
WIDE_ROWS = 32
# The dense copy is float32 only where its GEMMs are this much faster than bf16 ones: else the
# bf16 copy, half the memory (and no flip between the two on a CPU where they are close).
_FLOAT32_GAIN = 1.2
_INNER_TILES = 8             # _convert_weight_to_int4pack_for_cpu's inner K tiles (its CPU layout)


@functools.cache
def dense_prefill_dtype() -> torch.dtype | None:
    """The dtype of the dense copy for prefill GEMMs on this CPU, measured once per process:
    bf16 or float32, whichever multiplies a prefill-sized projection faster (float32 only by
    _FLOAT32_GAIN or more). Where bf16 is not native it is emulated: None, no copy. Both are
    native on AVX-512 BF16 CPUs, yet their oneDNN GEMMs differ by CPU: on a 2-core Intel Xeon
    float32 took 364 ms for 30 layers' projections at 400 rows where bf16 took 633."""
    if not native_bf16():
        return None
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 576, generator=gen), torch.randn(1536, 576, generator=gen)

    def seconds(dtype: torch.dtype) -> float:
        xd, wd = x.to(dtype), w.to(dtype)
        F.linear(xd, wd)                       # warm-up: oneDNN picks and builds its kernel
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            F.linear(xd, wd)
            runs.append(time.perf_counter() - start)
        return min(runs)
    return torch.float32 if seconds(torch.bfloat16) >= _FLOAT32_GAIN * seconds(torch.float32) else torch.bfloat16


def available() -> bool:
    """Whether this torch has the CPU int4 weight-only matmul (torch >= 2.5)."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


@dataclass
class BlockWeight:
    """A [N, K] weight as GGUF blocks: w[n, g*32 + j] = q[n, g*32 + j] * d[n, g] + m[n, g]."""
    q: torch.Tensor       # [N, K] int32: 0..15 (4 bits), -128..127 (8 bits)
    d: torch.Tensor       # [N, K/32] float32 (exactly the file's float16 values)
    m: torch.Tensor       # [N, K/32] float32 (0 for 8 bits)
    bits: int = 4

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.q.shape)

    def dequantize(self) -> torch.Tensor:
        n, k = self.shape
        blocks = self.q.reshape(n, k // GROUP, GROUP).float() * self.d[..., None] + self.m[..., None]
        return blocks.reshape(n, k)

    def map_rows(self, fn) -> BlockWeight:
        """The same weight with its rows rearranged by `fn` (applied to q, d and m alike)."""
        return BlockWeight(fn(self.q), fn(self.d), fn(self.m), self.bits)

    @staticmethod
    def cat(parts: list[BlockWeight]) -> BlockWeight:
        """Rows stacked, as torch.cat(dim=0) of the dense weights would be (parts of one format)."""
        if len({p.bits for p in parts}) != 1:
            raise ValueError("cannot stack 4-bit and 8-bit blocks into one weight")
        return BlockWeight(*(torch.cat([getattr(p, f) for p in parts]) for f in ("q", "d", "m")), parts[0].bits)

    def packable(self) -> bool:
        """Whether a kernel here runs it packed: 4 bits always (ours or torch's); 8 bits only
        through our float32 build, where the engine's activations are float32."""
        if self.bits == 4:
            return True
        n, k = self.shape
        return cpu_int4.activation_dtype() == torch.float32 and cpu_int4.available() and cpu_int4.fits(n, k)

    def pack(self, wide_dtype: torch.dtype | None | str = "auto", own_kernel: bool | None = None) -> PackedBlocks:
        """Packed for an int4 kernel (`own_kernel`; default: ours where it runs here, else
        torch's), plus a dense copy in `wide_dtype` (default: dense_prefill_dtype(); None: no
        copy) for steps of more than WIDE_ROWS rows: 2 or 4 more bytes a weight for a prefill
        ~2.4x faster (bf16 copy, AMD EPYC)."""
        n, k = self.shape
        wide_dtype = dense_prefill_dtype() if wide_dtype == "auto" else wide_dtype
        wide = None if wide_dtype is None else self.dequantize().to(wide_dtype)
        if self.bits == 8:
            if not self.packable():
                raise ValueError("8-bit blocks run packed only through engine/cpu_int4.c's float32 build")
            return PackedBlocks(*cpu_int4.pack(self.q, self.d, self.m, bits=8), n, k, own_kernel=True, wide=wide,
                                bits=8)
        if own_kernel is None:
            own_kernel = cpu_int4.available() and cpu_int4.fits(n, k)
        if own_kernel:
            return PackedBlocks(*cpu_int4.pack(self.q, self.d, self.m), n, k, own_kernel=True, wide=wide)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(self.q.contiguous(), _INNER_TILES)
        scale_zero = torch.stack([self.d, self.m + 8 * self.d], dim=-1).transpose(0, 1).contiguous()
        return PackedBlocks(packed, scale_zero.to(torch.bfloat16), n, k, own_kernel=False, wide=wide)


@dataclass
class PackedBlocks:
    """A block weight packed for a CPU kernel; `matmul(x)` is x @ w^T in x's dtype."""
    packed: torch.Tensor        # uint8 in the kernel's layout
    factors: torch.Tensor       # the block factors: ours [N/16, K/32, 2, 16] f16 d, m; torch's [K/32, N, 2] bf16
    out_features: int
    in_features: int
    own_kernel: bool            # engine/cpu_int4.c's layout, else torch's
    wide: torch.Tensor | None = None   # [N, K] bf16 or float32, for steps of more than WIDE_ROWS rows
    bits: int = 4

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.packed, self.factors) + ((self.wide,) if self.wide is not None else ())

    @property
    def num_parameters(self) -> int:
        return self.out_features * self.in_features

    @property
    def nbytes(self) -> int:
        """What a decode step reads of it: the packed weight and its factors."""
        return sum(t.numel() * t.element_size() for t in (self.packed, self.factors))

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.wide is not None and x.shape[0] > WIDE_ROWS:
            return F.linear(x.to(self.wide.dtype), self.wide).to(x.dtype)
        if self.own_kernel:
            y = cpu_int4.matmul(x, self.packed, self.factors, self.out_features, bits=self.bits)
            return y if y.dtype == x.dtype else y.to(x.dtype)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), self.packed, GROUP,
                                                          self.factors).to(x.dtype)
