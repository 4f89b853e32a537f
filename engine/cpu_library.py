"""Our C kernels for the CPU (engine/*.c), compiled at first use with the C compiler on PATH
(cc, or $CC) into the build cache ($ROADGATE_CACHE, default ~/.cache/roadgate), keyed by the
source, flags and compiler, and loaded with ctypes. Each function names its instruction set in
its source, so a library loads on any x86-64 CPU; its Python module checks the CPU before
calling one. Where nothing compiles a source, `load` logs why once and gives None, and the
engine keeps torch's ops for what it would have run.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from engine.build_cache import build_once, cache_dir

FLAGS = ("-O3", "-std=c11", "-shared", "-fPIC", "-fopenmp")
log = logging.getLogger(__name__)


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _build(compiler: str, source: Path) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([version, *FLAGS]).encode() + source.read_bytes()).hexdigest()[:16]

    def compile_to(out: Path) -> None:
        res = subprocess.run([compiler, *FLAGS, "-o", str(out), str(source)], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{compiler} failed on {source.name}: {res.stderr.strip()}")
    return build_once(cache_dir() / f"{source.stem}-{key}.so", compile_to)


@functools.cache
def load(source: Path) -> ctypes.CDLL | None:
    """The compiled library of `source`, or None (the reason logged once)."""
    compiler = _compiler()
    if compiler is None:
        log.warning("no C compiler on PATH: %s is not built, torch's ops run instead", source.name)
        return None
    try:
        return ctypes.CDLL(str(_build(compiler, source)))
    except (RuntimeError, OSError) as e:
        log.warning("%s did not build (%s): torch's ops run instead", source.name, e)
        return None
