"""Tensor maps (CUtensorMap) for Hopper's TMA unit, made by the CUDA driver.

A kernel that loads tiles with `cp.async.bulk.tensor` (cuda_src/gemm_tma.cu) takes, by
value, a 128-byte map of each 2-D operand: its address, shape and row stride, the box it
loads, and the swizzle it writes into shared memory. PyCUDA does not wrap
cuTensorMapEncodeTiled, so it is called through ctypes; the map is then 128 opaque bytes,
packed into the kernel's parameters (signature letter T, struct format "128s").
"""
from __future__ import annotations

import ctypes
import functools

from engine.ops.driver import check, driver

MAP_BYTES = 128
_DATA_TYPES = {"bf16": 9, "f16": 6}       # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, _FLOAT16
_INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_256B, _OOB_FILL_ZEROS = 0, 3, 3, 0
SWIZZLE_ROW_VALUES = 64                   # a box row: 128 bytes of 16-bit values, one swizzle row


@functools.cache
def _encode_tiled():
    fn = driver().cuTensorMapEncodeTiled
    u64s, u32s = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64s, u64s, u32s, u32s,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


@functools.lru_cache(maxsize=4096)
def swizzled_rows_map(address: int, rows: int, cols: int, dtype: str, box_rows: int) -> bytes:
    """The map of a row-major [rows, cols] 16-bit matrix at `address`, read in boxes of
    box_rows x 64 values written in wgmma's 128-byte swizzle; what lies past the matrix reads
    as zeros. Cached: the operands of a captured CUDA graph keep their addresses, and the
    weights keep theirs for good, so each encodes once."""
    if address % 16 or cols * 2 % 16 or not 0 < box_rows <= 256:
        raise ValueError(f"no TMA map for a [{rows}, {cols}] matrix at {address:#x} in boxes of {box_rows} rows: "
                         "the address and row stride must be 16-byte aligned, the box 1 to 256 rows")
    storage = ctypes.create_string_buffer(MAP_BYTES + 128)
    aligned = -(-ctypes.addressof(storage) // 128) * 128   # CUtensorMap's alignment (CUDA 13)
    dims = (ctypes.c_uint64 * 2)(cols, rows)               # innermost first
    row_stride = (ctypes.c_uint64 * 1)(cols * 2)           # bytes; the innermost stride is implied
    box = (ctypes.c_uint32 * 2)(SWIZZLE_ROW_VALUES, box_rows)
    element_steps = (ctypes.c_uint32 * 2)(1, 1)
    check(_encode_tiled()(aligned, _DATA_TYPES[dtype], 2, address, dims, row_stride, box, element_steps,
                          _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_PROMOTION_256B, _OOB_FILL_ZEROS),
          f"cuTensorMapEncodeTiled([{rows}, {cols}] {dtype}, box {box_rows} x {SWIZZLE_ROW_VALUES})")
    return ctypes.string_at(aligned, MAP_BYTES)
