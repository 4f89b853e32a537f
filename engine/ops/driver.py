"""The CUDA driver API through ctypes, for what neither torch nor PyCUDA offers cheaply:
graph edge surgery (engine.ops.pdl) and the step loop's two copies a step (`copy_async`)."""
from __future__ import annotations

import ctypes
import functools

import torch


@functools.cache
def driver() -> ctypes.CDLL:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemcpyAsync.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    return cuda


def check(result: int, call: str) -> None:
    if result:
        raise RuntimeError(f"{call} failed with CUresult {result}")


def copy_async(dst: int, src: int, nbytes: int, device_index: int) -> None:
    """Copy nbytes from address src to dst on torch's current stream, without waiting. Pinned
    host memory and device memory share one address space (UVA), so either side may be
    either. A few µs of host time, where torch's `copy_` takes tens on a slow host (its
    dispatch, and an event it records for the pinned block): two copies of every decode
    step. The caller keeps both buffers alive and unchanged until the copy has run."""
    check(driver().cuMemcpyAsync(dst, src, nbytes, torch._C._cuda_getCurrentRawStream(device_index)),
          "cuMemcpyAsync")
