// A prefill's GEMM, y = x W^T, on Hopper's TMA and wgmma (sm_90a), optionally with the MLP's
// activation as its epilogue:
//   plain:  y[m, n] = T(x[m] . W[n])                                      W [N, K], y [M, N]
//   silu:   y[m, j] = T(silu(T(x[m] . W[j]))) * T(x[m] . W[N + j])        W = gate | up [2N, K]
// rounded as cuBLAS and then silu_and_mul round (silu_mul.cu), so the [M, 2N] gate|up product
// never reaches memory.
//
// Warp-specialized and persistent, in clusters of two blocks (one an SM). A block's tile is
// BM = 128 rows of x by BN rows of W: 256 (plain: 256 outputs; silu: 128 gate rows and the
// matching 128 up rows, 128 outputs), or 192 (plain) where tiles of 256 would waste columns
// or leave SMs idle in the last round, or 128 (silu, ping-pong, below; the host picks the
// width by the rounds of tiles over the SMs, gemm_tma_width). The
// cluster's two blocks take two neighbouring row tiles of the same W tile: each has the TMA
// unit load its own x rows and one half of the W rows, the W half multicast into both
// blocks, so a W tile leaves L2 once for 256 rows. Warpgroup 0's first thread issues the
// loads, STAGES chunks of BK = 64 columns ahead. Warpgroups 1 and 2 multiply:
//   cooperative (BN = 256, 192): both on every tile, 64 rows each (one m64nBNk16 a 16 columns);
//   ping-pong (BN = 128): tiles taken in turn, each warpgroup all 128 rows of its own (two
//     m64n128k16), so that one's epilogue runs while the other multiplies. With the SiLU in
//     packed conversions (silu_times_pair) the cooperative tiles, which load x once for
//     twice the outputs, are the faster ones wherever they fill the rounds as well (H100,
//     8,192 rows: 53.1 against 55.7 us; 2,048: 18.4 against 15.7, a round mostly idle).
// A warpgroup's outputs go through shared memory: its threads write them there, and one has
// the TMA unit store them while the warpgroup multiplies the next tile.
// A stage's `full` barrier completes once its bytes have landed; its `empty` one once every
// multiplying warp of both blocks that reads it is past it, since the next W loads into it
// write into both.
// Layout: x [M, K], W row-major, K % 64 == 0 and rows 16-byte aligned (the host checks);
// plain: any N % 8 == 0; silu: N in whole tiles of outputs (the host asks N % 128 == 0).
// x's map: boxes of 128 rows; y's map: boxes of 64 x 64 (tensor_map.swizzled_rows_map).
// Launch: grid = 2 x clusters, block = 384, dynamic smem = _TMA_SMEM (cuda_ops.py).
// Kernels: gemm_tma_plain_<dtype>, gemm_tma_narrow_<dtype> (BN = 192), gemm_tma_silu_<dtype>,
// gemm_tma_silu_pp_<dtype> (BN = 128, ping-pong).
#include "tma.cuh"

namespace {
constexpr int BM = 128, WIDE_BN = 256, NARROW_BN = 192, PINGPONG_BN = 128, BK = 64, CLUSTER = 2;
constexpr int PRODUCERS = 128, CONSUMERS = 256;
constexpr int ROW = BK * 2;                                  // bytes: one swizzled 128-byte row
constexpr int OUT_BOX = 64 * ROW;                            // 64 x 64 staged outputs: one box of y's map
// Shared memory for the stages and the staged outputs, at every width: 3 stages at 256, 4 at
// 192, 5 at 128.
constexpr int TILE_BYTES = 212992;
// The loading warpgroup needs few registers, the multiplying ones a 64 x BN fp32 accumulator
// (up to 128) and its addressing: 40 x 128 + 232 x 256 fits the SM's 64K.
constexpr int LOADER_REGS = 40, MULTIPLIER_REGS = 232;

// A kernel's tiles: a stage is BM rows of x and BN of W (one half loaded by each block of the
// cluster); a multiplying warpgroup multiplies HALVES slabs of 64 rows a tile and stages their
// COLS outputs in boxes of 64 x 64.
template <bool SILU, int BN, bool PINGPONG> struct Tiles {
    static constexpr int COLS = SILU ? BN / 2 : BN, HALVES = PINGPONG ? 2 : 1;
    static constexpr int A_BYTES = BM * ROW, B_HALF = BN / 2 * ROW, STAGE = A_BYTES + 2 * B_HALF;
    static constexpr int OUT_BYTES = HALVES * (COLS / 64) * OUT_BOX, STAGES = (TILE_BYTES - 2 * OUT_BYTES) / STAGE;
    // A stage is free once every multiplying warp of both blocks that reads it is past it (a
    // block's W loads write into the block beside it).
    static constexpr int RELEASES = CLUSTER * CONSUMERS / 32 / (PINGPONG ? 2 : 1);
    // The 128-byte swizzle repeats every 1024 bytes: every tile and W half starts on one.
    static_assert(A_BYTES % 1024 == 0 && B_HALF % 1024 == 0 && STAGE % 1024 == 0 && OUT_BOX % 1024 == 0 &&
                  STAGES >= 3 && COLS % 64 == 0);
    // Stages, staged outputs and two mbarriers a stage in the host's TILE_BYTES + 64 (cuda_ops._TMA_SMEM).
    static_assert(STAGES * STAGE + 2 * OUT_BYTES + 16 * STAGES <= TILE_BYTES + 64);
};
}

