"""Pick the ops backend: `cuda` (PyCUDA kernels) or `torch` (reference ops)."""
from __future__ import annotations

import logging

import torch

from engine.config import EngineConfig
from engine.ops import cuda_build
from engine.ops.base import AttentionMetadata, LayerShape, LayerWeights, Ops, SamplingTensors, Step

__all__ = ["AttentionMetadata", "LayerShape", "LayerWeights", "Ops", "SamplingTensors", "Step", "select_backend",
           "make_ops"]
log = logging.getLogger("engine")
BACKENDS = ("auto", "cuda", "torch")


def cuda_unavailable_reason() -> str | None:
    """Why the cuda backend cannot run here, or None if it can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to torch"
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return "pycuda is not installed"
    try:
        cuda_build.nvcc_path()
    except RuntimeError:
        return "nvcc (the CUDA compiler the kernels need) is not on PATH nor in CUDA_HOME"
    return None


def select_backend(backend: str) -> str:
    """Resolve `auto`; fail with the reason when `cuda` is asked for and cannot run."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return "torch"
    reason = cuda_unavailable_reason()
    if reason is None:
        return "cuda"
    if backend == "cuda":
        raise RuntimeError(f"backend 'cuda' is unavailable: {reason}")
    log.warning("backend 'auto': using the torch backend because %s", reason)
    return "torch"


def make_ops(config: EngineConfig) -> Ops:
    """The ops of the config's (resolved) backend."""
    if config.backend == "cuda":
        from engine.ops.cuda_ops import CudaOps
        return CudaOps(config)
    from engine.ops.torch_ops import TorchOps
    return TorchOps()
