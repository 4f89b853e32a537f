// Decode-sized linear layers on the tensor cores: y[m, n] = sum_k x[m, k] W[n, k] for the
// few hundred rows of a decode batch, 16-bit x and W, fp32 accumulation.
//
// Why our own and not cuBLAS: in a CUDA graph an edge into a cuBLAS kernel cannot be
// programmatic (pdl.py), so at batches past the gemv kernels every layer waited for each of
// its four GEMMs to launch and fetch its first weights after the kernel before had ended.
// This kernel requests its first W tiles and prefetches the rest of its W rows into L2
// before pdl_start (weights are written by no kernel), while the kernel before it runs.
// The op before a projection (RMSNorm, SiLU-and-mul) stays its own kernel: fused in front of
// this GEMM (b259154) it cost more than the kernel it saved at every batch size measured
// (docs/performance.md, session 17), as every W tile's blocks made the same x' again.
//
// Tiles: a block computes BM x BN outputs with 4 warps, WM x WN of them (WM = 1 for
// BM = 16, else 2), each (16 MT) x (8 NT) outputs of mma.sync m16n8k16. K goes through
// shared memory BK = 64 columns at a time with cp.async, STAGES - 1 chunks in flight: these
// GEMMs are a few µs, so the time is round trips to memory, and a SmolLM2 K of 576 (9 chunks)
// is in flight at once with 10 stages. x rows past M and W rows past N are zeros, and their
// outputs are not stored.
// Split K: a cluster of SPLIT blocks (the grid's z) shares one output tile, each block a
// share of K's chunks; their partial sums meet in shared memory, and each block adds up its
// slice of the tile's rows over the cluster's blocks in rank order (distributed shared
// memory; the same order every run). Few rows make few tiles: this spreads W over more SMs.
// Layout: x [M, K], W [N, K] (torch's linear weight), y [M, N], all row-major; K % BK == 0
// and N % 8 == 0 (the host checks).
// Launch: grid = (ceil(M / BM), ceil(N / BN), SPLIT) (the m-tiles of one W tile side by side,
// so they meet in L2), block 128, dynamic smem = STAGES (BN + BM) (BK + PAD) 2 bytes.
// Kernels: gemm_<dtype>_<BM>x<BN>x<STAGES>_k<SPLIT>.
#include <cooperative_groups.h>

#include "mma.cuh"

namespace {
constexpr int THREADS = 128, WARPS = 4, BK = 64, PAD = 8;  // PAD: against bank conflicts
}

template <typename T> using TileRow = T[BK + PAD];

// Starts copying rows r0 .. r0 + ROWS of a [rows, K] matrix, columns k0 .. k0 + BK, into
// `tile`; rows at or past `rows` become zeros.
template <typename T, int ROWS>
__device__ __forceinline__ void load_tile(TileRow<T>* tile, const T* __restrict__ src, int rows, int K, int r0,
                                          int k0) {
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * BK / 8; i += THREADS) {
        const int r = i / (BK / 8), c = i % (BK / 8) * 8;
        const bool valid = r0 + r < rows;
        cp_async16(&tile[r][c], src + (int64_t)(valid ? r0 + r : 0) * K + k0 + c, valid);
    }
}

