"""Build cuda_src/*.cu into cubins (cached on disk) and launch their kernels.

Compilation: `nvcc -cubin` for the device's arch, one cubin per source file,
cached under ~/.cache/roadgate (or $ROADGATE_CACHE) by a hash of the sources
(headers included), arch, flags and nvcc version; files compile in parallel.

Launching: PyCUDA loads each cubin (`module_from_buffer`) and launches prepared
calls (`prepared_async_call`) on torch's current stream, which must be the default
stream or one PyCUDA made and torch adopted (`Launcher.new_stream`).

This module imports no GPU library at import time, so CPU CI can compile with it.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engine.build_cache import build_once, cache_dir

def _sources() -> Path:
    """The cuda_src package: the copy an installed wheel carries, or a checkout's folder (an
    editable install made before cuda_src was a package does not map it)."""
    spec = importlib.util.find_spec("cuda_src")
    return Path(spec.origin).parent if spec and spec.origin else Path(__file__).resolve().parents[2] / "cuda_src"


SRC_DIR = _sources()
FLAGS = ("-O3", "-std=c++17", "-lineinfo")


def nvcc_path() -> str:
    found = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(found):
        raise RuntimeError("nvcc not found on PATH nor in $CUDA_HOME/bin")
    return found


def compile_source(src: Path, arch: str, out: Path, ptxas_report: bool = False) -> str:
    """nvcc one .cu into a cubin; RuntimeError carrying nvcc's message on failure. With
    `ptxas_report`, returns ptxas's -v report (registers, spills, and the notes it makes only
    there, such as wgmma serialized); else ""."""
    cmd = [nvcc_path(), f"-arch={arch}", "-cubin", *FLAGS, *(["-Xptxas", "-v"] if ptxas_report else []),
           "-I", str(SRC_DIR), "-o", str(out), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {src.name} ({' '.join(cmd)}):\n{res.stderr.strip()}")
    return res.stderr if ptxas_report else ""


def arch_of(major: int, minor: int) -> str:
    """The arch to build for a device of this compute capability: Hopper's sm_90a, whose
    wgmma instructions plain sm_90 lacks (its cubins run on sm_90 devices only), else sm_XY."""
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def build_all(arch: str) -> dict[str, Path]:
    """Cubin path per source stem, compiling only what the cache lacks."""
    version = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True).stdout
    headers = b"".join(p.read_bytes() for p in sorted(SRC_DIR.glob("*.cuh")))
    cache = cache_dir()
    wanted = {}
    for src in sorted(SRC_DIR.glob("*.cu")):
        key = hashlib.sha256("\0".join([version, arch, *FLAGS]).encode() + headers + src.read_bytes()).hexdigest()
        wanted[src] = cache / f"{src.stem}-{arch}-{key[:16]}.cubin"

    with ThreadPoolExecutor(max_workers=min(8, len(wanted) or 1)) as pool:
        list(pool.map(lambda item: build_once(item[1], lambda out: compile_source(item[0], arch, out)),
                      wanted.items()))
    return {src.stem: dst for src, dst in wanted.items()}


# Kernel signatures: P pointer, i int32, l int64, f float32, T a tensor map by value (128
# bytes, engine/ops/tensor_map.py); PyCUDA packs them with struct.
_STRUCT_FORMAT = {"P": "P", "i": "i", "l": "q", "f": "f", "T": "128s"}
# ... and as ctypes values, for kernels launched through the driver (tensor maps).
_CTYPES = {"P": ctypes.c_uint64, "i": ctypes.c_int32, "l": ctypes.c_int64, "f": ctypes.c_float,
           "T": lambda b: (ctypes.c_char * len(b)).from_buffer_copy(b)}


@dataclass(frozen=True)
class SmLimits:
    """What one SM holds at once (the device's attributes of those names)."""
    registers: int
    threads: int
    blocks: int
    shared: int             # bytes, the reserve of every block included
    reserved_shared: int    # bytes the system keeps of each block's shared memory


# Register allocation (CUDA's occupancy calculator, sm_70 on): a warp's registers come in
# units of 256 from one of the SM's 4 quarters, so a quarter's file holds whole warps only.
_REG_UNIT, _SM_QUARTERS, _SMEM_UNIT = 256, 4, 128


def blocks_per_sm(sm: SmLimits, threads: int, registers: int, shared: int) -> int:
    """How many blocks of `threads` threads, `registers` registers a thread and `shared`
    bytes of shared memory (static + dynamic) one SM holds at once: the least of the limits
    by warps, blocks, registers and shared memory."""
    warps = -(-threads // 32)
    warp_registers = -(-registers * 32 // _REG_UNIT) * _REG_UNIT
    by_registers = sm.registers // _SM_QUARTERS // warp_registers * _SM_QUARTERS // warps
    block_shared = -(-(shared + sm.reserved_shared) // _SMEM_UNIT) * _SMEM_UNIT
    return min(sm.threads // 32 // warps, sm.blocks, by_registers, sm.shared // block_shared)


class Launcher:
    """Loads cubins and launches their kernels through PyCUDA, in the primary context that
    torch created and PyCUDA retains (see cuda_ops.py).

    PyCUDA launches only on streams it created: the legacy default stream (torch's default,
    handle 0) or a `pycuda.driver.Stream`. So every other stream the engine's kernels run on
    is made here and adopted by torch (`new_stream`): torch's work and our launches on it are
    ordered, and a graph captured on it records both."""

    def __init__(self, device_index: int, debug: bool = False):
        import pycuda.driver as drv
        import torch
        self.drv, self.debug, self.device_index = drv, debug, device_index
        self._streams: dict[int, object] = {0: None}   # CUstream handle -> the pycuda.driver.Stream
        attr, device = drv.device_attribute, drv.Device(device_index)
        self.sm = SmLimits(*(device.get_attribute(a) for a in (
            attr.MAX_REGISTERS_PER_MULTIPROCESSOR, attr.MAX_THREADS_PER_MULTIPROCESSOR,
            attr.MAX_BLOCKS_PER_MULTIPROCESSOR, attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
            attr.RESERVED_SHARED_MEMORY_PER_BLOCK)))
        # torch's current stream as a raw handle: torch.cuda.current_stream() builds a
        # Stream object per call, a large share of an eager launch's host time.
        self._raw_stream = torch._C._cuda_getCurrentRawStream

    def new_stream(self):
        """A stream for torch (`torch.cuda.stream(s)`, `torch.cuda.graph(g, stream=s)`) that
        our kernels can be launched on."""
        import torch
        stream = self.drv.Stream()
        self._streams[stream.handle] = stream
        return torch.cuda.ExternalStream(stream.handle)

    def current_stream(self):
        """The PyCUDA stream of torch's current stream; None is the default stream."""
        try:
            return self._streams[self._raw_stream(self.device_index)]
        except KeyError:
            raise RuntimeError("kernel launch on a CUDA stream PyCUDA did not create: run it on the default "
                               "stream or on one from CudaOps.new_stream()") from None

    def load(self, cubin: Path) -> "Module":
        image = cubin.read_bytes()
        return Module(self, self.drv.module_from_buffer(image), image)


class Module:
    def __init__(self, launcher: Launcher, module, image: bytes):
        self.launcher, self.module, self.image = launcher, module, image

    def kernel(self, name: str, signature: str) -> "Kernel":
        return Kernel(self, name, signature)


class Kernel:
    """A prepared kernel: called with grid, block and its arguments. Pointer arguments take
    torch tensors (their data_ptr), None (null) or ints."""

    def __init__(self, module: Module, name: str, signature: str):
        self.launcher, self.name, self.arity = module.launcher, name, len(signature)
        self.function = module.module.get_function(name)
        self.function.prepare("".join(_STRUCT_FORMAT[c] for c in signature))
        self.signature = signature
        self._by_address = "T" in signature   # tensor maps: launched through the driver (driver.launch_kernel)
        if self._by_address:
            from engine.ops import driver
            self._driver, self._handle = driver, driver.load_function(module.image, name)
        self._smem_limit = 0  # dynamic shared memory opted in so far
        self.registers, self.static_shared = self.function.num_regs, self.function.shared_size_bytes

    def blocks_per_sm(self, threads: int, dynamic_shared: int = 0) -> int:
        """How many blocks of this kernel one SM runs at once (see `blocks_per_sm`)."""
        return blocks_per_sm(self.launcher.sm, threads, self.registers, self.static_shared + dynamic_shared)

    def __call__(self, grid, block, *args, shared: int = 0) -> None:
        import torch
        drv = self.launcher.drv
        if len(args) != self.arity:
            raise TypeError(f"{self.name} takes {self.arity} arguments, got {len(args)}")
        values = [a.data_ptr() if isinstance(a, torch.Tensor) else 0 if a is None else a for a in args]
        if shared > self._smem_limit:  # static + dynamic may pass 48 KB only after this opt-in
            if self._by_address:
                self._driver.allow_dynamic_shared(self._handle, shared)
            else:
                self.function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
            self._smem_limit = shared
        grid = (*grid, 1, 1)[:3] if isinstance(grid, tuple) else (grid, 1, 1)
        block = (*block, 1, 1)[:3] if isinstance(block, tuple) else (block, 1, 1)
        stream = self.launcher.current_stream()
        try:
            if self._by_address:
                self._driver.launch_kernel(self._handle, grid, block, shared, stream.handle if stream else 0,
                                           [_CTYPES[c](v) for c, v in zip(self.signature, values)])
            else:
                self.function.prepared_async_call(grid, block, stream, *values, shared_size=shared)
            if self.launcher.debug and not torch.cuda.is_current_stream_capturing():
                (stream or drv.Context).synchronize()
        except (drv.Error, RuntimeError) as e:
            raise RuntimeError(f"{self.name} grid={grid} block={block}: {e}") from e
