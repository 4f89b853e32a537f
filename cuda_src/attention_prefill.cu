// Causal paged attention for a variable-length batch of multi-token queries
// (prefill and chunked prefill), flash-attention 2 style on the tensor cores.
//
// Three kernels, the same tiles, softmax and output:
//   attn_prefill_<dtype>_d<D>_m<MT>   mma.sync (any sm_80 and later, every dtype): one block
//        per (query head, tile of BM queries, sequence); 4 warps, each owning MT m-tiles of 16
//        query rows (BM = 64 MT). K/V tiles of 64 keys are gathered through the block table
//        into shared memory with cp.async, two stages deep, so the next tile's loads are in
//        flight while the tensor cores work on this one. S = Q K^T and O += P V use mma.sync
//        m16n8k16 (fp16 operands for fp16 storage, bf16 otherwise; fp32 accumulate) with an
//        online softmax in registers, fragments loaded by ldmatrix.
//   attn_prefill_wg_<dtype>_d64_m<WG> Hopper's warpgroup MMA (sm_90a; 16-bit caches, d = 64):
//        a block is WG warpgroups of 64 query rows each (BM = 64 WG) that share the K/V tiles.
//        Q, K and V sit in shared memory in wgmma's 128-byte swizzle (a row of 64 16-bit
//        values is 128 bytes); S = Q K^T reads Q and K from there, O += P V takes P from
//        registers and V as an MN-major operand. No ldmatrix, no padding, and the multiplies
//        of one warpgroup run while another's softmax does.
//   attn_prefill_ws_<dtype>_d64_m<CW> the same multiplies, warp-specialized (the tall tiles:
//        CW = 3, 192 rows): one warpgroup loads, CW compute, and they meet at mbarriers, not
//        block barriers; a computing warpgroup's P V runs under its next tile's softmax.
//        attn_prefill_ws128_<dtype>_d64_m3: the tall tiles on K/V tiles of 128 keys.
// In bf16, P goes into P V as two operand terms, hi + lo (~16 mantissa bits, not 8):
// P rounded to bf16 alone, as flash attention does, cost greedy agreement with float32
// (60 chat prompts: 72% against the torch reference's 83%); fp16's 11 bits need no lo term. Query j of a sequence
// with n new tokens and context L sits at position L - n + j and sees keys <= it;
// only the tiles that cross that diagonal are masked.
// fp32 caches are rounded to bf16 on their way to shared memory (accumulation stays fp32).
// Launch: grid = (nh, B, ceil(max_query_len / BM)); mma.sync: block = 128, dynamic smem =
// 2 stages x (K, V) x BN x (D + PAD) 16-bit values; wgmma: block = 128 WG, dynamic smem =
// (BM + 2 stages x (K, V) x BN) x 128 bytes + 1024 (the tiles start 1024-byte aligned);
// warp-specialized: block = 128 (CW + 1), dynamic smem = (BM + WS_STAGES x (K, V) x KN) x 128
// bytes + 2 WS_STAGES mbarriers of 8 bytes + 1024 (KN = 64, or 128 keys: ws128).
// The GPU starts blocks in the order of their index (x fastest), so grid.z counts each
// sequence's tiles from its last: every sequence's longest tile starts in the first wave and
// its shortest ones fill the last (z slowest, not y: with y the tiles, a batch's last sequence
// started its longest tiles last, and they set the kernel's time). The heads of one KV head
// sit side by side in x, so their K/V reads meet in L2.
// Split keys (wgmma kernels): when one long prompt makes too few blocks to fill the GPU, its
// longest tile's chain of K/V tiles sets the kernel's time. The host then gives the first
// `split_rows` tiles of every sequence (the longest) `parts` blocks each, side by side in
// grid.z; each takes an even share of the tile's K/V tiles and leaves its unnormalised
// output and (m, l) in `partials`; the last of them to finish (a counter per tile, which it
// zeroes again) merges every part's state in part order and stores the rows.
#include <type_traits>

#include "wgmma.cuh"

namespace {
constexpr int THREADS = 128, WARPS = 4, BN = 64, PAD = 8;  // PAD: 16 bytes per row against bank conflicts
constexpr int ROWS_PER_M_TILE = 64;                          // a block's query rows per m-tile of each warp
constexpr int BLOCKS_PER_SM = 2;                             // the registers of 128 threads at MT = 2 allow 2
static_assert(ROWS_PER_M_TILE == WARPS * 16, "one m16 tile per warp");
}

// (a, b) as two bf16 operand pairs, hi + lo: hi is a and b cut to bf16 (their upper halves,
// one byte permute), lo what hi missed (exact in float), rounded to bf16: ~16 bits in all.
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
    const uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
    hi = __byte_perm(ua, ub, 0x7632);
    lo = pack2<bf16>(a - __uint_as_float(ua & 0xffff0000u), b - __uint_as_float(ub & 0xffff0000u));
}
template <typename Op> constexpr bool two_terms = std::is_same<Op, bf16>::value;   // P V as hi + lo

