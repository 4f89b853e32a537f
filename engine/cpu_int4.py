"""Our own CPU kernel for 4-bit GGUF weights at decode sizes (engine/cpu_int4.c), AVX-512 BF16.

torch's int4 weight-only matmul unpacks every weight again for each tile of 4 rows, so at 8
rows it spends most of a decode step unpacking (cpu-small-q4 on the 2-core AVX-512 BF16 EPYC:
15 ms a step of 30 layers, where the weights stream in ~6). This kernel unpacks each 16-byte
group once for up to 8 rows and takes the file's own block factors in float32 (see the .c).

It is compiled at first use with the C compiler on PATH (cc, or $CC) into the build cache
($ROADGATE_CACHE, default ~/.cache/roadgate), keyed by the source, flags and compiler, and
loaded with ctypes; `available()` is False where the CPU lacks AVX-512 BF16 or nothing can
compile it, and the engine then keeps torch's kernel.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from engine import cpu_features

SOURCE = Path(__file__).with_name("cpu_int4.c")
FLAGS = ("-O3", "-std=c11", "-shared", "-fPIC", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512bf16", "-mf16c")
LANES, BLOCK = 16, 32        # output columns per tile, weights per GGUF block (cpu_int4.c's)
log = logging.getLogger(__name__)


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _build(compiler: str) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([version, *FLAGS]).encode() + SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("ROADGATE_CACHE", Path.home() / ".cache" / "roadgate"))
    cache.mkdir(parents=True, exist_ok=True)
    lib = cache / f"cpu_int4-{key}.so"
    if not lib.exists():
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".so")
        os.close(fd)
        try:
            res = subprocess.run([compiler, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"{compiler} failed on {SOURCE.name}: {res.stderr.strip()}")
            os.replace(tmp, lib)   # atomic: a concurrent builder never loads half a file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return lib


@functools.lru_cache(maxsize=1)
def _kernel():
    """The compiled kernel, or None (with the reason logged once) where it cannot run here."""
    if not cpu_features.avx512_bf16():
        return None
    compiler = _compiler()
    if compiler is None:
        log.warning("no C compiler on PATH: 4-bit weights use torch's int4 kernel")
        return None
    try:
        fn = ctypes.CDLL(str(_build(compiler))).int4_matmul_bf16
    except (RuntimeError, OSError) as e:
        log.warning("the CPU int4 kernel did not build (%s): 4-bit weights use torch's int4 kernel", e)
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                   ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    return fn


def available() -> bool:
    return _kernel() is not None


def fits(out_features: int, in_features: int) -> bool:
    return out_features % LANES == 0 and in_features % BLOCK == 0


def pack(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's layout of w = q * d + m (q [N, K] 0..15; d, m [N, K/32] float32 holding the
    file's float16 values): nibble pairs [N/16, K/32, 16 pairs, 16 columns] uint8 (key 2p in the
    low nibble, 2p + 1 in the high one) and factors [N/16, K/32, 2, 16] float16 (d, then m)."""
    n, k = q.shape
    tiles = q.to(torch.uint8).view(n // LANES, LANES, k // BLOCK, BLOCK // 2, 2).permute(0, 2, 3, 1, 4)
    nibble_pairs = (tiles[..., 0] | (tiles[..., 1] << 4)).contiguous()
    factors = torch.stack([d, m]).view(2, n // LANES, LANES, k // BLOCK).permute(1, 3, 0, 2)
    return nibble_pairs, factors.to(torch.float16).contiguous()


def matmul(x: torch.Tensor, nibble_pairs: torch.Tensor, factors: torch.Tensor, out_features: int) -> torch.Tensor:
    """x [M, K] @ w^T -> [M, N] bf16, for a weight packed by `pack`."""
    x = x.to(torch.bfloat16).contiguous()
    rows, k = x.shape
    y = torch.empty((rows, out_features), dtype=torch.bfloat16)
    sums = torch.empty(rows * (k // BLOCK), dtype=torch.float32)
    _kernel()(x.data_ptr(), rows, k, nibble_pairs.data_ptr(), factors.data_ptr(), out_features, sums.data_ptr(),
              y.data_ptr())
    return y
