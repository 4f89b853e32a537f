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
// Two kinds of kernel, the same pipeline and split:
//   gemm_<dtype>_...     mma.sync m16n8k16 from ldmatrix fragments, as above; x and W tiles
//                        padded against bank conflicts;
//   gemm_wg_<dtype>_...  Hopper's wgmma (sm_90a): the block is one warpgroup and a tile is
//                        64 rows, read by the tensor cores straight from shared memory (no
//                        ldmatrix, no register fragments of x or W), in wgmma's 128-byte
//                        swizzle instead of padding; STAGES - 2 chunks load ahead, one more
//                        is being multiplied. On session 22's sweep of 24 decode shapes the
//                        host's picks with both kinds took 12% less time than with mma.sync
//                        alone, and still 1.5x cuBLAS's (docs/performance.md). Likely why:
//                        every W tile's blocks read x again from L2; cuBLAS's tiles are larger.
// Layout: x [M, K], W [N, K] (torch's linear weight), y [M, N], all row-major; K % BK == 0
// and N % 8 == 0 (the host checks).
// Launch: grid = (ceil(M / BM), ceil(N / BN), SPLIT) (the m-tiles of one W tile side by side,
// so they meet in L2), block 128, dynamic smem = STAGES (BN + BM) (BK + PAD) 2 bytes, for
// the wgmma kernels STAGES (BN + BM) BK 2 + 1024 bytes (their tiles start 1024-byte aligned).
// Kernels: gemm_<dtype>_<BM>x<BN>x<STAGES>_k<SPLIT>, gemm_wg_<dtype>_64x<BN>x<STAGES>_k<SPLIT>.
#include <cooperative_groups.h>

#include "wgmma.cuh"

namespace {
constexpr int THREADS = 128, WARPS = 4, BK = 64, PAD = 8;  // PAD: against bank conflicts
}
static_assert(BK == 64, "a K chunk of 16-bit values is one swizzled row (SwizzledRows)");

template <typename T> using TileRow = T[BK + PAD];

// Padded tiles: row r, column c at tile[r][c].
struct PaddedTile {
    template <typename T> static __device__ __forceinline__ void* at(void* tile, int r, int c) {
        return &reinterpret_cast<TileRow<T>*>(tile)[r][c];
    }
};
// Starts copying rows r0 .. r0 + ROWS of a [rows, K] matrix, columns k0 .. k0 + BK, into
// `tile`; rows at or past `rows` become zeros.
template <typename Layout, typename T, int ROWS>
__device__ __forceinline__ void load_tile(void* tile, const T* __restrict__ src, int rows, int K, int r0, int k0) {
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * BK / 8; i += THREADS) {
        const int r = i / (BK / 8), c = i % (BK / 8) * 8;
        const bool valid = r0 + r < rows;
        cp_async16(Layout::template at<T>(tile, r, c), src + (int64_t)(valid ? r0 + r : 0) * K + k0 + c, valid);
    }
}

// The K chunks of this block: the grid's z splits K's chunks between the blocks of a cluster.
struct KRange {
    int first, chunks;   // the first column, the number of BK-wide chunks
    template <int SPLIT> static __device__ __forceinline__ KRange of_block(int K) {
        const int z = blockIdx.z, k_first = z * (K / BK) / SPLIT * BK;
        return {k_first, (z + 1) * (K / BK) / SPLIT - k_first / BK};
    }
};