// 2^x without the denormal handling of exp2f: probabilities below 2^-126 are 0 here.
__device__ __forceinline__ float exp2_ftz(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// The mma.sync kernel's loader: starts copying the K and V rows kv0 .. kv0 + BN of KV head kvh
// into the padded shared-memory tiles ks, vs ([BN][D + PAD] of Op); rows at or past kv_end
// become zeros (their weights are 0, and 0 * stale data could be NaN).
template <typename T, typename Op, int D>
__device__ __forceinline__ void load_kv_tile(Op (*ks)[D + PAD], Op (*vs)[D + PAD], const T* k_cache, const T* v_cache,
                                             const int* table, int bs_shift, int nkv, int kvh, int kv0, int kv_end) {
    for (int idx = threadIdx.x; idx < BN * D / 8; idx += THREADS) {
        const int row = idx / (D / 8), c = (idx % (D / 8)) * 8, j = kv0 + row;
        const bool valid = j < kv_end;
        const int64_t slot = valid ? ((int64_t)table[j >> bs_shift] << bs_shift) + (j & ((1 << bs_shift) - 1)) : 0;
        const int64_t off = (slot * nkv + kvh) * D + c;
        if constexpr (sizeof(T) == 2) {   // stored as the operand type: copied as it is
            cp_async16(&ks[row][c], k_cache + off, valid);
            cp_async16(&vs[row][c], v_cache + off, valid);
        } else {                          // float: converted on the way, through registers
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
            if (valid) {
                kw = load8_as<Op>(k_cache + off);
                vw = load8_as<Op>(v_cache + off);
            }
            *reinterpret_cast<uint4*>(&ks[row][c]) = kw;
            *reinterpret_cast<uint4*>(&vs[row][c]) = vw;
        }
    }
}

// op over this lane's 2 NT scores of row i (element 2 i or 2 i + 1 of every fragment of 8
// keys) as a tree: log2(2 NT) dependent steps, not the 2 NT of a running max or sum, which
// left the warps waiting on them.
template <int W, int N, typename Op> __device__ __forceinline__ void fold_halves(float (&v)[N], Op op) {
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = op(v[k], v[k + W]);
    if constexpr (W > 1) fold_halves<W / 2>(v, op);   // a step a level: v stays in registers
}
template <int NT, typename Op>
__device__ __forceinline__ float row_reduce(const float (&s)[NT][4], int i, Op op) {
    float v[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) v[nt] = op(s[nt][2 * i], s[nt][2 * i + 1]);
    fold_halves<NT / 2>(v, op);
    return v[0];
}

// One K/V tile's step of the online softmax for one 16-row m-tile, in base 2, but for the
// output: masks keys past each row's last (`masked`: the tile crosses the diagonal), raises
// the running max m (of the scaled scores) to the tile's, rescales the running sum l to it,
// and turns the raw scores s into unnormalised probabilities, 2^(s scale - m): one FMA and
// one ex2 a score. The output's factor is left in corr; returns whether any row of the
// warp's has one (its max moved: seldom, past a long row's first tiles).
// Element e of s[nt]: row e / 2, key kv0 + 8 nt + cq + e % 2; NT fragments (8 NT keys).
template <int NT>
__device__ __forceinline__ bool softmax_scores(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                               float (&corr)[2], const int (&lim)[2], int kv0, int cq,
                                               bool masked, float scale_log2) {
    if (masked)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (kv0 + nt * 8 + cq + (e & 1) > lim[e / 2]) s[nt][e] = -INFINITY;
    float mx[2], base[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        mx[i] = row_reduce(s, i, [](float a, float b) { return fmaxf(a, b); });
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(m[i], mx[i] * scale_log2);   // scale_log2 > 0: the max of the scaled
        base[i] = m_new == -INFINITY ? 0.f : m_new;           // no key seen yet: keep ex2 finite
        corr[i] = exp2_ftz(m[i] - base[i]);
        m[i] = m_new;
        l[i] *= corr[i];
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = exp2_ftz(fmaf(s[nt][e], scale_log2, -base[e / 2]));
#pragma unroll
    for (int i = 0; i < 2; ++i)   // per-lane partials; summed over the quad at the end
        l[i] += row_reduce(s, i, [](float a, float b) { return a + b; });
    return __any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f);
}

template <int D> __device__ __forceinline__ void rescale(float (&o)[D / 8][4], const float (&corr)[2]) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][0] *= corr[0]; o[dt][1] *= corr[0];
        o[dt][2] *= corr[1]; o[dt][3] *= corr[1];
    }
}

// The whole step: softmax_scores, then o rescaled where a row's max moved.
template <int D>
__device__ __forceinline__ void softmax_step(float (&s)[BN / 8][4], float (&m)[2], float (&l)[2],
                                             float (&o)[D / 8][4], const int (&lim)[2], int kv0, int cq,
                                             bool masked, float scale_log2) {
    float corr[2];
    if (softmax_scores(s, m, l, corr, lim, kv0, cq, masked, scale_log2)) rescale<D>(o, corr);
}

// P's keys 16 kk .. 16 kk + 15 as A operands of P V: two adjacent S tiles form one A
// fragment (the accumulator layout matches); lo only where two_terms<Op>.
template <typename Op, int NT>
__device__ __forceinline__ void p_operands(const float (&s)[NT][4], int kk, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float* p = s[2 * kk + i / 2] + 2 * (i % 2);
        if constexpr (two_terms<Op>) split_bf16(p[0], p[1], hi[i], lo[i]);
        else hi[i] = pack2<Op>(p[0], p[1]);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// O += P V on the wgmma kernels: P of KK 16-key steps (hi, and lo where two_terms) from
// registers, V the MN-major tile at v_desc, its 16-key steps 16 rows (2,048 bytes) apart.
// Issues the wgmmas only.
template <typename T, int KK>
__device__ __forceinline__ void p_times_v(float (&o)[8][4], const uint32_t (&hi)[KK][4],
                                          const uint32_t (&lo)[KK][4], uint64_t v_desc) {
    constexpr int STEP = 16 * 128 >> 4;   // 16 rows of 128 bytes, in the descriptor's 16-byte units
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        Wgmma<T>::rs_mn(o, hi[kk], v_desc + kk * STEP);
        if constexpr (two_terms<T>) Wgmma<T>::rs_mn(o, lo[kk], v_desc + kk * STEP);
    }
}
#endif

