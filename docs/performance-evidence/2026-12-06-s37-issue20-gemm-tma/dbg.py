"""Session 37 scratch: why gemm_tma wrote NaN. A TMA box probe (map by value and in global
memory) against the expected swizzled layout, then gemm_tma at tiny shapes."""
import subprocess, sys, torch
sys.path.insert(0, ".")
from engine.config import EngineConfig
from engine.ops.cuda_ops import CudaOps
from engine.ops.tensor_map import swizzled_rows_map
from engine.ops import cuda_build

ops = CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_gemm_tma=True))
subprocess.run([cuda_build.nvcc_path(), "-arch=sm_90a", "-cubin", "-O3", "-std=c++17", "-I", "cuda_src",
                "-o", "/tmp/probe.cubin", ".whl/dbg/probe.cu"], check=True)
mod = ops.launcher.load(__import__("pathlib").Path("/tmp/probe.cubin"))
rows, cols = 300, 128
m = (torch.arange(rows * cols, device="cuda", dtype=torch.int32) % 30000).to(torch.int16).view(rows, cols)
mb = m.view(torch.bfloat16)
mp = swizzled_rows_map(mb.data_ptr(), rows, cols, "bf16", 128)
def expected(c, r):
    e = torch.zeros(128, 64, dtype=torch.int16)
    src = m.cpu()
    for i in range(128):
        rr = r + i
        for ch in range(8):
            dst_ch = ch ^ (i % 8)
            for k in range(8):
                cc = c + ch * 8 + k
                e[i, dst_ch * 8 + k] = src[rr, cc] if rr < rows and cc < cols else 0
    return e
print("map bytes", mp.hex(), "x at", hex(mb.data_ptr()), flush=True)
mode = sys.argv[1]
for kind in [mode] if mode != "gemm" else []:
    k = mod.kernel(f"probe_{kind}", "PPii" if kind == "global" else "TPii")
    for (c, r) in ((0, 0), (64, 128), (0, 256)):
        out = torch.full((8192,), -1, dtype=torch.int16, device="cuda")
        if kind != "global":
            k(1, 128, mp, out, c, r, shared=16384 + 2048)
        else:
            g = torch.frombuffer(bytearray(mp), dtype=torch.uint8).cuda()
            k(1, 128, g, out, c, r, shared=16384 + 2048)
        torch.cuda.synchronize()
        got = out.view(128, 64).cpu()
        exp = expected(c, r)
        print(kind, (c, r), "match" if torch.equal(got, exp) else "MISMATCH",
              "got", got[0, :10].tolist(), got[1, :10].tolist(), "exp", exp[0, :10].tolist(), exp[1, :10].tolist(), flush=True)

for M, N, K in [] if mode != "gemm" else ((128, 256, 64), (256, 256, 64), (256, 512, 128), (8192, 960, 576)):
    x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(N, K, dtype=torch.bfloat16, device="cuda") * K ** -0.5
    y = ops.gemm_tma(x, w)
    torch.cuda.synchronize()
    ref = (x.float() @ w.float().t())
    nan = torch.isnan(y.float())
    print(f"gemm M={M} N={N} K={K}: nan {nan.float().mean().item():.3f} zero {(y == 0).float().mean().item():.3f} "
          f"rel {((y.float() - ref).nan_to_num(1e9).norm() / ref.norm()).item():.3e}", flush=True)
    print("  y[0,:6]", y[0, :6].tolist(), "ref", ref[0, :6].tolist())
    print("  y[64,:6]", y[64, :6].tolist(), "ref", ref[64, :6].tolist())
    if M > 128:
        print("  y[200,250:256]", y[200, 250:256].tolist(), "ref", ref[200, 250:256].tolist())