template <typename T, bool SILU, int BN, bool PINGPONG>
__device__ void gemm_tma(const TensorMap& x_map, const TensorMap& w_map, const TensorMap& y_map, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = Tiles<SILU, BN, PINGPONG>;
    constexpr int STAGES = L::STAGES, STAGE = L::STAGE, A_BYTES = L::A_BYTES, B_HALF = L::B_HALF;
    constexpr int COLS = L::COLS, HALVES = L::HALVES;   // outputs a tile; 64-row slabs a warpgroup
    extern __shared__ unsigned char smem_unaligned[];
    const uint32_t base = smem_address(smem_unaligned);
    const uint32_t stages = base + (-base & 1023);   // tiles 1024-aligned
    const uint32_t staging = stages + STAGES * STAGE, bars = staging + 2 * L::OUT_BYTES;
    auto a_tile = [&](int s) { return stages + s * STAGE; };
    auto b_tile = [&](int s) { return a_tile(s) + A_BYTES; };
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };
    const int rank = (int)cluster_rank();   // which row tile of the pair this block takes
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(full(s), 1);
            mbarrier_init(empty(s), L::RELEASES);
        }
        fence_barrier_init();
    }
    cluster_sync_after_init();

    const int m_pairs = (M + CLUSTER * BM - 1) / (CLUSTER * BM), n_tiles = (N + COLS - 1) / COLS;
    const int work = m_pairs * n_tiles, chunks = K / BK;
    // Work item w: rows of pair w % m_pairs (neighbouring clusters share a W tile in L2), W
    // tile w / m_pairs.
    auto m0_of = [&](int w) { return (w % m_pairs * CLUSTER + rank) * BM; };
    auto n_tile_of = [&](int w) { return w / m_pairs; };
    // The warpgroup as a value the compiler knows is the same across a warp: it would
    // otherwise see the wgmmas below on a divergent path and serialize them.
    const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (wg == 0) {
        setmaxnreg_dec<LOADER_REGS>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(x_map);
            prefetch_tensor_map(w_map);
            prefetch_tensor_map(y_map);
            int it = 0;
            for (int w = cluster_id(); w < work; w += cluster_count()) {
                const int n_tile = n_tile_of(w), m0 = m0_of(w);
                // This block's half of the tile's W rows: the gate or the up rows of the
                // tile's outputs (silu), or the first or second 128 (plain).
                const int w_row = SILU ? rank * N + n_tile * COLS : n_tile * BN + rank * (BN / 2);
                for (int c = 0; c < chunks; ++c, ++it) {
                    const int s = it % STAGES;
                    if (it >= STAGES) mbarrier_wait(empty(s), (it / STAGES - 1) & 1);
                    mbarrier_arrive_expect_bytes(full(s), STAGE);
                    tma_load(a_tile(s), x_map, c * BK, m0, full(s));
                    // This block's W half, multicast into both blocks.
                    tma_load_multicast(b_tile(s) + rank * B_HALF, w_map, c * BK, w_row, full(s), (1 << CLUSTER) - 1);
                }
            }
        }
    } else {
        setmaxnreg_inc<MULTIPLIER_REGS>();
        const int cw = wg - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
        auto release = [&](int s) {   // this warp is done reading stage s, in both blocks' eyes
            __syncwarp();
            if (lane < CLUSTER) mbarrier_arrive_cluster(empty(s), lane);
        };
        // Ping-pong: this warpgroup's turn to multiply is named barrier 3 + cw, which the other
        // one arrives on once it has multiplied its tile. Besides keeping the tensor cores to
        // one warpgroup at a time, the turns keep each stage's fills in order: a warpgroup
        // waits on a stage's `full` barrier only after every earlier fill of it was taken,
        // where a parity wait could otherwise pass on the fill before the one it wants.
        auto turn_wait = [&](int j) { if (PINGPONG && j > 0) named_barrier_sync(3 + cw, 256); };
        auto turn_pass = [&](int w) {   // only if the other warpgroup has a tile to take it for
            if (PINGPONG && w + (int)cluster_count() < work) named_barrier_arrive(4 - cw, 256);
        };
        // The cluster's j-th tile is work item cluster_id + j * cluster_count; ping-pong gives
        // the even ones to warpgroup 1, the odd ones to warpgroup 2. Its chunks are the stage
        // ring's fills j * chunks onwards.
        const int first = PINGPONG ? cw : 0, step = PINGPONG ? 2 : 1;
        for (int j = first;; j += step) {
            const int w = cluster_id() + j * cluster_count();
            if (w >= work) break;
            const int n_tile = n_tile_of(w), m0 = m0_of(w);
            float acc[HALVES][BN / 8][4];
            turn_wait(j);
            for (int c = 0, it = j * chunks; c < chunks; ++c, ++it) {
                const int s = it % STAGES;
                mbarrier_wait(full(s), (it / STAGES) & 1);
                const uint64_t b = smem_descriptor(b_tile(s));
                wgmma_fence();
#pragma unroll
                for (int h = 0; h < HALVES; ++h) {
                    const uint64_t a = smem_descriptor(a_tile(s) + (PINGPONG ? h : cw) * 64 * ROW);
#pragma unroll
                    for (int k16 = 0; k16 < BK / 16; ++k16)
                        Wgmma<T>::ss(acc[h], a + 2 * k16, b + 2 * k16, c > 0 || k16 > 0);
                }
                wgmma_commit();
                wgmma_wait<1>();   // the chunk before is multiplied: its stage may be refilled
                if (c > 0) release((it - 1) % STAGES);
            }
            turn_pass(w);
            wgmma_wait<0>();
#pragma unroll
            for (int h = 0; h < HALVES; ++h) fence_registers(acc[h]);
            release(((j + 1) * chunks - 1) % STAGES);
            // Stage this warpgroup's HALVES x 64 x COLS outputs in shared memory as boxes of 64 x 64
            // in the 128-byte swizzle (conflict-free: a warp's lanes write 32 different banks),
            // then one thread has the TMA unit store them while the next tile multiplies.
            const uint32_t out = staging + cw * L::OUT_BYTES;
            const bool storer = threadIdx.x % 128 == 0;
            if (storer) tma_store_wait_read();   // the last tile's boxes have left
            named_barrier_sync(1 + cw, 128);
#pragma unroll
            for (int h = 0; h < HALVES; ++h)
#pragma unroll
                for (int nt = 0; nt < COLS / 8; ++nt)
#pragma unroll
                    for (int e2 = 0; e2 < 2; ++e2) {
                        const int r = warp * 16 + lane / 4 + 8 * e2;
                        const float* y = acc[h][nt] + 2 * e2;   // two neighbouring outputs
                        const float* up = acc[h][COLS / 8 + nt] + 2 * e2;
                        st_shared_u32(out + (h * (COLS / 64) + nt / 8) * OUT_BOX + r * ROW + ((nt % 8) ^ (r % 8)) * 16 +
                                          lane % 4 * 4,
                                      SILU ? silu_times_pair<T>(y[0], y[1], up[0], up[1]) : pack2<T>(y[0], y[1]));
                    }
            fence_proxy_async_shared();   // the generic-proxy writes, visible to the TMA unit
            named_barrier_sync(1 + cw, 128);
            if (storer) {
#pragma unroll
                for (int h = 0; h < HALVES; ++h)
#pragma unroll
                    for (int b = 0; b < COLS / 64; ++b)
                        tma_store(y_map, out + (h * (COLS / 64) + b) * OUT_BOX, n_tile * COLS + b * 64,
                                  m0 + (PINGPONG ? h : cw) * 64);
                tma_store_commit();
            }
        }
        if (threadIdx.x % 128 == 0) tma_store_wait();   // every box written before the block leaves
    }
    __syncwarp();
    cluster_sync_before_exit();   // no block leaves while its peer may still load into it or arrive on it
#else
    __trap();
#endif
}

#define GEMM_TMA(T, N, SILU, BN, PINGPONG, KIND)                                                          \
    extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(PRODUCERS + CONSUMERS, 1) \
        gemm_tma_##KIND##N(const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map, \
                           const __grid_constant__ TensorMap y_map, int M, int Nout, int K) {               \
        pdl_start();                                                                                        \
        gemm_tma<T, SILU, BN, PINGPONG>(x_map, w_map, y_map, M, Nout, K);                                   \
    }
GEMM_TMA(bf16, bf16, false, WIDE_BN, false, plain_) GEMM_TMA(f16, f16, false, WIDE_BN, false, plain_)
GEMM_TMA(bf16, bf16, false, NARROW_BN, false, narrow_) GEMM_TMA(f16, f16, false, NARROW_BN, false, narrow_)
GEMM_TMA(bf16, bf16, true, WIDE_BN, false, silu_) GEMM_TMA(f16, f16, true, WIDE_BN, false, silu_)
GEMM_TMA(bf16, bf16, true, PINGPONG_BN, true, silu_pp_) GEMM_TMA(f16, f16, true, PINGPONG_BN, true, silu_pp_)