// Writes one m-tile's output rows, o over the quad's summed l; query rows qi[i] at or past the
// sequence's n new tokens are not stored.
template <typename T, int D>
__device__ __forceinline__ void store_rows(const float (&o)[D / 8][4], const float (&l)[2], const int (&qi)[2], int n,
                                           T* __restrict__ out, int q0, int nh, int h, int cq) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float sum = l[i];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (qi[i] >= n) continue;
        T* row = out + ((int64_t)(q0 + qi[i]) * nh + h) * D;
        const float inv = 1.f / sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            row[dt * 8 + cq] = from_float<T>(o[dt][2 * i] * inv);
            row[dt * 8 + cq + 1] = from_float<T>(o[dt][2 * i + 1] * inv);
        }
    }
}

// A block's query tile: the sequence's new tokens (n, from q0) and context L, its slice of
// the block table, its KV head, and the keys its BM rows see.
struct QueryTile {
    int first_row, q0, n, L, kvh, bs_shift;
    const int* table;

    // tile: the block's tile counted from the sequence's last (the grid's order), of `tiles`.
    static __device__ __forceinline__ QueryTile of_block(int BM, int tile, int tiles, const int* block_tables,
                                                         int max_blocks, const int* seq_lens,
                                                         const int* query_start_loc, int nh, int nkv, int bs) {
        const int b = blockIdx.y, q0 = query_start_loc[b];
        return {(tiles - 1 - tile) * BM, q0, query_start_loc[b + 1] - q0, seq_lens[b],
                (int)blockIdx.x / (nh / nkv), __ffs(bs) - 1,   // the host keeps bs a power of two
                block_tables + (int64_t)b * max_blocks};
    }
    // Rows past n repeat row n - 1 (nothing is masked out entirely) and are not stored.
    __device__ __forceinline__ int row_q(int qi) const { return min(qi, n - 1); }
    __device__ __forceinline__ int last_key(int qi) const { return L - n + row_q(qi); }
    __device__ __forceinline__ int visible_to_all() const { return L - n + first_row; }   // no row masks keys below
    __device__ __forceinline__ int kv_end(int BM) const { return L - n + min(n, first_row + BM); }
    // A lane's two query rows, from row0 (its fragment's first) and 8 below, and the last key each sees.
    __device__ __forceinline__ void lane_rows(int row0, int (&qi)[2], int (&lim)[2]) const {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            qi[i] = row0 + 8 * i;
            lim[i] = last_key(qi[i]);
        }
    }
    // Starts copying the tile's BM query rows of head h (d = 64) into qs in wgmma's swizzle,
    // 16 bytes a copy, as thread `thread` of `threads` taking part.
    template <int BM, typename T>
    __device__ __forceinline__ void copy_queries(unsigned char* qs, const T* q, int64_t q_stride, int h, int thread,
                                                 int threads) const {
        constexpr int D = 64;
        for (int i = thread; i < BM * D / 8; i += threads) {
            const int row = i / (D / 8), c = i % (D / 8) * 8;
            cp_async16(swizzled_128(qs, row, c * 2), q + (int64_t)(q0 + row_q(first_row + row)) * q_stride + (int64_t)h * D + c,
                       true);
        }
    }
};

// The tile a block of the wgmma kernel takes, and its share of the tile's K/V tiles (see
// "Split keys" above): the first split_rows tiles of each sequence, `parts` blocks each. Without
// SPLIT the block takes its whole tile, and the constants fold away.
struct KeySplit {
    int tile, tiles, part, parts;

    template <bool SPLIT> static __device__ __forceinline__ KeySplit of_block(int split_rows, int parts) {
        if constexpr (!SPLIT) return {(int)blockIdx.z, (int)gridDim.z, 0, 1};
        const int z = blockIdx.z, tiles = gridDim.z - split_rows * (parts - 1);
        if (z < split_rows * parts) return {z / parts, tiles, z % parts, parts};
        return {z - split_rows * (parts - 1), tiles, 0, 1};
    }
    __device__ __forceinline__ int first(int kv_tiles) const { return part * kv_tiles / parts; }
    __device__ __forceinline__ int end(int kv_tiles) const { return (part + 1) * kv_tiles / parts; }
};

