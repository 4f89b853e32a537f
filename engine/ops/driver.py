"""The CUDA driver API through ctypes, for what neither torch nor PyCUDA offers cheaply:
graph edge surgery (engine.ops.pdl), the step loop's two copies a step (`copy_async`) and
launches whose arguments PyCUDA cannot lay out (`launch_kernel`)."""
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


def launch_kernel(function: int, grid: tuple, block: tuple, shared: int, stream: int, args: list) -> None:
    """cuLaunchKernel with each argument passed by address (kernelParams), so the driver lays
    them out as the kernel declares them. A tensor map by value needs this: in PyCUDA's packed
    parameter buffer a 128-byte-aligned __grid_constant__ map is not where the kernel reads it
    (session 37: the same map loaded a box from global memory, and faulted passed by value).
    `args`: ctypes values (c_uint64 pointers, c_int32, a c_char array of the map's bytes ...)."""
    pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    check(driver().cuLaunchKernel(ctypes.c_void_p(function), *grid, *block, shared, ctypes.c_void_p(stream),
                                  pointers, None), "cuLaunchKernel")


_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED = 8   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def load_function(image: bytes, name: str) -> int:
    """The CUfunction `name` of a cubin image, loaded into the current context (kept loaded
    for the process: PyCUDA's Function does not give its handle to launch_kernel)."""
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    check(driver().cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    check(driver().cuModuleGetFunction(ctypes.byref(function), module, name.encode()), f"cuModuleGetFunction({name})")
    return function.value


def allow_dynamic_shared(function: int, nbytes: int) -> None:
    check(driver().cuFuncSetAttribute(ctypes.c_void_p(function), _FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED, nbytes),
          "cuFuncSetAttribute")
