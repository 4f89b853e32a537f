"""What this CPU computes natively, from /proc/cpuinfo's flags (Linux; none elsewhere)."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)   # asked once per packed weight while a model loads
def flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return frozenset()


def native_bf16() -> bool:
    """AVX-512 BF16 or AMX: bf16 arithmetic in hardware; elsewhere it is emulated, and float32
    is the faster activation type."""
    return bool({"avx512_bf16", "amx_bf16"} & flags())


def avx512_bf16() -> bool:
    """The instructions of engine/cpu_int4.c's bf16 build."""
    return {"avx512f", "avx512bw", "avx512_bf16", "f16c"} <= flags()


def avx2_fma() -> bool:
    """The instructions of engine/cpu_int4.c's float32 build."""
    return {"avx2", "fma", "f16c"} <= flags()