// A thread's part in loading K/V tiles into the wgmma kernel's swizzled stages (16-bit caches,
// d = 64): 16-byte piece threadIdx.x % 8 of rows threadIdx.x / 8 + i STEP of every tile. A
// tile's block-table entries are read a tile before its copies are issued (`fetch`, then
// `issue`), so no thread waits on the table on its way to the softmax; the rest of an address
// is a few integer operations, kept out of registers that the softmax needs. KEYS rows a tile.
template <typename T, int NTHREADS, int KEYS = BN> struct TileLoader {
    static constexpr int D = 64, STEP = NTHREADS / 8, ROWS = KEYS / STEP;
    static_assert(STEP % 8 == 0, "a thread's rows share one swizzle phase");
    const int* table;
    int kv_end;
    int entry[ROWS];           // the block-table entries of the rows of the tile last fetched

    // The table entries of tile kv0's rows (rows past the keys read the last key's: never copied).
    __device__ __forceinline__ void fetch(int kv0, int bs_shift) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
            entry[i] = __ldg(table + (min(kv0 + (int)threadIdx.x / 8 + i * STEP, kv_end - 1) >> bs_shift));
    }
    // Starts copying tile kv0 (the one last fetched) of KV head kvh into the stages at shared
    // addresses ks, vs; rows at or past kv_end become zeros (their weights are 0, and 0 * stale
    // data could be NaN).
    __device__ __forceinline__ void issue(uint32_t ks, uint32_t vs, const T* k_cache, const T* v_cache, int kv0,
                                          int bs_shift, int nkv, int kvh) const {
        const int row0 = threadIdx.x / 8, piece = threadIdx.x % 8;
        const uint32_t to = row0 * 128 + ((piece ^ (row0 % 8)) << 4);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const int j = kv0 + row0 + i * STEP;
            const int slot = (entry[i] << bs_shift) + (j & ((1 << bs_shift) - 1));
            const int64_t at = (int64_t)(slot * nkv + kvh) * D + piece * 8;   // < 2^31 slots x heads: TBs of cache
            cp_async16(ks + to + i * STEP * 128, k_cache + at, j < kv_end);
            cp_async16(vs + to + i * STEP * 128, v_cache + at, j < kv_end);
        }
    }
};

// A split tile's block once its keys are done: leaves its o, m and l (per thread, as the
// registers hold them) in its slot of `partials`, and returns whether it was the last of the
// tile's blocks to do so. That one zeroes the tile's counter for the next launch and merges
// every part's state into o, m, l in part order, its own read back like the others', so the
// result does not depend on which block came last.
// The block's threads FIRST .. FIRST + NTHREADS - 1 take part (the warp-specialized kernel's
// consumers: then they meet at a named barrier of their own).
template <int NTHREADS, int FIRST> __device__ __forceinline__ void sync_part() {
    if constexpr (FIRST == 0) __syncthreads();
    else asm volatile("bar.sync 1, %0;\n" ::"n"(NTHREADS) : "memory");
}
template <int D, int NTHREADS, int FIRST = 0>
__device__ bool merge_parts(float (&o)[D / 8][4], float (&m)[2], float (&l)[2], float* partials, int* counter,
                            int part, int parts) {
    constexpr int O = D / 2, WORDS = O + 4;   // a thread's o, then m[2] and l[2]
    const int me = threadIdx.x - FIRST;
    float* mine = partials + (int64_t)part * WORDS * NTHREADS + me;
#pragma unroll
    for (int i = 0; i < O; ++i) mine[i * NTHREADS] = o[i / 4][i % 4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        mine[(O + i) * NTHREADS] = m[i];
        mine[(O + 2 + i) * NTHREADS] = l[i];
    }
    __threadfence();              // the state is visible to the GPU before the count says so
    sync_part<NTHREADS, FIRST>();
    __shared__ int arrived;
    if (me == 0) arrived = atomicAdd(counter, 1);
    sync_part<NTHREADS, FIRST>();
    if (arrived != parts - 1) return false;
    __threadfence();
    if (me == 0) *counter = 0;
    for (int p = 0; p < parts; ++p) {
        const float* part_state = partials + (int64_t)p * WORDS * NTHREADS + me;
        float old_scale[2], new_scale[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float mp = __ldcg(part_state + (O + i) * NTHREADS), lp = __ldcg(part_state + (O + 2 + i) * NTHREADS);
            const float m_new = p == 0 ? mp : fmaxf(m[i], mp), base = m_new == -INFINITY ? 0.f : m_new;
            old_scale[i] = p == 0 ? 0.f : exp2_ftz(m[i] - base);
            new_scale[i] = exp2_ftz(mp - base);
            l[i] = (p == 0 ? 0.f : l[i] * old_scale[i]) + lp * new_scale[i];
            m[i] = m_new;
        }
#pragma unroll
        for (int i = 0; i < O; ++i) {   // element e of o[dt] belongs to row e / 2
            const float prev = p == 0 ? 0.f : o[i / 4][i % 4] * old_scale[i % 4 / 2];
            o[i / 4][i % 4] = prev + __ldcg(part_state + i * NTHREADS) * new_scale[i % 4 / 2];
        }
    }
    return true;
}

