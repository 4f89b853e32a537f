"""Build cuda_src/*.cu into cubins (cached on disk) and launch their kernels.

Compilation: `nvcc -cubin` for the device's arch, one cubin per source file,
cached under ~/.cache/roadgate (or $ROADGATE_CACHE) by a hash of the sources
(headers included), arch, flags and nvcc version; files compile in parallel.

Launching: PyCUDA's own launch path (`Function.__call__`, `prepared_async_call`,
`_launch_kernel`) only takes a `pycuda.driver.Stream`, which cannot wrap a
foreign CUstream, and a launch on any stream other than torch's current one is
neither ordered with torch's work nor captured into CUDA graphs. So modules are
loaded and kernels launched with the CUDA driver API (ctypes on libcuda, the
same library PyCUDA binds), on `torch.cuda.current_stream().cuda_stream`, in the
primary context that torch created and PyCUDA retains (see cuda_ops.py).

This module imports no GPU library at import time, so CPU CI can compile with it.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The cuda_src package: a checkout's folder, or the copy an installed wheel carries.
SRC_DIR = Path(importlib.util.find_spec("cuda_src").origin).parent
FLAGS = ("-O3", "-std=c++17", "-lineinfo")


def nvcc_path() -> str:
    found = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(found):
        raise RuntimeError("nvcc not found on PATH nor in $CUDA_HOME/bin")
    return found


def compile_source(src: Path, arch: str, out: Path) -> None:
    """nvcc one .cu into a cubin; RuntimeError carrying nvcc's message on failure."""
    cmd = [nvcc_path(), f"-arch={arch}", "-cubin", *FLAGS, "-I", str(SRC_DIR), "-o", str(out), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src.name} ({' '.join(cmd)}):\n{res.stderr.strip()}")


def _cache_dir() -> Path:
    return Path(os.environ.get("ROADGATE_CACHE", Path.home() / ".cache" / "roadgate"))


def build_all(arch: str) -> dict[str, Path]:
    """Cubin path per source stem, compiling only what the cache lacks."""
    version = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True).stdout
    headers = b"".join(p.read_bytes() for p in sorted(SRC_DIR.glob("*.cuh")))
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for src in sorted(SRC_DIR.glob("*.cu")):
        key = hashlib.sha256("\0".join([version, arch, *FLAGS]).encode() + headers + src.read_bytes()).hexdigest()
        wanted[src] = cache / f"{src.stem}-{arch}-{key[:16]}.cubin"

    def make(item):
        src, dst = item
        if dst.exists():
            return
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".cubin")
        os.close(fd)
        try:
            compile_source(src, arch, Path(tmp))
            os.replace(tmp, dst)  # atomic: concurrent builders never see half a file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    with ThreadPoolExecutor(max_workers=min(8, len(wanted) or 1)) as pool:
        list(pool.map(make, wanted.items()))
    return {src.stem: dst for src, dst in wanted.items()}


_ARG_TYPES = {"P": ctypes.c_void_p, "i": ctypes.c_int32, "l": ctypes.c_int64, "f": ctypes.c_float}
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class Driver:
    """The few CUDA driver calls the ops need, with errors turned into RuntimeError."""

    def __init__(self, debug: bool = False):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_void_p]
        self.debug = debug

    def check(self, code: int, what: str) -> None:
        if code != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(code, ctypes.byref(msg))
            raise RuntimeError(f"{what}: CUDA error {code} ({(msg.value or b'?').decode()})")

    def load(self, cubin: Path) -> "Module":
        return Module(self, cubin.read_bytes())


class Module:
    def __init__(self, driver: Driver, image: bytes):
        self.driver, self._image = driver, image  # the driver may read the image lazily: keep it alive
        self.handle = ctypes.c_void_p()
        driver.check(driver.lib.cuModuleLoadData(ctypes.byref(self.handle), image), "cuModuleLoadData")

    def kernel(self, name: str, signature: str) -> "Kernel":
        return Kernel(self, name, signature)


class Kernel:
    """A kernel with its argument signature (P pointer, i int32, l int64, f float32).

    Pointer arguments take torch tensors (their data_ptr), None (null) or ints.
    """

    def __init__(self, module: Module, name: str, signature: str):
        self.driver, self.name, self.types = module.driver, name, [_ARG_TYPES[c] for c in signature]
        self.handle = ctypes.c_void_p()
        self.driver.check(self.driver.lib.cuModuleGetFunction(ctypes.byref(self.handle), module.handle,
                                                              name.encode()), f"cuModuleGetFunction({name})")
        self._smem_limit = 0  # dynamic shared memory opted in so far

    def __call__(self, grid, block, *args, shared: int = 0, stream: int | None = None) -> None:
        import torch
        if len(args) != len(self.types):
            raise TypeError(f"{self.name} takes {len(self.types)} arguments, got {len(args)}")
        values = [t(a.data_ptr() if isinstance(a, torch.Tensor) else a) for t, a in zip(self.types, args)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        if shared > self._smem_limit:  # static + dynamic may pass 48 KB only after this opt-in
            self.driver.check(self.driver.lib.cuFuncSetAttribute(
                self.handle, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, ctypes.c_int(shared)),
                f"raising {self.name}'s shared memory to {shared}")
            self._smem_limit = shared
        grid = (*grid, 1, 1)[:3] if isinstance(grid, tuple) else (grid, 1, 1)
        block = (*block, 1, 1)[:3] if isinstance(block, tuple) else (block, 1, 1)
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        lib = self.driver.lib
        self.driver.check(lib.cuLaunchKernel(self.handle, *grid, *block, shared, stream,
                                              ctypes.cast(params, ctypes.c_void_p), None),
                          f"launching {self.name} grid={grid} block={block}")
        if self.driver.debug and not torch.cuda.is_current_stream_capturing():
            self.driver.check(lib.cuStreamSynchronize(ctypes.c_void_p(stream)), f"running {self.name}")
