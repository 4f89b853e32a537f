// Causal paged attention for a variable-length batch of multi-token queries
// (prefill and chunked prefill), flash-attention 2 style on the tensor cores.
//
// One block per (query head, tile of BM queries, sequence); 4 warps, each owning
// MT m-tiles of 16 query rows (BM = 64 MT). K/V tiles of 64 keys are gathered through
// the block table into shared memory with cp.async, two stages deep, so the next
// tile's loads are in flight while the tensor cores work on this one. S = Q K^T and
// O += P V use mma.sync m16n8k16 (fp16 operands for fp16 storage, bf16 otherwise;
// fp32 accumulate) with an online softmax in registers, fragments loaded by ldmatrix.
// In bf16, P goes into P V as two operand terms, hi + lo (~16 mantissa bits, not 8):
// P rounded to bf16 alone, as flash attention does, cost greedy agreement with float32
// (60 chat prompts: 72% against the torch reference's 83%); fp16's 11 bits need no lo term. Query j of a sequence
// with n new tokens and context L sits at position L - n + j and sees keys <= it;
// only the tiles that cross that diagonal are masked.
// fp32 caches are rounded to bf16 on their way to shared memory (accumulation stays fp32).
// Launch: grid = (nh, ceil(max_query_len / BM), B), block = 128, dynamic smem =
// 2 stages x (K, V) x BN x (D + PAD) 16-bit values. grid.y runs the tiles backwards: the
// longest (last) tiles start first, and the heads of one KV head sit side by side, so
// their K/V reads meet in L2.
#include <type_traits>

#include "mma.cuh"

namespace {
constexpr int THREADS = 128, WARPS = 4, BN = 64, PAD = 8;  // PAD: 16 bytes per row against bank conflicts
constexpr int ROWS_PER_M_TILE = 64;                          // a block's query rows per m-tile of each warp
constexpr int BLOCKS_PER_SM = 2;                             // the registers of 128 threads at MT = 2 allow 2
static_assert(ROWS_PER_M_TILE == WARPS * 16, "one m16 tile per warp");
}

// (a, b) as two operand pairs: hi = Op(a, b), lo = Op of what hi missed.
template <typename Op>
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack2<Op>(a, b);
    const float2 h = unpack2<Op>(hi);
    lo = pack2<Op>(a - h.x, b - h.y);
}

template <typename Op, int D> using KVTile = Op[BN][D + PAD];

