"""Session 38 probe: where gemm_tma's time goes. Variants of cuda_src/gemm_tma.cu, made by
string edits here (the product file is untouched): `base`; `nostore` (epilogue computes,
never stores); `empty` (no work items: launch, init, cluster barriers, exit); `trace`
(clock64/globaltimer stamps per block into a buffer). Timed as kernel_bench times them."""
import subprocess, sys, statistics, torch
from pathlib import Path
sys.path.insert(0, "."); sys.path.insert(0, "benchmarks")
from engine.config import EngineConfig
from engine.ops.cuda_ops import CudaOps
from engine.ops.tensor_map import swizzled_rows_map
from engine.ops import cuda_build
from kernel_bench import graph_us
import torch.nn.functional as F

ops = CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_gemm_tma=True))
src = Path(".whl/dbg/gemm_tma_old.cu").read_text()   # session 37's, stores from registers
STORE = "*reinterpret_cast<uint32_t*>(y + (int64_t)r * N + n) = pack2<T>(o[0], o[1]);"
def edit(s, old, new):
    assert s.count(old) == 1, old
    return s.replace(old, new)
def traced(s):
    s = edit(s, '#include "tma.cuh"', '#include "tma.cuh"\n__device__ __forceinline__ long long gtime() { long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }')
    s = edit(s, "T* __restrict__ y, int M", "T* __restrict__ y, long long* trace, int M")
    s = edit(s, "T* y,  ", "T* y, long long* trace, ")
    s = edit(s, "(x_map, w_map, y, M, Nout, K)", "(x_map, w_map, y, trace, M, Nout, K)")
    s = edit(s, "extern __shared__ unsigned char smem_unaligned[];",
             "extern __shared__ unsigned char smem_unaligned[];\n const bool P0 = threadIdx.x == 0, C0 = threadIdx.x == 128; long long* tb = trace + blockIdx.x * 64; int tile_i = 0; if (P0) { tb[0] = gtime(); tb[1] = clock64(); }")
    s = edit(s, "cluster_sync_after_init();\n", "cluster_sync_after_init();\n if (P0) tb[2] = clock64();\n")
    s = edit(s, "(1 << CLUSTER) - 1);\n", "(1 << CLUSTER) - 1);\n if (it == 0) tb[3] = clock64();\n")
    s = edit(s, "    } else {\n        setmaxnreg_inc<MULTIPLIER_REGS>();",
             "    if (P0) tb[4] = clock64();\n    } else {\n        setmaxnreg_inc<MULTIPLIER_REGS>(); if (C0) tb[5] = clock64();")
    s = edit(s, "mbarrier_wait(full(s), (it / STAGES) & 1);", "mbarrier_wait(full(s), (it / STAGES) & 1); if (C0 && it == 0) tb[6] = clock64();")
    s = edit(s, "fence_registers(acc);", "fence_registers(acc); if (C0 && tile_i < 10) tb[8 + 3 * tile_i] = clock64();")
    s = edit(s, "                }\n        }\n    }\n    __syncwarp();",
             "                }\n            if (C0 && tile_i < 10) tb[9 + 3 * tile_i] = clock64(); ++tile_i;\n        }\n    }\n    __syncwarp();")
    s = edit(s, "    cluster_sync_before_exit();", "    if (C0) tb[40] = clock64();\n    cluster_sync_before_exit(); if (C0) { tb[41] = clock64(); tb[42] = gtime(); tb[43] = tile_i; }")
    return s
variants = {
    "base": src,
    "nostore": edit(src, STORE, "if (o[0] == 1234.5f) " + STORE),
    "empty": edit(src, "const int work = m_pairs * n_tiles", "const int work = 0 * m_pairs * n_tiles"),
    "trace": traced(src),
}
kernels = {}
for name, text in variants.items():
    cu, cubin = Path(f"/tmp/v_{name}.cu"), Path(f"/tmp/v_{name}.cubin")
    cu.write_text(text)
    subprocess.run([cuda_build.nvcc_path(), "-arch=sm_90a", "-cubin", "-O3", "-std=c++17", "-I", "cuda_src",
                    "-o", str(cubin), str(cu)], check=True)
    mod = ops.launcher.load(cubin)
    kernels[name] = mod.kernel("gemm_tma_plain_bf16", "TTPPiii" if name == "trace" else "TTPiii")
    if name == "base":
        kernels["base_silu"] = mod.kernel("gemm_tma_silu_bf16", "TTPiii")
subprocess.run([cuda_build.nvcc_path(), "-arch=sm_90a", "-cubin", "-O3", "-std=c++17", "-I", "cuda_src",
                "-o", "/tmp/v_store.cubin", "cuda_src/gemm_tma.cu"], check=True)