template <typename T, int D, int MT, typename Op = typename Operand<T>::type>
__device__ void attn_prefill(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                             const T* __restrict__ v_cache, const int* __restrict__ block_tables, int max_blocks,
                             const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                             T* __restrict__ out, int nh, int nkv, int bs, float scale_log2) {
    constexpr int BM = ROWS_PER_M_TILE * MT;
    using KVTile = Op[BN][D + PAD];
    extern __shared__ __align__(16) unsigned char smem[];
    KVTile* ks = reinterpret_cast<KVTile*>(smem);   // [2 stages]
    KVTile* vs = ks + 2;

    const QueryTile qt = QueryTile::of_block(BM, blockIdx.z, gridDim.z, block_tables, max_blocks, seq_lens,
                                             query_start_loc, nh, nkv, bs);
    if (qt.first_row >= qt.n) return;
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane / 4, cq = (lane % 4) * 2;  // fragment row / column pair of this lane

    // This lane's query rows (two per m-tile) and the last key each sees.
    int qi[MT][2], lim[MT][2];
    uint32_t qf[MT][D / 16][4];  // A fragments of Q, in registers for the whole loop
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        qt.lane_rows(qt.first_row + (warp * MT + mt) * 16 + r, qi[mt], lim[mt]);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const T* row = q + (int64_t)(qt.q0 + qt.row_q(qi[mt][i])) * q_stride + (int64_t)h * D;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                qf[mt][kk][i] = load2_as<Op>(row + kk * 16 + cq);
                qf[mt][kk][i + 2] = load2_as<Op>(row + kk * 16 + cq + 8);
            }
        }
    }

    float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
    }

    const int kv_end = qt.kv_end(BM), kv_tiles = (kv_end + BN - 1) / BN;
    auto load = [&](int stage, int kv0) {
        load_kv_tile<T, Op, D>(ks[stage], vs[stage], k_cache, v_cache, qt.table, qt.bs_shift, nkv, qt.kvh, kv0, kv_end);
    };
    load(0, 0);
    cp_async_commit();
    for (int t = 0; t < kv_tiles; ++t) {
        const int kv0 = t * BN, stage = t & 1;
        if (t + 1 < kv_tiles) load(stage ^ 1, kv0 + BN);   // that stage was last read before the previous final barrier
        cp_async_commit();                  // (an empty group on the last tile keeps the count uniform)
        cp_async_wait<1>();                 // this thread's copies of tile t have landed ...
        __syncthreads();                    // ... and everyone's
        const KVTile& kt = ks[stage];
        const KVTile& vt = vs[stage];

        // S = Q K^T. One ldmatrix.x4 gives the B fragments of two 16-dim steps.
        float s[MT][BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
            for (int k2 = 0; k2 < D / 32; ++k2) {
                uint32_t kb[4];
                ldmatrix_x4(kb, &kt[nt * 8 + (lane & 7)][k2 * 32 + (lane >> 3) * 8]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<Op>(s[mt][nt], qf[mt][2 * k2], kb[0], kb[1]);
                    mma<Op>(s[mt][nt], qf[mt][2 * k2 + 1], kb[2], kb[3]);
                }
            }
        }
        const bool masked = kv0 + BN - 1 > qt.visible_to_all();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) softmax_step<D>(s[mt], m[mt], l[mt], o[mt], lim[mt], kv0, cq, masked, scale_log2);

        // O += P V: one ldmatrix.x4.trans gives the B fragments of two 8-dim tiles.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t hi[MT][4], lo[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) p_operands<Op>(s[mt], kk, hi[mt], lo[mt]);
#pragma unroll
            for (int d2 = 0; d2 < D / 16; ++d2) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, &vt[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][d2 * 16 + (lane >> 4) * 8]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<Op>(o[mt][2 * d2], hi[mt], vb[0], vb[1]);
                    mma<Op>(o[mt][2 * d2 + 1], hi[mt], vb[2], vb[3]);
                    if constexpr (two_terms<Op>) {
                        mma<Op>(o[mt][2 * d2], lo[mt], vb[0], vb[1]);
                        mma<Op>(o[mt][2 * d2 + 1], lo[mt], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads();   // this stage is read: the next iteration may load into it
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) store_rows<T, D>(o[mt], l[mt], qi[mt], qt.n, out, qt.q0, nh, h, cq);
}

