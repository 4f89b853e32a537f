// Causal paged attention for a variable-length batch of multi-token queries
// (prefill and chunked prefill), flash-attention style on the tensor cores.
//
// One block per (64-query tile, query head, sequence); 4 warps, each owning 16
// query rows. K/V tiles of 64 keys are gathered through the block table into
// shared memory as 16-bit operands; S = Q K^T and O += P V use mma.sync m16n8k16
// (fp16 operands for fp16 storage, bf16 otherwise; fp32 accumulate) with an online
// softmax in registers. Query j of a sequence with
// n new tokens and context L sits at position L - n + j and sees keys <= it.
// fp32 inputs are rounded to bf16 for the matrix products (accumulation stays fp32).
// Launch: grid = (ceil(max_query_len / 64), nh, B), block = 128, static smem.
#include "common.cuh"

namespace {
constexpr int BM = 64, BN = 64, THREADS = 128, PAD = 8;  // PAD: 16 bytes per row against bank conflicts
}

// c += a b on the tensor cores, fp32 accumulation; Op (bf16 or f16) is the operand type.
template <typename Op>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<bf16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<f16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (a, b) as two operand pairs: hi = Op(a, b), lo = Op of what hi missed.
template <typename Op>
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack2<Op>(a, b);
    const float2 h = unpack2<Op>(hi);
    lo = pack2<Op>(a - h.x, b - h.y);
}

// B operand (k = key, n = dim) of P V from a row-major [key][dim] tile: a transposing
// 8x8 matrix load; lanes 0-15 give the addresses of the 16 key rows.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& b0, uint32_t& b1, const void* row) {
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(addr));
}

template <typename T, int D, typename Op = typename Operand<T>::type>
__device__ void attn_prefill(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                             const T* __restrict__ v_cache, const int* __restrict__ block_tables, int max_blocks,
                             const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                             T* __restrict__ out, int nh, int nkv, int bs, float scale_log2) {
    constexpr int LD = D + PAD;
    __shared__ __align__(16) Op ks[BN][LD];
    __shared__ __align__(16) Op vs[BN][LD];

    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = query_start_loc[b], n = query_start_loc[b + 1] - q0, L = seq_lens[b];
    if (tile * BM >= n) return;
    const int kvh = h / (nh / nkv);
    const int* table = block_tables + (int64_t)b * max_blocks;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int r = lane / 4, cq = (lane % 4) * 2;  // fragment row / column pair of this lane

    // This lane's two query rows; lim = last visible key position, -1 for rows past n.
    const int qi[2] = {tile * BM + warp * 16 + r, tile * BM + warp * 16 + r + 8};
    int lim[2];
    uint32_t qf[D / 16][4];  // A fragments of Q, kept in registers for the whole loop
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        lim[i] = qi[i] < n ? L - n + qi[i] : -1;
        const T* row = q + (int64_t)(q0 + min(qi[i], n - 1)) * q_stride + (int64_t)h * D;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            qf[kk][i] = load2_as<Op>(row + kk * 16 + cq);
            qf[kk][i + 2] = load2_as<Op>(row + kk * 16 + cq + 8);
        }
    }

    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    const int kv_end = L - n + min(n, (tile + 1) * BM);  // one past the tile's last visible key
    for (int kv0 = 0; kv0 < kv_end; kv0 += BN) {
        __syncthreads();  // the previous tile's smem reads are done
        for (int idx = tid; idx < BN * D / 8; idx += THREADS) {
            const int row = idx / (D / 8), c = (idx % (D / 8)) * 8, j = kv0 + row;
            uint4 kw = make_uint4(0, 0, 0, 0), vw = kw;
            if (j < kv_end) {
                const int64_t off = (((int64_t)table[j / bs] * bs + j % bs) * nkv + kvh) * D + c;
                kw = load8_as<Op>(k_cache + off);
                vw = load8_as<Op>(v_cache + off);
            }
            *reinterpret_cast<uint4*>(&ks[row][c]) = kw;
            *reinterpret_cast<uint4*>(&vs[row][c]) = vw;
        }
        __syncthreads();

        float s[BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
                mma<Op>(s[nt], qf[kk], load2_as<Op>(&ks[nt * 8 + r][kk * 16 + cq]),
                        load2_as<Op>(&ks[nt * 8 + r][kk * 16 + cq + 8]));
        }

        // Causal mask and online softmax (base 2). Element e of tile nt: row e / 2, key cq + e % 2.
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = kv0 + nt * 8 + cq + (e & 1);
                s[nt][e] = j <= lim[e / 2] ? s[nt][e] * scale_log2 : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
            }
        float base[2], corr[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            base[i] = mx[i] == -INFINITY ? 0.f : mx[i];  // fully masked row: keep exp2 finite
            corr[i] = exp2f(m[i] - base[i]);
            m[i] = mx[i];
            l[i] *= corr[i];
        }
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = exp2f(s[nt][e] - base[e / 2]);
                l[e / 2] += s[nt][e];  // per-lane partial; summed over the quad at the end
            }
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[dt][0] *= corr[0]; o[dt][1] *= corr[0];
            o[dt][2] *= corr[1]; o[dt][3] *= corr[1];
        }

        // O += P V: two adjacent S tiles form one A fragment (the accumulator layout matches).
        // P goes in as two operand terms, hi + lo, so P V sees P to ~16 mantissa bits,
        // as close to the float32 reference as the cost of one more mma allows.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float* p = s[2 * kk + i / 2] + 2 * (i % 2);
                split2<Op>(p[0], p[1], hi[i], lo[i]);
            }
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                uint32_t b0, b1;
                ldmatrix_x2_trans(b0, b1, &vs[kk * 16 + (lane % 16)][dt * 8]);
                mma<Op>(o[dt], hi, b0, b1);
                mma<Op>(o[dt], lo, b0, b1);
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        if (qi[i] >= n) continue;
        T* row = out + ((int64_t)(q0 + qi[i]) * nh + h) * D;
        const float inv = 1.f / l[i];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            row[dt * 8 + cq] = from_float<T>(o[dt][2 * i] * inv);
            row[dt * 8 + cq + 1] = from_float<T>(o[dt][2 * i + 1] * inv);
        }
    }
}

#define PREFILL(T, N, D)                                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) attn_prefill_##N##_d##D(                          \
        const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, const int* block_tables,          \
        int max_blocks, const int* seq_lens, const int* query_start_loc, T* out, int nh, int nkv, int bs,    \
        float scale_log2) {                                                                                  \
        attn_prefill<T, D>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens,                \
                           query_start_loc, out, nh, nkv, bs, scale_log2);                                   \
    }
#define PREFILL_ALL(T, N) PREFILL(T, N, 64) PREFILL(T, N, 128)
FOR_EACH_DTYPE(PREFILL_ALL)