smod = ops.launcher.load(Path("/tmp/v_store.cubin"))
kernels["store"] = smod.kernel("gemm_tma_plain_bf16", "TTTiii")
kernels["store_silu"] = smod.kernel("gemm_tma_silu_bf16", "TTTiii")
from engine.ops.cuda_ops import _TMA_SMEM as STORE_SMEM
SMEM = 4 * ((128 + 256) * 128 + 16) + 1024
stream = ops.new_stream()
dt = torch.bfloat16
def launch(k, x, w, y, trace=None):
    M, K = x.shape; N = y.shape[1]
    xm = swizzled_rows_map(x.data_ptr(), M, K, "bf16", 128); wm = swizzled_rows_map(w.data_ptr(), w.shape[0], K, "bf16", 128)
    pairs = -(-M // 256) * -(-N // (128 if N < w.shape[0] else 256)); clusters = min(pairs, ops.num_sms // 2)
    args = (xm, wm, y) + ((trace,) if trace is not None else ()) + (M, N, K)
    k(clusters * 2, 384, *args, shared=SMEM)
    return clusters
def launch_store(x, w, y, silu=False):
    M, K = x.shape; N = y.shape[1]; cols = 128 if silu else 256
    xm = swizzled_rows_map(x.data_ptr(), M, K, "bf16", 128); wm = swizzled_rows_map(w.data_ptr(), w.shape[0], K, "bf16", 128)
    ym = swizzled_rows_map(y.data_ptr(), M, N, "bf16", 64)
    pairs = -(-M // 256) * -(-N // cols); clusters = min(pairs, ops.num_sms // 2)
    kernels["store_silu" if silu else "store"](clusters * 2, 384, xm, wm, ym, M, N, K, shared=STORE_SMEM)
print("sms", ops.num_sms, flush=True)
for M, N, K in ((2048, 960, 576), (8192, 960, 576), (8192, 576, 1536), (8192, 3072, 576)):
    x = torch.randn(M, K, dtype=dt, device="cuda"); w = torch.randn(N, K, dtype=dt, device="cuda") * K ** -0.5
    y = torch.empty(M, N, dtype=dt, device="cuda")
    row = {name: graph_us(lambda i, k=kernels[name]: launch(k, x, w, y), stream) for name in ("base", "nostore", "empty")}
    ok = (y.float() - (x.float() @ w.float().t())).abs().max().item()
    y2 = torch.full_like(y, float("nan"))
    row["store"] = graph_us(lambda i: launch_store(x, w, y2), stream)
    row["cublas"] = graph_us(lambda i: F.linear(x, w), stream)
    print("  store err", (y2.float() - (x.float() @ w.float().t())).abs().max().item(), "equal to base", torch.equal(y, y2), flush=True)
    if N == 3072:
        ys = torch.full((M, N // 2), float("nan"), dtype=dt, device="cuda")
        us_store = graph_us(lambda i: launch_store(x, w, ys, silu=True), stream)
        yb = torch.full_like(ys, float('nan'))
        us_base = graph_us(lambda i: launch(kernels['base_silu'], x, w, yb), stream)
        us_cub = graph_us(lambda i: ops.silu_and_mul(F.linear(x, w)), stream)
        print(f"  silu: base {us_base:.2f} store {us_store:.2f} cublas+silu_and_mul {us_cub:.2f}; equal {torch.equal(ys, yb)}", flush=True)
    print(f"M={M} N={N} K={K}: " + " ".join(f"{k} {v:.2f}us" for k, v in row.items()), f"(base err {ok:.3f})", flush=True)
    # traced: 20 calls in a graph, each its own buffer
    traces = [torch.zeros(264 * 64, dtype=torch.int64, device="cuda") for _ in range(20)]
    cl = [0]
    def call(i):
        cl[0] = launch(kernels["trace"], x, w, y, traces[i])
    graph_us(call, stream, reps=5)
    torch.cuda.synchronize()
    T = [t.view(264, 64)[: 2 * cl[0]].cpu() for t in traces]
    for i in (0, 10, 19):
        t = T[i]
        ns_per_clk = ((t[:, 42] - t[:, 0]).double() / (t[:, 41] - t[:, 1]).double()).median().item()
        us = lambda a, b: ((t[:, a] - t[:, b]).double() * ns_per_clk / 1e3)
        med = lambda v: f"{v.median().item():6.2f}/{v.max().item():6.2f}"
        entry = (t[:, 0] - t[:, 0].min()).double() / 1e3
        prev_exit = (T[i - 1][:, 42].max() if i > 0 else t[:, 0].min())
        gap = (t[:, 0].min() - prev_exit).item() / 1e3
        tiles = int(t[:, 43].max())
        line = (f"  call {i}: gap from prev exit {gap:6.2f}us; entry spread {med(entry)}; init {med(us(2, 1))}; "
                f"first load issued {med(us(3, 1))}; first full {med(us(6, 1))}; ")
        for ti in range(min(tiles, 6)):
            line += f"tile{ti} mma {med(us(8 + 3 * ti, 1))} epi {med(us(9 + 3 * ti, 1))}; "
        line += f"exit-barrier in {med(us(40, 1))} out {med(us(41, 1))}; total {med((t[:, 42] - t[:, 0]).double() / 1e3)}; span {(t[:, 42].max() - t[:, 0].min()).item() / 1e3:.2f}us; ns/clk {ns_per_clk:.3f}"
        print(line, flush=True)
