"""GPU worker health check (the GPU image's HEALTHCHECK): compile the kernels of cuda_src/
(cached after the first time) and run one, checked against the torch reference.

    python -m jobs.healthcheck      exit 0 healthy; 1 with one line naming the problem
"""
from __future__ import annotations

import sys

TOLERANCE = 1e-4


def check() -> str:
    import torch

    from engine.ops.cuda_ops import CudaOps
    from engine.ops.torch_ops import TorchOps

    kernels = CudaOps()   # compiles (or loads from the cache) every kernel for this GPU's arch
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8, 576, device="cuda", generator=generator)
    weight = torch.randn(576, device="cuda", generator=generator)
    got, _ = kernels.rms_norm(x, weight, 1e-5, None)
    want, _ = TorchOps().rms_norm(x, weight, 1e-5, None)
    torch.cuda.synchronize()
    error = (got - want).abs().max().item()
    if not error <= TOLERANCE:
        raise RuntimeError(f"rms_norm kernel differs from the torch reference by {error:.3g} (> {TOLERANCE:g})")
    return f"healthy: {torch.cuda.get_device_name(0)}, rms_norm kernel max error {error:.2e}"


def main() -> int:
    try:
        print(check())
    except Exception as e:  # any failure is unhealthy; say which in one line
        print(f"unhealthy: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