// Writes the block's BM x BN output tile from its accumulators: 16 x 8 fragments, this warp's
// (i, j) at rows row0 + 16 i, columns col0 + 8 j of the tile, each lane holding rows g and
// g + 8, columns 2q and 2q + 1 (the mma.sync and wgmma layouts alike). With SPLIT > 1 the
// cluster's partial sums meet in distributed shared memory (`smem`, whose K tiles are
// done with), and each block adds up its slice of rows over the cluster's blocks in rank order.
template <typename T, int BM, int BN, int SPLIT, int MT, int NT>
__device__ void store_tile(const float (&acc)[MT][NT][4], int row0, int col0, T* __restrict__ y, int m0, int n0,
                           int M, int N, void* smem) {
    const int lane = threadIdx.x % 32, g = lane / 4, q2 = lane % 4 * 2;
    if constexpr (SPLIT == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int col = n0 + col0 + nt * 8 + q2;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = m0 + row0 + mt * 16 + g + 8 * h;
                    if (row < M && col < N)
                        *reinterpret_cast<uint32_t*>(y + (int64_t)row * N + col) =
                            pack2<T>(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
                }
            }
    } else {
        static_assert(BM % SPLIT == 0, "each block of the cluster adds up an equal share of rows");
        float2* part = static_cast<float2*>(smem);   // [BM][BN / 2]
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    part[(row0 + mt * 16 + g + 8 * h) * (BN / 2) + (col0 + nt * 8 + q2) / 2] =
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

template <typename T, int BM, int BN, int STAGES, int SPLIT>
__device__ void gemm(const T* __restrict__ x, const T* __restrict__ W, T* __restrict__ y, int M, int N, int K) {
    constexpr int WM = BM == 16 ? 1 : 2, WN = WARPS / WM, MT = BM / (16 * WM), NT = BN / (8 * WN);
    static_assert(MT * 16 * WM == BM && NT * 8 * WN == BN, "the warps tile the block");
    static_assert(BM * BN * 4 <= STAGES * BN * (BK + PAD) * 2, "a split's partial sums fit in the W stages");
    extern __shared__ __align__(16) unsigned char smem[];
    TileRow<T>* ws = reinterpret_cast<TileRow<T>*>(smem);   // [STAGES][BN]
    TileRow<T>* xs = ws + STAGES * BN;                      // [STAGES][BM]
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const KRange k = KRange::of_block<SPLIT>(K);

    // Before the wait: the block's W rows into L2, and its first STAGES - 1 W tiles (one
    // commit group); then x's tiles, a group each, and chunk c's wait covers both.
    if (threadIdx.x == 0) prefetch_l2(W + (int64_t)n0 * K, min(BN, N - n0) * K * (int)sizeof(T));
    for (int s = 0; s < STAGES - 1; ++s)
        if (s < k.chunks) load_tile<PaddedTile, T, BN>(ws + s * BN, W, N, K, n0, k.first + s * BK);
    cp_async_commit();
    pdl_start();
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k.chunks) load_tile<PaddedTile, T, BM>(xs + s * BM, x, M, K, m0, k.first + s * BK);
        cp_async_commit();
    }

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / WN, wn = warp % WN;
    float acc[MT][NT][4] = {};
    for (int c = 0; c < k.chunks; ++c) {
        cp_async_wait<STAGES - 2>();   // this thread's copies of chunk c have landed ...
        __syncthreads();               // ... and everyone's; and chunk c - 1's slot is free
        const int next = c + STAGES - 1;
        if (next < k.chunks) {
            load_tile<PaddedTile, T, BM>(xs + next % STAGES * BM, x, M, K, m0, k.first + next * BK);
            load_tile<PaddedTile, T, BN>(ws + next % STAGES * BN, W, N, K, n0, k.first + next * BK);
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
    store_tile<T, BM, BN, SPLIT>(acc, wm * MT * 16, wn * NT * 8, y, m0, n0, M, N, smem);
}

// ---------------------------------------------------------------- wgmma (sm_90a)
// Built for sm_90a only (cuda_build.arch_of); elsewhere the kernels trap, and the host
// offers their tiles only on sm_90a.

// The pipeline of gemm() with wgmma: chunk c's multiplies run while the next chunks load,
// and a slot is refilled once the wgmmas that read it are done (wait_group 1 leaves one
// chunk's in flight), so STAGES - 2 chunks load ahead.
template <typename T, int BN, int STAGES, int SPLIT>
__device__ void gemm_wgmma(const T* __restrict__ x, const T* __restrict__ W, T* __restrict__ y, int M, int N,
                           int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = 64, ALIGN = 1024, X_BYTES = BM * BK * 2, STAGE_BYTES = X_BYTES + BN * BK * 2;
    static_assert(STAGES >= 3 && BN % 64 == 0 && X_BYTES % ALIGN == 0, "every tile starts 1024-byte aligned");
    static_assert(BM * BN * 4 <= STAGES * STAGE_BYTES, "a split's partial sums fit in the stages");
    extern __shared__ unsigned char smem_unaligned[];
    unsigned char* smem = smem_unaligned + (-smem_address(smem_unaligned) & (ALIGN - 1));
    auto x_tile = [&](int s) { return smem + s * STAGE_BYTES; };
    auto w_tile = [&](int s) { return smem + s * STAGE_BYTES + X_BYTES; };
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const KRange k = KRange::of_block<SPLIT>(K);

    if (threadIdx.x == 0) prefetch_l2(W + (int64_t)n0 * K, min(BN, N - n0) * K * (int)sizeof(T));
    for (int s = 0; s < STAGES - 2; ++s)
        if (s < k.chunks) load_tile<SwizzledRows, T, BN>(w_tile(s), W, N, K, n0, k.first + s * BK);
    cp_async_commit();
    pdl_start();
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < k.chunks) load_tile<SwizzledRows, T, BM>(x_tile(s), x, M, K, m0, k.first + s * BK);
        cp_async_commit();
    }

    float acc[1][BN / 8][4] = {};
    for (int c = 0; c < k.chunks; ++c) {
        cp_async_wait<STAGES - 3>();   // this thread's copies of chunk c have landed ...
        fence_async_proxy();           // ... visible to the tensor cores ...
        __syncthreads();               // ... everyone's; and chunk c - 2's wgmmas are done
        const int next = c + STAGES - 2;
        if (next < k.chunks) {
            load_tile<SwizzledRows, T, BM>(x_tile(next % STAGES), x, M, K, m0, k.first + next * BK);
            load_tile<SwizzledRows, T, BN>(w_tile(next % STAGES), W, N, K, n0, k.first + next * BK);
        }
        cp_async_commit();
        const uint64_t a = tile_descriptor(x_tile(c % STAGES)), b = tile_descriptor(w_tile(c % STAGES));
        wgmma_fence();
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; ++k16)
#pragma unroll
            for (int n64 = 0; n64 < BN / 64; ++n64)   // 64 rows of W are 8 KB further: 512 in 16-byte units
                Wgmma<T>::ss(*reinterpret_cast<float(*)[8][4]>(&acc[0][n64 * 8]), a + 2 * k16,
                             b + 2 * k16 + n64 * 512, 1);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_registers(acc[0]);
    store_tile<T, BM, BN, SPLIT>(acc, threadIdx.x / 32 * 16, 0, y, m0, n0, M, N, smem);