template <typename T, int BM, int BN, int STAGES, int SPLIT>
__device__ void gemm(const T* __restrict__ x, const T* __restrict__ W, T* __restrict__ y, int M, int N, int K) {
    constexpr int WM = BM == 16 ? 1 : 2, WN = WARPS / WM, MT = BM / (16 * WM), NT = BN / (8 * WN);
    static_assert(MT * 16 * WM == BM && NT * 8 * WN == BN, "the warps tile the block");
    extern __shared__ __align__(16) unsigned char smem[];
    TileRow<T>* ws = reinterpret_cast<TileRow<T>*>(smem);   // [STAGES][BN]
    TileRow<T>* xs = ws + STAGES * BN;                      // [STAGES][BM]
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_first = blockIdx.z * (K / BK) / SPLIT * BK, chunks = (blockIdx.z + 1) * (K / BK) / SPLIT - k_first / BK;

    // Before the wait: the block's W rows into L2, and its first STAGES - 1 W tiles (one
    // commit group); then x's tiles, a group each, and chunk c's wait covers both.
    if (threadIdx.x == 0) prefetch_l2(W + (int64_t)n0 * K, min(BN, N - n0) * K * (int)sizeof(T));
    for (int s = 0; s < STAGES - 1; ++s)
        if (s < chunks) load_tile<T, BN>(ws + s * BN, W, N, K, n0, k_first + s * BK);
    cp_async_commit();
    pdl_start();
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < chunks) load_tile<T, BM>(xs + s * BM, x, M, K, m0, k_first + s * BK);
        cp_async_commit();
    }

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WN, wn = warp % WN;
    float acc[MT][NT][4] = {};
    for (int c = 0; c < chunks; ++c) {
        cp_async_wait<STAGES - 2>();   // this thread's copies of chunk c have landed ...
        __syncthreads();               // ... and everyone's; and chunk c - 1's slot is free
        const int next = c + STAGES - 1;
        if (next < chunks) {
            load_tile<T, BM>(xs + next % STAGES * BM, x, M, K, m0, k_first + next * BK);
            load_tile<T, BN>(ws + next % STAGES * BN, W, N, K, n0, k_first + next * BK);
        }
        cp_async_commit();             // (empty past the last chunk: the count stays uniform)
        const T* xt = xs[c % STAGES * BM + wm * MT * 16];   // the warp's rows of x at chunk c
        const TileRow<T>* wt = ws + c % STAGES * BN + wn * NT * 8;
#pragma unroll
        for (int k2 = 0; k2 < BK; k2 += 32) {
            // A fragments of two 16-column steps; one ldmatrix.x4 of W gives the B
            // fragments of an 8-column tile for both.
            uint32_t a[MT][2][4], b[NT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    ldmatrix_x4(a[mt][h], xt + (mt * 16 + lane % 16) * (BK + PAD) + k2 + h * 16 + lane / 16 * 8);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) ldmatrix_x4(b[nt], &wt[nt * 8 + lane % 8][k2 + lane / 8 * 8]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    mma<T>(acc[mt][nt], a[mt][0], b[nt][0], b[nt][1]);
                    mma<T>(acc[mt][nt], a[mt][1], b[nt][2], b[nt][3]);
                }
        }
    }

    // Each lane holds rows g and g + 8 of each 16 x 8 tile, columns 2q and 2q + 1.
    const int g = lane / 4, q2 = lane % 4 * 2;
    if constexpr (SPLIT == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int col = n0 + (wn * NT + nt) * 8 + q2;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = m0 + (wm * MT + mt) * 16 + g + 8 * h;
                    if (row < M && col < N)
                        *reinterpret_cast<uint32_t*>(y + (int64_t)row * N + col) =
                            pack2<T>(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
                }
            }
    } else {
        static_assert(BM % SPLIT == 0 && BM * BN * 4 <= STAGES * BN * (BK + PAD) * 2, "");
        float2* part = reinterpret_cast<float2*>(smem);   // [BM][BN / 2]: the W stages are done with
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    part[((wm * MT + mt) * 16 + g + 8 * h) * (BN / 2) + ((wn * NT + nt) * 8 + q2) / 2] =
                        make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        cluster.sync();
        const int rank = cluster.block_rank(), rows = BM / SPLIT;
        for (int i = threadIdx.x; i < rows * BN / 2; i += THREADS) {
            const int r = rank * rows + i / (BN / 2), c = i % (BN / 2);
            float2 sum = make_float2(0.f, 0.f);
            for (int q = 0; q < SPLIT; ++q) {
                const float2 p = *cluster.map_shared_rank(&part[r * (BN / 2) + c], q);
                sum.x += p.x;
                sum.y += p.y;
            }
            const int row = m0 + r, col = n0 + 2 * c;
            if (row < M && col < N) *reinterpret_cast<uint32_t*>(y + (int64_t)row * N + col) = pack2<T>(sum.x, sum.y);
        }
        cluster.sync();   // every block's partial sums stay until the whole cluster has read them
    }
}

#define GEMM(T, N, BM, BN, S, SPLIT)                                                                    \
    extern "C" __global__ void __cluster_dims__(1, 1, SPLIT) __launch_bounds__(THREADS)                 \
        gemm_##N##_##BM##x##BN##x##S##_k##SPLIT(const T* x, const T* W, T* y, int M, int Nout, int K) { \
        gemm<T, BM, BN, S, SPLIT>(x, W, y, M, Nout, K);                                                 \
    }
#define GEMM_TILES(T, N)                                                                                   \
    GEMM(T, N, 16, 64, 10, 1) GEMM(T, N, 16, 64, 7, 4) GEMM(T, N, 32, 32, 10, 1) GEMM(T, N, 32, 64, 7, 2) \
    GEMM(T, N, 64, 32, 10, 1) GEMM(T, N, 64, 64, 10, 1) GEMM(T, N, 64, 64, 7, 2) GEMM(T, N, 128, 64, 6, 1)
GEMM_TILES(bf16, bf16)
GEMM_TILES(f16, f16)