// Starts copying the K and V rows kv0 .. kv0 + BN of KV head kvh into shared memory;
// rows at or past kv_end become zeros (their weights are 0, and 0 * stale data could be NaN).
template <typename T, typename Op, int D>
__device__ __forceinline__ void load_kv_tile(KVTile<Op, D>& ks, KVTile<Op, D>& vs, const T* k_cache,
                                             const T* v_cache, const int* table, int bs_shift, int nkv, int kvh,
                                             int kv0, int kv_end) {
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

template <typename T, int D, int MT, typename Op = typename Operand<T>::type>
__device__ void attn_prefill(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                             const T* __restrict__ v_cache, const int* __restrict__ block_tables, int max_blocks,
                             const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                             T* __restrict__ out, int nh, int nkv, int bs, float scale_log2) {
    constexpr int BM = ROWS_PER_M_TILE * MT;
    extern __shared__ __align__(16) unsigned char smem[];
    KVTile<Op, D>* ks = reinterpret_cast<KVTile<Op, D>*>(smem);   // [2 stages]
    KVTile<Op, D>* vs = ks + 2;

    const int h = blockIdx.x, tile = gridDim.y - 1 - blockIdx.y, b = blockIdx.z;
    const int q0 = query_start_loc[b], n = query_start_loc[b + 1] - q0, L = seq_lens[b];
    if (tile * BM >= n) return;
    const int kvh = h / (nh / nkv), bs_shift = __ffs(bs) - 1;   // the host keeps bs a power of two
    const int* table = block_tables + (int64_t)b * max_blocks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = lane / 4, cq = (lane % 4) * 2;  // fragment row / column pair of this lane

    // This lane's query rows (two per m-tile) and the last key each sees. Rows past n
    // repeat row n - 1 (nothing is masked out entirely) and are not stored.
    int qi[MT][2], lim[MT][2];
    uint32_t qf[MT][D / 16][4];  // A fragments of Q, in registers for the whole loop
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            qi[mt][i] = tile * BM + (warp * MT + mt) * 16 + r + 8 * i;
            const int row_q = min(qi[mt][i], n - 1);
            lim[mt][i] = L - n + row_q;
            const T* row = q + (int64_t)(q0 + row_q) * q_stride + (int64_t)h * D;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                qf[mt][kk][i] = load2_as<Op>(row + kk * 16 + cq);
                qf[mt][kk][i + 2] = load2_as<Op>(row + kk * 16 + cq + 8);
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

    const int visible_to_all = L - n + tile * BM;               // keys up to here: no row of the tile masks them
    const int kv_end = L - n + min(n, (tile + 1) * BM);         // one past the tile's last visible key
    const int kv_tiles = (kv_end + BN - 1) / BN;
    load_kv_tile<T, Op, D>(ks[0], vs[0], k_cache, v_cache, table, bs_shift, nkv, kvh, 0, kv_end);
    cp_async_commit();
    for (int t = 0; t < kv_tiles; ++t) {
        const int kv0 = t * BN, stage = t & 1;
        if (t + 1 < kv_tiles)   // the other stage was last read before the previous iteration's final barrier
            load_kv_tile<T, Op, D>(ks[stage ^ 1], vs[stage ^ 1], k_cache, v_cache, table, bs_shift, nkv, kvh,
                                   kv0 + BN, kv_end);
        cp_async_commit();                  // (an empty group on the last tile keeps the count uniform)
        cp_async_wait<1>();                 // this thread's copies of tile t have landed ...
        __syncthreads();                    // ... and everyone's
        const KVTile<Op, D>& kt = ks[stage];
        const KVTile<Op, D>& vt = vs[stage];

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

        // Causal mask (tiles past the diagonal only) and online softmax, base 2.
        // Element e of tile nt: row e / 2, key cq + e % 2.
        const bool masked = kv0 + BN - 1 > visible_to_all;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float v = s[mt][nt][e] * scale_log2;
                    if (masked && kv0 + nt * 8 + cq + (e & 1) > lim[mt][e / 2]) v = -INFINITY;
                    s[mt][nt][e] = v;
                    mx[e / 2] = fmaxf(mx[e / 2], v);
                }
            float base[2], corr[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                base[i] = mx[i] == -INFINITY ? 0.f : mx[i];  // no key seen yet: keep exp2 finite
                corr[i] = exp2f(m[mt][i] - base[i]);
                m[mt][i] = mx[i];
                l[mt][i] *= corr[i];
            }
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[mt][nt][e] = exp2f(s[mt][nt][e] - base[e / 2]);
                    l[mt][e / 2] += s[mt][nt][e];  // per-lane partial; summed over the quad at the end
                }
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                o[mt][dt][0] *= corr[0]; o[mt][dt][1] *= corr[0];
                o[mt][dt][2] *= corr[1]; o[mt][dt][3] *= corr[1];
            }
        }

        // O += P V: two adjacent S tiles form one A fragment (the accumulator layout
        // matches); one ldmatrix.x4.trans gives the B fragments of two 8-dim tiles.
        constexpr bool two_terms = std::is_same<Op, bf16>::value;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t hi[MT][4], lo[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float* p = s[mt][2 * kk + i / 2] + 2 * (i % 2);
                    if constexpr (two_terms) split2<Op>(p[0], p[1], hi[mt][i], lo[mt][i]);
                    else hi[mt][i] = pack2<Op>(p[0], p[1]);
                }
#pragma unroll
            for (int d2 = 0; d2 < D / 16; ++d2) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, &vt[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][d2 * 16 + (lane >> 4) * 8]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<Op>(o[mt][2 * d2], hi[mt], vb[0], vb[1]);
                    mma<Op>(o[mt][2 * d2 + 1], hi[mt], vb[2], vb[3]);
                    if constexpr (two_terms) {
                        mma<Op>(o[mt][2 * d2], lo[mt], vb[0], vb[1]);
                        mma<Op>(o[mt][2 * d2 + 1], lo[mt], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads();   // this stage is read: the next iteration may load into it
    }

#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float sum = l[mt][i];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (qi[mt][i] >= n) continue;
            T* row = out + ((int64_t)(q0 + qi[mt][i]) * nh + h) * D;
            const float inv = 1.f / sum;
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                row[dt * 8 + cq] = from_float<T>(o[mt][dt][2 * i] * inv);
                row[dt * 8 + cq + 1] = from_float<T>(o[mt][dt][2 * i + 1] * inv);
            }
        }
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
