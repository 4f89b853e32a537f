"""Session 40 probe, for Nsight Compute: the fused gate|up at 8,192 rows in gemm_tma's
ping-pong tiles (128), the same in clusters of 2 x 2 sharing x rows, the cooperative tiles
(256), and cuBLAS's gate|up then silu_and_mul, each launched three times outside any graph
(ncu -k regex:... -s 5 -c 10 skips the first round)."""
import sys
import torch
sys.path.insert(0, ".")
from engine.config import EngineConfig
from engine.ops.cuda_ops import CudaOps
import torch.nn.functional as F

ops = CudaOps(EngineConfig.from_env(model="", backend="cuda"))
x = torch.randn(8192, 576, dtype=torch.bfloat16, device="cuda")
w = torch.randn(3072, 576, dtype=torch.bfloat16, device="cuda") * 576 ** -0.5
for _ in range(3):
    ops.gemm_tma(x, w, silu=True, width=128)
    ops.gemm_tma(x, w, silu=True, width=128, x_share=2)
    ops.gemm_tma(x, w, silu=True, width=256)
    ops.silu_and_mul(F.linear(x, w))
torch.cuda.synchronize()
print("done")
