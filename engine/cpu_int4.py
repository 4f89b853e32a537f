"""Our own CPU kernel for 4-bit GGUF weights at decode sizes (engine/cpu_int4.c).

torch's int4 weight-only matmul unpacks every weight again for each tile of 4 rows, so at 8
rows it spends most of a decode step unpacking (cpu-small-q4 on the 2-core AVX-512 BF16 EPYC:
15 ms a step of 30 layers, where the weights stream in ~6). This kernel unpacks each group
of nibbles once for several rows and takes the file's own block factors in float32 (see the
.c). Two builds: bf16 activations on AVX-512 BF16, float32 ones on AVX2 + FMA (where bf16 is
emulated and the engine runs float32); `matmul` takes the one this CPU has. The float32 build
also runs GGUF's 8-bit blocks (Q8_0: the tied head), bits=8.

It is built and loaded by engine.cpu_library; `available()` is False where the CPU has neither
build's instructions or nothing can compile it, and the engine then keeps torch's kernel.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from engine import cpu_features, cpu_library

SOURCE = Path(__file__).with_name("cpu_int4.c")
LANES, BLOCK = 16, 32        # output columns per tile, weights per GGUF block (cpu_int4.c's)


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The compiled kernels, or None where nothing compiles them (cpu_library logs why)."""
    lib = cpu_library.load(SOURCE)
    if lib is None:
        return None
    # (x, M, K, q, dm, N[, block-sum scratch], y)
    operands = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.int4_matmul_bf16.argtypes = operands + [ctypes.c_void_p, ctypes.c_void_p]
    lib.int4_matmul_f32.argtypes = lib.int8_matmul_f32.argtypes = operands + [ctypes.c_void_p]
    lib.int4_matmul_bf16.restype = lib.int4_matmul_f32.restype = lib.int8_matmul_f32.restype = None
    return lib


@functools.cache   # asked at every matmul
def activation_dtype() -> torch.dtype | None:
    """The activation type of the build this CPU runs (bf16 on AVX-512 BF16, float32 on AVX2 +
    FMA), None where neither runs."""
    if cpu_features.avx512_bf16():
        return torch.bfloat16
    return torch.float32 if cpu_features.avx2_fma() else None


def available() -> bool:
    return activation_dtype() is not None and _library() is not None


def fits(out_features: int, in_features: int) -> bool:
    return out_features % LANES == 0 and in_features % BLOCK == 0


def pack(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, bits: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's layout of w = q * d + m (d, m [N, K/32] float32 holding the file's float16
    values) and factors [N/16, K/32, 2, 16] float16 (d, then m). 4 bits (q [N, K] 0..15): nibble
    pairs [N/16, K/32, 16 pairs, 16 columns] uint8, key 2p in the low nibble, 2p + 1 in the high
    one. 8 bits (q in -128..127): [N/16, K/32, 32 keys, 16 columns] int8, as uint8."""
    n, k = q.shape
    if bits == 4:
        tiles = q.to(torch.uint8).view(n // LANES, LANES, k // BLOCK, BLOCK // 2, 2).permute(0, 2, 3, 1, 4)
        weights = (tiles[..., 0] | (tiles[..., 1] << 4)).contiguous()
    else:
        weights = q.to(torch.int8).view(torch.uint8).view(n // LANES, LANES, k // BLOCK, BLOCK).permute(0, 2, 3, 1)
    factors = torch.stack([d, m]).view(2, n // LANES, LANES, k // BLOCK).permute(1, 3, 0, 2)
    return weights.contiguous(), factors.to(torch.float16).contiguous()


def matmul(x: torch.Tensor, weights: torch.Tensor, factors: torch.Tensor, out_features: int,
           dtype: torch.dtype | None = None, bits: int = 4) -> torch.Tensor:
    """x [M, K] @ w^T -> [M, N] in the activation dtype (`dtype`, default this CPU's build's:
    see activation_dtype; 8 bits: float32 only), for a weight packed by `pack`."""
    dtype = torch.float32 if bits == 8 else dtype or activation_dtype()
    if x.dtype != dtype or not x.is_contiguous():   # the engine passes both already: skip two calls
        x = x.to(dtype).contiguous()
    rows, k = x.shape
    y = torch.empty((rows, out_features), dtype=dtype)
    operands = (x.data_ptr(), rows, k, weights.data_ptr(), factors.data_ptr(), out_features)
    if bits == 8:
        _library().int8_matmul_f32(*operands, y.data_ptr())
    elif dtype == torch.bfloat16:
        sums = torch.empty(rows * (k // BLOCK), dtype=torch.float32)
        _library().int4_matmul_bf16(*operands, sums.data_ptr(), y.data_ptr())
    else:
        _library().int4_matmul_f32(*operands, y.data_ptr())
    return y