// The same with wgmma (sm_90a; elsewhere it traps, and the host does not launch it there).
// Warpgroup w of the block owns query rows 64 w .. 64 w + 63; its warp owns 16 of them, so
// a lane's rows, scores and outputs sit where they do in attn_prefill at MT = 1.
template <typename T, int WG, bool SPLIT>
__device__ void attn_prefill_wgmma(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                                   const T* __restrict__ v_cache, const int* __restrict__ block_tables,
                                   int max_blocks, const int* __restrict__ seq_lens,
                                   const int* __restrict__ query_start_loc, T* __restrict__ out, int nh, int nkv,
                                   int bs, float scale_log2, int split_rows, int parts, float* partials,
                                   int* counters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = 64, BM = 64 * WG, NTHREADS = 128 * WG, ROW = D * 2, TILE = BN * ROW, ALIGN = 1024;
    static_assert(ROW == 128 && TILE % ALIGN == 0, "rows of 128 bytes, tiles 1024-byte aligned");
    extern __shared__ unsigned char smem_unaligned[];
    unsigned char* smem = smem_unaligned + (-smem_address(smem_unaligned) & (ALIGN - 1));
    unsigned char* qs = smem;                                                 // [BM rows]
    const uint32_t kv_stages = smem_address(smem + BM * ROW);                // [2 stages][K, V]
    auto k_tile = [&](int stage) { return kv_stages + 2 * stage * TILE; };
    auto v_tile = [&](int stage) { return k_tile(stage) + TILE; };

    const KeySplit split = KeySplit::of_block<SPLIT>(split_rows, parts);
    const QueryTile qt = QueryTile::of_block(BM, split.tile, split.tiles, block_tables, max_blocks, seq_lens,
                                             query_start_loc, nh, nkv, bs);
    if (qt.first_row >= qt.n) return;
    const int h = blockIdx.x, wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int r = lane / 4, cq = (lane % 4) * 2;

    qt.copy_queries<BM>(qs, q, q_stride, h, threadIdx.x, NTHREADS);   // with tile 0 of K/V: one commit group
    const int kv_end = qt.kv_end(BM), kv_tiles = (kv_end + BN - 1) / BN;
    const int t_first = split.first(kv_tiles), t_end = split.end(kv_tiles);
    TileLoader<T, NTHREADS> loader{qt.table, kv_end};
    auto issue = [&](int stage, int t) {
        loader.issue(k_tile(stage), v_tile(stage), k_cache, v_cache, t * BN, qt.bs_shift, nkv, qt.kvh);
    };
    loader.fetch(t_first * BN, qt.bs_shift);
    if (t_first < t_end) issue(0, t_first);
    cp_async_commit();
    loader.fetch((t_first + 1) * BN, qt.bs_shift);

    int qi[2], lim[2];
    qt.lane_rows(qt.first_row + wg * 64 + warp * 16 + r, qi, lim);
    // Tile t's P V is waited for with tile t + 1's S = Q K^T, so it runs while the warpgroup
    // waits for tile t + 1 and the block's barrier. Tile t + 1's loads go into the stage of
    // tile t - 1 once every warpgroup has waited for that tile's P V (the second barrier).
    float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    uint32_t hi[BN / 16][4], lo[BN / 16][4];   // P as operands: read by the wgmmas until their wait
    const uint64_t q_desc = tile_descriptor(qs + wg * 64 * ROW);
    for (int t = t_first; t < t_end; ++t) {
        const int kv0 = t * BN, stage = (t - t_first) & 1;
        cp_async_wait<0>();       // this thread's copies of tile t have landed ...
        fence_async_proxy();      // ... visible to the tensor cores ...
        __syncthreads();          // ... and everyone's
        const uint64_t k_desc = smem_descriptor(k_tile(stage)), v_desc = smem_descriptor(v_tile(stage));

        float s[BN / 8][4];       // S = Q K^T: 4 steps of 16 dims (2 descriptor units of 16 bytes each)
        wgmma_fence();
#pragma unroll
        for (int k16 = 0; k16 < D / 16; ++k16) Wgmma<T>::ss(s, q_desc + 2 * k16, k_desc + 2 * k16, k16 > 0);
        wgmma_commit();
        wgmma_wait<0>();          // S, and the previous tile's P V
        fence_registers(s);
        fence_registers(o);
        __syncthreads();          // every warpgroup's previous P V is done: its stage may be refilled
        if (t + 1 < t_end) issue(stage ^ 1, t + 1);
        cp_async_commit();
        loader.fetch((t + 2) * BN, qt.bs_shift);
        softmax_step<D>(s, m, l, o, lim, kv0, cq, kv0 + BN - 1 > qt.visible_to_all(), scale_log2);

#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) p_operands<T>(s, kk, hi[kk], lo[kk]);
        wgmma_fence();
        p_times_v<T>(o, hi, lo, v_desc);
        wgmma_commit();
    }
    cp_async_wait<0>();       // a part without keys: Q's copies
    wgmma_wait<0>();
    fence_registers(o);
    if constexpr (SPLIT) if (split.parts > 1) {
        const int64_t slot = ((int64_t)blockIdx.y * split_rows + split.tile) * nh + h;
        if (!merge_parts<D, NTHREADS>(o, m, l, partials + slot * parts * (D / 2 + 4) * NTHREADS, counters + slot,
                                      split.part, parts))
            return;
    }
    store_rows<T, D>(o, l, qi, qt.n, out, qt.q0, nh, h, cq);
#else
    __trap();
#endif
}