#else
    __trap();
#endif
}

#define GEMM(T, N, BM, BN, S, SPLIT)                                                                    \
    extern "C" __global__ void __cluster_dims__(1, 1, SPLIT) __launch_bounds__(THREADS)                 \
        gemm_##N##_##BM##x##BN##x##S##_k##SPLIT(const T* x, const T* W, T* y, int M, int Nout, int K) { \
        gemm<T, BM, BN, S, SPLIT>(x, W, y, M, Nout, K);                                                 \
    }
#define GEMM_WG(T, N, BN, S, SPLIT)                                                                      \
    extern "C" __global__ void __cluster_dims__(1, 1, SPLIT) __launch_bounds__(THREADS)                  \
        gemm_wg_##N##_64x##BN##x##S##_k##SPLIT(const T* x, const T* W, T* y, int M, int Nout, int K) {   \
        gemm_wgmma<T, BN, S, SPLIT>(x, W, y, M, Nout, K);                                                \
    }
#define GEMM_TILES(T, N)                                                                                   \
    GEMM(T, N, 16, 64, 10, 1) GEMM(T, N, 16, 64, 7, 4) GEMM(T, N, 32, 32, 10, 1) GEMM(T, N, 32, 64, 7, 2) \
    GEMM(T, N, 64, 32, 10, 1) GEMM(T, N, 64, 64, 10, 1) GEMM(T, N, 64, 64, 7, 2) GEMM(T, N, 128, 64, 6, 1) \
    GEMM_WG(T, N, 64, 8, 1) GEMM_WG(T, N, 64, 5, 1) GEMM_WG(T, N, 128, 6, 1) GEMM_WG(T, N, 128, 4, 1)       \
    GEMM_WG(T, N, 256, 4, 1) GEMM_WG(T, N, 64, 6, 2) GEMM_WG(T, N, 128, 4, 2) GEMM_WG(T, N, 64, 5, 4)
GEMM_TILES(bf16, bf16)
GEMM_TILES(f16, f16)
