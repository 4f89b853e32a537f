// A prefill's MLP up-projection and activation in one kernel:
//   out[m, j] = T(silu(T(x[m] . W[j]))) * T(x[m] . W[I + j])      (j < I; W = gate | up, [2I, K])
// rounded as the separate path rounds it (cuBLAS's gate|up output in T, then silu_mul.cu), so
// the [M, 2I] gate|up product is never written to memory nor read back: at a prefill's 8,192
// rows that round trip (75 MB at SmolLM2's sizes) was silu_and_mul's whole ~26 µs a layer.
//
// Hopper's wgmma (sm_90a), warp-specialized and persistent: warpgroup 0 loads, warpgroups 1
// and 2 multiply, 64 rows each of a 128-row tile. A tile is BM = 128 rows of x by BN = 128
// outputs, for which the block multiplies 256 W rows: the gate rows n0 .. n0 + 127 and the up
// rows I + n0 .. I + n0 + 127, so silu(gate) * up meets in one thread's registers. K goes
// through STAGES shared-memory stages BK = 64 columns (one 128-byte swizzled row) at a time;
// a stage's `full` mbarrier completes once the loaders' copies into it have landed (each
// loader's cp.async arrives on it when done, so the loaders run STAGES chunks ahead), its
// `empty` one once both computing warpgroups have multiplied it. Blocks take tiles b, b + grid,
// ...: the loaders run on into the next tile while the multipliers store this one.
// Layout: x [M, K], W [2I, K] row-major; out [M, I]. The host requires K % 64 == 0, I % 128
// == 0 and 16-byte aligned x and W rows.
// Launch: grid = min(tiles, SMs), block = 384, dynamic smem = STAGES x (BM + 2 BN) x 128 bytes
// + 2 STAGES mbarriers + 1024 (tiles start 1024-byte aligned). Kernels: gate_up_silu_<dtype>.
#include "wgmma.cuh"

namespace {
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4, LOADERS = 128, CONSUMERS = 256;
constexpr int ROW = BK * 2, A_TILE = BM * ROW, B_TILE = 2 * BN * ROW, STAGE = A_TILE + B_TILE;
// The multipliers' 64 x 256 fp32 accumulator (128 registers) fits in the 168 a thread of
// 384 gets, without spills; no registers move between the warpgroups (the loaders' 24 copies a
// chunk spilled at 56).
}

template <typename T>
__device__ void gate_up_silu(const T* __restrict__ x, const T* __restrict__ W, T* __restrict__ out, int M, int I,
                             int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_unaligned[];
    unsigned char* smem = smem_unaligned + (-smem_address(smem_unaligned) & 1023);
    const uint32_t stages = smem_address(smem), bars = stages + STAGES * STAGE;
    auto a_tile = [&](int s) { return stages + s * STAGE; };
    auto b_tile = [&](int s) { return a_tile(s) + A_TILE; };   // gate rows, then up rows
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full(s), LOADERS);
            mbarrier_init(empty(s), CONSUMERS);
        }
    __syncthreads();
    const int m_tiles = (M + BM - 1) / BM, tiles = m_tiles * (I / BN), chunks = K / BK;
    // A tile's m index runs fastest: neighbouring blocks share W rows in L2.
    auto origin = [&](int tile, int& m0, int& n0) {
        m0 = tile % m_tiles * BM;
        n0 = tile / m_tiles * BN;
    };
    // The warpgroup as a value the compiler knows is the same across a warp: it would
    // otherwise see the wgmmas below on a divergent path and serialize them.
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (wg == 0) {   // the loaders: a stage a chunk, signalled once its copies have landed
        const int piece = threadIdx.x % 8, row0 = threadIdx.x / 8;   // 16 bytes of rows row0 + 16 i
        int it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int m0, n0;
            origin(tile, m0, n0);
            for (int c = 0; c < chunks; ++c, ++it) {
                const int s = it % STAGES, k = c * BK + piece * 8;
                if (it >= STAGES) mbarrier_wait(empty(s), (it / STAGES - 1) & 1);
#pragma unroll
                for (int i = 0; i < BM / 16; ++i) {
                    const int r = row0 + 16 * i, m = m0 + r;
                    cp_async16(a_tile(s) + r * ROW + ((piece ^ (r % 8)) << 4),
                               x + (int64_t)(m < M ? m : 0) * K + k, m < M);
                }
#pragma unroll
                for (int i = 0; i < 2 * BN / 16; ++i) {
                    const int r = row0 + 16 * i, n = r < BN ? n0 + r : I + n0 + r - BN;
                    cp_async16(b_tile(s) + r * ROW + ((piece ^ (r % 8)) << 4), W + (int64_t)n * K + k, true);
                }
                // The stage's barrier counts this thread's arrival once its copies have landed:
                // the loaders go on to the next stage without waiting for them.
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(full(s)) : "memory");
            }
        }
        cp_async_wait<0>();   // no thread leaves with copies in flight
        return;
    }

    const int cw = wg - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        origin(tile, m0, n0);
        float acc[2 * BN / 8][4];   // fragments 0 .. 15: gate's columns, 16 .. 31: up's
        for (int c = 0; c < chunks; ++c, ++it) {
            const int s = it % STAGES;
            mbarrier_wait(full(s), (it / STAGES) & 1);
            fence_async_proxy();   // the copies (generic proxy) before the tensor cores' reads (async proxy)
            const uint64_t a = smem_descriptor(a_tile(s) + cw * 64 * ROW), b = smem_descriptor(b_tile(s));
            wgmma_fence();
            // One m64n256k16 over gate's and up's rows together reads the x rows once for both
            // (two m64n128k16 read them twice: shared memory's bandwidth, not the tensor cores,
            // then set the pace). 16 columns: 2 descriptor units of 16 bytes.
#pragma unroll
            for (int k16 = 0; k16 < BK / 16; ++k16) Wgmma<T>::ss(acc, a + 2 * k16, b + 2 * k16, c > 0 || k16 > 0);
            wgmma_commit();
            wgmma_wait<1>();   // the chunk before is multiplied: its stage may be refilled
            if (c > 0) mbarrier_arrive(empty((it - 1) % STAGES));
        }
        wgmma_wait<0>();
        fence_registers(acc);
        mbarrier_arrive(empty((it - 1) % STAGES));
        // This lane's outputs: rows g and g + 8 of its warp's 16, columns 2q, 2q + 1 of each 8.
        const int row = m0 + cw * 64 + warp * 16 + lane / 4, col = n0 + lane % 4 * 2;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (row + 8 * h >= M) continue;
                float o[2];
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    o[e] = silu_times<T>(to_float(from_float<T>(acc[nt][2 * h + e])),
                                         to_float(from_float<T>(acc[BN / 8 + nt][2 * h + e])));
                *reinterpret_cast<uint32_t*>(out + (int64_t)(row + 8 * h) * I + col + nt * 8) = pack2<T>(o[0], o[1]);
            }
    }
#else
    __trap();
#endif
}

#define GATE_UP_SILU(T, N)                                                                                     \
    extern "C" __global__ void __launch_bounds__(LOADERS + CONSUMERS, 1)                                      \
        gate_up_silu_##N(const T* x, const T* W, T* out, int M, int I, int K) {                              \
        pdl_start();                                                                                           \
        gate_up_silu<T>(x, W, out, M, I, K);                                                                   \
    }
GATE_UP_SILU(bf16, bf16) GATE_UP_SILU(f16, f16)