// The wgmma kernel, warp-specialized: warpgroup 0 only loads (Q, then K/V tiles into
// WS_STAGES stages), warpgroups 1 .. CW only compute, 64 query rows each (BM = 64 CW). They
// meet at mbarriers, not block barriers: a stage's `full` barrier completes once the loaders'
// copies into it have landed (each loader waits for its own, fences them for the tensor cores
// and arrives), its `empty` one once every computing warpgroup is done reading it. A consumer issues tile
// t's S = Q K^T and tile t - 1's P V together and runs tile t's softmax while P V is on the
// tensor cores; the output is rescaled after it. One block an SM (128 (CW + 1) threads); the
// same grid, split and results as attn_prefill_wgmma at WG = CW.
// KN = 128 keys a K/V tile (the tall tiles' default, prefill_ws_keys): S is one m64n128k16
// multiply a 16-dim step, and a consumer waits for each tile's P V before the next S (overlapping
// two tiles would take ~180 registers); the three consumers overlap one another instead. Its
// consumers need more than 128 registers: the loaders give some back (setmaxnreg) and the
// consumers take WS_WIDE_REGS, without spills.
constexpr int WS_STAGES = 4, WS_LOADER_REGS = 56, WS_WIDE_REGS = 144;
template <typename T, int CW, bool SPLIT, int KN = BN, int STAGES = WS_STAGES>
__device__ void attn_prefill_ws(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                                const T* __restrict__ v_cache, const int* __restrict__ block_tables, int max_blocks,
                                const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                                T* __restrict__ out, int nh, int nkv, int bs, float scale_log2, int split_rows,
                                int parts, float* partials, int* counters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = 64, BM = 64 * CW, LOADERS = 128, CONSUMERS = 128 * CW, ROW = D * 2, TILE = KN * ROW;
    constexpr int ALIGN = 1024;
    constexpr bool WIDE = KN != BN;
    static_assert(KN == BN || (KN == 2 * BN && CW == 3), "128-key tiles: the 192-row kernel, one block an SM");
    extern __shared__ unsigned char smem_unaligned[];
    unsigned char* smem = smem_unaligned + (-smem_address(smem_unaligned) & (ALIGN - 1));
    unsigned char* qs = smem;                                                  // [BM rows]
    const uint32_t kv_stages = smem_address(smem + BM * ROW);                 // [STAGES][K, V]
    const uint32_t bars = kv_stages + STAGES * 2 * TILE;                      // full[STAGES], empty[STAGES]
    auto k_tile = [&](int stage) { return kv_stages + 2 * stage * TILE; };
    auto v_tile = [&](int stage) { return k_tile(stage) + TILE; };
    auto full = [&](int stage) { return bars + 8 * stage; };
    auto empty = [&](int stage) { return bars + 8 * (STAGES + stage); };

    const KeySplit split = KeySplit::of_block<SPLIT>(split_rows, parts);
    const QueryTile qt = QueryTile::of_block(BM, split.tile, split.tiles, block_tables, max_blocks, seq_lens,
                                             query_start_loc, nh, nkv, bs);
    if (qt.first_row >= qt.n) return;
    if (threadIdx.x == 0)
        for (int stage = 0; stage < STAGES; ++stage) {
            mbarrier_init(full(stage), LOADERS);
            mbarrier_init(empty(stage), CONSUMERS);
        }
    __syncthreads();
    const int kv_end = qt.kv_end(BM), kv_tiles = (kv_end + KN - 1) / KN;
    const int t_first = split.first(kv_tiles), tiles = split.end(kv_tiles) - t_first;
    // The warpgroup as a value the compiler knows is the same across a warp (a shuffle's): it
    // would otherwise see the wgmmas below on a divergent path and serialize them.
    const int h = blockIdx.x, wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

    if (wg == 0) {   // the loaders: Q's rows with tile 0, then a tile a stage, each signalled once it landed
        if constexpr (WIDE) setmaxnreg_dec<WS_LOADER_REGS>();
        qt.copy_queries<BM>(qs, q, q_stride, h, threadIdx.x, LOADERS);
        TileLoader<T, LOADERS, KN> loader{qt.table, kv_end};
        loader.fetch(t_first * KN, qt.bs_shift);
        for (int i = 0; i < tiles; ++i) {
            const int stage = i % STAGES;
            if (i >= STAGES) mbarrier_wait(empty(stage), (i / STAGES - 1) & 1);
            loader.issue(k_tile(stage), v_tile(stage), k_cache, v_cache, (t_first + i) * KN, qt.bs_shift, nkv,
                         qt.kvh);
            cp_async_commit();
            loader.fetch((t_first + i + 1) * KN, qt.bs_shift);
            if (i > 0) {              // tile i - 1 has landed: visible to the tensor cores, signalled
                cp_async_wait<1>();
                fence_async_proxy();
                mbarrier_arrive(full((i - 1) % STAGES));
            }
        }
        cp_async_wait<0>();
        fence_async_proxy();
        if (tiles > 0) mbarrier_arrive(full((tiles - 1) % STAGES));
        return;
    }

    if constexpr (WIDE) setmaxnreg_inc<WS_WIDE_REGS>();
    const int cw = wg - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int r = lane / 4, cq = (lane % 4) * 2;
    int qi[2], lim[2];
    qt.lane_rows(qt.first_row + cw * 64 + warp * 16 + r, qi, lim);
    float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    uint32_t hi[KN / 16][4], lo[KN / 16][4];   // P of a tile, read by its P V until the wait
    const uint64_t q_desc = tile_descriptor(qs + cw * 64 * ROW);
    auto pv = [&](int stage) {                 // O += P V of the tile in `stage`, a commit group
        p_times_v<T>(o, hi, lo, smem_descriptor(v_tile(stage)));
        wgmma_commit();
    };
    // Tile i's S = Q K^T into s, once its stage is full.
    auto scores = [&](float (&s)[KN / 8][4], int i) {
        mbarrier_wait(full(i % STAGES), (i / STAGES) & 1);
        const uint64_t k_desc = smem_descriptor(k_tile(i % STAGES));
        wgmma_fence();
#pragma unroll
        for (int k16 = 0; k16 < D / 16; ++k16) Wgmma<T>::ss(s, q_desc + 2 * k16, k_desc + 2 * k16, k16 > 0);
        wgmma_commit();
    };
    auto masked = [&](int i) { return (t_first + i + 1) * KN - 1 > qt.visible_to_all(); };
    if constexpr (WIDE) {   // a tile at a time: S, its softmax, then its P V, waited for
        for (int i = 0; i < tiles; ++i) {
            float s[KN / 8][4], corr[2];
            scores(s, i);
            wgmma_wait<0>();
            fence_registers(s);
            if (softmax_scores(s, m, l, corr, lim, (t_first + i) * KN, cq, masked(i), scale_log2))
                rescale<D>(o, corr);
#pragma unroll
            for (int kk = 0; kk < KN / 16; ++kk) p_operands<T>(s, kk, hi[kk], lo[kk]);
            wgmma_fence();
            pv(i % STAGES);
            wgmma_wait<0>();
            fence_registers(o);
            mbarrier_arrive(empty(i % STAGES));
        }
    } else {
        // The wgmmas sit on no branch the compiler cannot see is taken by the whole warpgroup
        // (it serializes them there): the first tile is peeled off the loop, and a part without
        // keys (tiles == 0) leaves the loop at once with everything waited for.
        if (tiles > 0) {
            float s[KN / 8][4], corr[2];
            scores(s, 0);
            wgmma_wait<0>();
            fence_registers(s);
            softmax_scores(s, m, l, corr, lim, t_first * KN, cq, masked(0), scale_log2);   // o is 0: no rescale
#pragma unroll
            for (int kk = 0; kk < KN / 16; ++kk) p_operands<T>(s, kk, hi[kk], lo[kk]);
        }
        for (int i = 1; i < tiles; ++i) {
            float s[KN / 8][4], corr[2];
            scores(s, i);
            pv((i - 1) % STAGES);
            wgmma_wait<1>();              // S (P V of tile i - 1 may still run)
            fence_registers(s);
            const bool moved = softmax_scores(s, m, l, corr, lim, (t_first + i) * KN, cq, masked(i), scale_log2);
            wgmma_wait<0>();              // P V of tile i - 1: its stage is read
            fence_registers(o);
            mbarrier_arrive(empty((i - 1) % STAGES));
            if (moved) rescale<D>(o, corr);
#pragma unroll
            for (int kk = 0; kk < KN / 16; ++kk) p_operands<T>(s, kk, hi[kk], lo[kk]);
        }
        if (tiles > 0) {
            wgmma_fence();
            pv((tiles - 1) % STAGES);
        }
        wgmma_wait<0>();
        fence_registers(o);
    }
    if constexpr (SPLIT) if (split.parts > 1) {
        const int64_t slot = ((int64_t)blockIdx.y * split_rows + split.tile) * nh + h;
        if (!merge_parts<D, CONSUMERS, LOADERS>(o, m, l, partials + slot * parts * (D / 2 + 4) * CONSUMERS,
                                                counters + slot, split.part, parts))
            return;
    }
    store_rows<T, D>(o, l, qi, qt.n, out, qt.q0, nh, h, cq);
#else
    __trap();
#endif
}

