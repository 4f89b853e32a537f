"""Session 44 probe, for Nsight Compute: the fused gate|up at 8,192 rows (SmolLM2's 576 -> 2 x 1,536)
with x's rows staged (the ping-pong tiles) and resident, and cuBLAS's gate|up GEMM beside them,
three rounds outside any graph (ncu -s 3 skips the first round's three)."""
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
from engine.config import EngineConfig
from engine.ops.cuda_ops import CudaOps

ops = CudaOps(EngineConfig.from_env(model="", backend="cuda"))
x = torch.randn(8192, 576, dtype=torch.bfloat16, device="cuda")
w = torch.randn(3072, 576, dtype=torch.bfloat16, device="cuda") * 576 ** -0.5
for _ in range(3):
    ops.gemm_tma(x, w, silu=True, width=128, x_rows="staged")
    ops.gemm_tma(x, w, silu=True, width=128, x_rows="resident")
    F.linear(x, w)
torch.cuda.synchronize()
print("done")
