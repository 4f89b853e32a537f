"""The torch backend's own CPU kernels besides the matmuls (engine/cpu_ops.c), float32 where
the CPU has AVX2 + FMA: RMSNorm with its residual add, RoPE with the KV cache write, SiLU(gate)
* up, and decode attention
from the paged KV cache itself (in place of gathering each row's blocks into a padded copy for
torch's SDPA). At decode sizes torch's ops for these are mostly dispatch and temporaries: on the
2-core AVX2 EPYC, ~95 us a norm, ~50 us SiLU * up, ~300 us the gather and SDPA of a layer at 8
rows (torch.profiler; docs/performance.md, 2026-12-05). Each function here is one C call.
`runs(...)` says where they apply; elsewhere the torch backend keeps torch's ops.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from engine import cpu_features, cpu_library

SOURCE = Path(__file__).with_name("cpu_ops.c")
MAX_GROUP, HEAD_SIZES = 16, (64, 128)      # cpu_ops.c's


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    lib = cpu_library.load(SOURCE) if cpu_features.avx2_fma() else None
    if lib is not None:
        p, i = ctypes.c_void_p, ctypes.c_int
        lib.paged_decode_attention_f32.argtypes = [p, i, i, i, i, p, p, i, p, i, p, ctypes.c_float, p]
        lib.rms_norm_f32.argtypes = [p, p, p, i, i, ctypes.c_float, p, p]
        lib.silu_mul_f32.argtypes = [p, i, i, p]
        lib.rope_cache_f32.argtypes = [p, p, p, ctypes.c_int64, i, i, i, i, p, p, p, p, p]
        for fn in (lib.paged_decode_attention_f32, lib.rms_norm_f32, lib.silu_mul_f32, lib.rope_cache_f32):
            fn.restype = ctypes.c_int
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise ValueError(what)


def runs_pointwise(x: torch.Tensor) -> bool:
    """Whether rms_norm and silu_mul take x: float32 rows of whole vectors on this CPU."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and x.shape[-1] % 16 == 0 and _library() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight * r / rms(r), r) with r = x + residual (x itself without one); x [T, H] float32."""
    x = x.contiguous()
    out = torch.empty_like(x)
    r = x if residual is None else torch.empty_like(x)
    res = None if residual is None else residual.contiguous().data_ptr()
    _check(_library().rms_norm_f32(x.data_ptr(), res, weight.contiguous().data_ptr(), x.shape[0], x.shape[1], eps,
                                   r.data_ptr(), out.data_ptr()), "rms_norm needs rows of a multiple of 8 floats")
    return out, r


def runs_rope(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether rope_cache takes these: float32 views of one q|k|v projection's rows (the same
    row stride, heads packed) and a contiguous float32 cache."""
    views = (q, k, v)
    return (runs_pointwise(q) and all(x.dtype == torch.float32 and x.stride(2) == 1 and x.stride(1) == x.shape[2]
                                      and x.stride(0) == q.stride(0) for x in views)
            and k_cache.dtype == torch.float32 and k_cache.is_contiguous())


def rope_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               cos_sin: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
    """RoPE on q [T, nh, d] and k [T, nkv, d] in place, then k and v into the cache's slots [T]
    (int64, -1: not stored); cos_sin [positions, d] float32, positions [T] int64."""
    T, nh, d = q.shape
    positions, slots = positions.contiguous(), slots.contiguous()
    if positions.dtype != torch.int64 or slots.dtype != torch.int64 or cos_sin.dtype != torch.float32:
        raise ValueError("rope_cache needs int64 positions and slots and a float32 table")
    _check(_library().rope_cache_f32(q.data_ptr(), k.data_ptr(), v.data_ptr(), q.stride(0), T, nh, k.shape[1], d,
                                     cos_sin.contiguous().data_ptr(), positions.data_ptr(), slots.data_ptr(),
                                     k_cache.data_ptr(), v_cache.data_ptr()),
           "rope_cache needs a head size of a multiple of 16")


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for x [T, 2I] = gate | up, float32."""
    x = x.contiguous()
    out = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype)
    _check(_library().silu_mul_f32(x.data_ptr(), x.shape[0], x.shape[1] // 2, out.data_ptr()),
           "silu_mul needs halves of a multiple of 8 floats")
    return out


def runs(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether paged_decode takes these queries and this cache: float32 on the CPU, a head size
    it is built for and a query group it holds, on a CPU with AVX2 + FMA and a compiler."""
    nh, d = q.shape[-2:]
    nkv = k_cache.shape[2]
    return (q.device.type == "cpu" and q.dtype == k_cache.dtype == torch.float32 and k_cache.is_contiguous()
            and d in HEAD_SIZES and nh % nkv == 0 and nh // nkv <= MAX_GROUP and _library() is not None)


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                 seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale) v for one query a row over its first seq_lens[r] cached keys.
    q [R, nh, d]; k_cache, v_cache [blocks, block_size, nkv, d]; block_tables [R, >= the row's
    blocks] int32; seq_lens [R] int32, each >= 1. Returns [R, nh, d]."""
    rows, nh, d = q.shape
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError("paged_decode needs int32 block tables and lengths")
    q, block_tables, seq_lens = q.contiguous(), block_tables.contiguous(), seq_lens.contiguous()
    out = torch.empty_like(q)
    _check(_library().paged_decode_attention_f32(
        q.data_ptr(), rows, nh, k_cache.shape[2], d, k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[1],
        block_tables.data_ptr(), block_tables.stride(0), seq_lens.data_ptr(), scale, out.data_ptr()),
        "paged_decode needs a head size of 64 or 128, query groups of at most 16 heads "
        "and lengths of at least one key")
    return out