// MT = 2 (128-row tiles) for long prompts at d = 64; MT = 1 (64 rows) for short queries and
// for d = 128, whose fragments would not fit twice in the registers.
#define PREFILL(T, N, D, MT)                                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) attn_prefill_##N##_d##D##_m##MT(                 \
        const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, const int* block_tables,            \
        int max_blocks, const int* seq_lens, const int* query_start_loc, T* out, int nh, int nkv, int bs,      \
        float scale_log2) {                                                                                    \
        pdl_start();                                                                                           \
        attn_prefill<T, D, MT>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens,              \
                               query_start_loc, out, nh, nkv, bs, scale_log2);                                 \
    }
#define PREFILL_ALL(T, N) PREFILL(T, N, 64, 1) PREFILL(T, N, 64, 2) PREFILL(T, N, 128, 1)
FOR_EACH_DTYPE(PREFILL_ALL)

// One extern "C" entry of a wgmma prefill kernel, attn_prefill_<KIND><dtype>_d64_m<M>: KIND
// names the kernel and whether it splits keys (the _split_ kernel splits the keys of each
// sequence's first split_rows tiles; the plain one leaves those parameters unused, one
// signature for both, and its code has no trace of the split). THREADS a block, BLOCKS an SM;
// CALL is the kernel's device function.
#define PREFILL_WGMMA_ENTRY(T, N, KIND, M, THREADS, BLOCKS, CALL)                                             \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS) attn_prefill_##KIND##N##_d64_m##M(           \
        const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, const int* block_tables,             \
        int max_blocks, const int* seq_lens, const int* query_start_loc, T* out, int nh, int nkv, int bs,      \
        float scale_log2, int split_rows, int parts, float* partials, int* counters) {                         \
        pdl_start();                                                                                           \
        CALL(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens, query_start_loc, out, nh, nkv, \
             bs, scale_log2, split_rows, parts, partials, counters);                                           \
    }
// attn_prefill_wgmma: 128 registers a thread at most, so an SM holds 4 / WG blocks.
#define PREFILL_WG(T, N, WG)                                                                                   \
    PREFILL_WGMMA_ENTRY(T, N, wg_, WG, 128 * WG, 4 / WG, (attn_prefill_wgmma<T, WG, false>))                   \
    PREFILL_WGMMA_ENTRY(T, N, wg_split_, WG, 128 * WG, 4 / WG, (attn_prefill_wgmma<T, WG, true>))
PREFILL_WG(bf16, bf16, 1) PREFILL_WG(bf16, bf16, 2) PREFILL_WG(f16, f16, 1) PREFILL_WG(f16, f16, 2)
// attn_prefill_ws: a loading warpgroup and CW computing ones, BLOCKS an SM (128 registers a
// thread at most either way): one block of 192 rows (tall tiles), two of 64 (short queries).
#define PREFILL_WS(T, N, CW, BLOCKS)                                                                           \
    PREFILL_WGMMA_ENTRY(T, N, ws_, CW, 128 * (CW + 1), BLOCKS, (attn_prefill_ws<T, CW, false>))                \
    PREFILL_WGMMA_ENTRY(T, N, ws_split_, CW, 128 * (CW + 1), BLOCKS, (attn_prefill_ws<T, CW, true>))
PREFILL_WS(bf16, bf16, 3, 1) PREFILL_WS(f16, f16, 3, 1) PREFILL_WS(bf16, bf16, 1, 2) PREFILL_WS(f16, f16, 1, 2)
// ... and the 192-row kernel on 128-key tiles (KN = 128), attn_prefill_ws128_<dtype>_d64_m3.
#define PREFILL_WS128(T, N)                                                                                    \
    PREFILL_WGMMA_ENTRY(T, N, ws128_, 3, 512, 1, (attn_prefill_ws<T, 3, false, 2 * BN>))                       \
    PREFILL_WGMMA_ENTRY(T, N, ws128_split_, 3, 512, 1, (attn_prefill_ws<T, 3, true, 2 * BN>))
PREFILL_WS128(bf16, bf16) PREFILL_WS128(f16, f16)
