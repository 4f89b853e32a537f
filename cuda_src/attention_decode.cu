// Paged attention for one-token queries (decode), split over the KV length.
//
// attn_decode: one block per (split, kv head, sequence). The block serves all
// G = nh / nkv query heads of its KV head, so each K/V row is read from memory
// once. 128 threads = 16 key lanes x 8 dim lanes: one step covers 16 keys, each
// key's d-vector spread over 8 threads in 16-byte pieces (coalesced rows).
//   pass 1: scores q.k for the split's keys -> shared memory (G x partition floats);
//   softmax statistics per head from shared memory;
//   pass 2: p-weighted sum of V rows, reduced over the 16 key lanes.
// One split: the normalised output is written directly. Several: unnormalised
// partial sums plus (max, sum) go to a workspace and attn_decode_reduce combines them.
// Launch: grid = (splits, nkv, B), block = 128, dynamic smem = G * partition * 4 bytes.
//
// attn_decode_reduce: grid = (nh, B), block = d threads.
#include "common.cuh"

namespace {
constexpr int THREADS = 128, DIM_LANES = 8, KEY_LANES = THREADS / DIM_LANES;
constexpr int MAX_PARTITION = 1024, MIN_BLOCK_SIZE = 8;  // the host keeps to these
constexpr int MAX_SPLIT_BLOCKS = MAX_PARTITION / MIN_BLOCK_SIZE + 1;
}

// Rows in flight per thread: 16-byte words are cheap to hold, so 16-bit caches keep
// twice as many loads outstanding as float ones. Rows stay packed until used.
template <typename T> __host__ __device__ constexpr int unroll() { return sizeof(T) == 4 ? 4 : 8; }
template <typename T, int DPT> struct Row { uint4 w[DPT * sizeof(T) / 16]; };

// Issues the loads of this thread's DPT dims of unroll() consecutive steps' rows
// (zeros past `end`) before any is used. `blocks` is the split's slice of the block
// table in shared memory, starting at block `first`.
template <typename T, int D, int DPT>
__device__ __forceinline__ void load_rows(Row<T, DPT> (&rows)[unroll<T>()], const T* cache, const int* blocks,
                                          int first, int bs_shift, int nkv, int kvh, int j0, int end, int d0) {
#pragma unroll
    for (int u = 0; u < unroll<T>(); ++u) {
        const int j = j0 + u * KEY_LANES + threadIdx.x / DIM_LANES;
#pragma unroll
        for (int w = 0; w < DPT * (int)sizeof(T) / 16; ++w) rows[u].w[w] = make_uint4(0, 0, 0, 0);
        if (j < end) {
            const int64_t slot = ((int64_t)blocks[(j >> bs_shift) - first] << bs_shift) + (j & ((1 << bs_shift) - 1));
            const uint4* p = reinterpret_cast<const uint4*>(cache + (slot * nkv + kvh) * D + d0);
#pragma unroll
            for (int w = 0; w < DPT * (int)sizeof(T) / 16; ++w) rows[u].w[w] = p[w];
        }
    }
}

template <typename T, int DPT>
__device__ __forceinline__ void unpack(const Row<T, DPT>& row, float (&f)[DPT]) {
#pragma unroll
    for (int c = 0; c < DPT; c += 8) load8(reinterpret_cast<const T*>(&row.w[c * sizeof(T) / 16]), &f[c]);
}

template <typename T, int D, int GMAX>
__device__ void attn_decode(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                            const T* __restrict__ v_cache, const int* __restrict__ block_tables, int max_blocks,
                            const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                            T* __restrict__ out, float* __restrict__ part_o, float2* __restrict__ part_ml,
                            int nh, int nkv, int bs, int partition, int splits, float scale) {
    constexpr int DPT = D / DIM_LANES;
    extern __shared__ float scores[];              // [G][partition]
    __shared__ __align__(16) float qs[GMAX][D];    // pre-scaled queries
    __shared__ float red[THREADS / 32][GMAX][D];   // cross-warp reduction of pass 2
    __shared__ float stat_m[GMAX], stat_l[GMAX];
    __shared__ int blocks[MAX_SPLIT_BLOCKS];       // the split's block-table slice

    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int G = nh / nkv;
    const int L = seq_lens[b];
    const int start = split * partition, end = min(L, start + partition);
    if (start >= end) return;  // this split lies past the sequence: the reduce skips it
    const int tok = query_start_loc[b];
    const int* table = block_tables + (int64_t)b * max_blocks;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int key_lane = tid / DIM_LANES, d0 = (tid % DIM_LANES) * DPT;

    for (int i = tid; i < G * D; i += THREADS)
        qs[i / D][i % D] = to_float(q[tok * q_stride + (int64_t)(kvh * G) * D + i]) * scale;
    // Row addresses then need no dependent global load of the block table.
    const int bs_shift = __ffs(bs) - 1;            // the host keeps bs a power of two: no divisions per row
    const int first = start >> bs_shift;
    for (int i = tid; i <= ((end - 1) >> bs_shift) - first; i += THREADS) blocks[i] = table[first + i];
    __syncthreads();

    // Pass 1: scores.
    for (int j0 = start; j0 < end; j0 += KEY_LANES * unroll<T>()) {
        Row<T, DPT> rows[unroll<T>()];
        load_rows<T, D, DPT>(rows, k_cache, blocks, first, bs_shift, nkv, kvh, j0, end, d0);
#pragma unroll
        for (int u = 0; u < unroll<T>(); ++u) {
            const int j = j0 + u * KEY_LANES + key_lane;
            float row[DPT];
            unpack(rows[u], row);
#pragma unroll
            for (int g = 0; g < GMAX; ++g) {
                if (g >= G) break;
                float s = 0.f;
#pragma unroll
                for (int c = 0; c < DPT; ++c) s += qs[g][d0 + c] * row[c];
                // The 8 dim lanes of a key are 8 consecutive lanes of one warp.
                s += __shfl_xor_sync(0xffffffffu, s, 4);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                if (d0 == 0 && j < end) scores[g * partition + j - start] = s;
            }
        }
    }
    __syncthreads();

    // Softmax statistics: one warp per head; scores become exp(s - max).
    const int n = end - start;
    for (int g = warp; g < G; g += THREADS / 32) {
        float m = -INFINITY;
        for (int i = lane; i < n; i += 32) m = fmaxf(m, scores[g * partition + i]);
        m = warp_max(m);
        float l = 0.f;
        for (int i = lane; i < n; i += 32) {
            const float p = __expf(scores[g * partition + i] - m);
            scores[g * partition + i] = p;
            l += p;
        }
        l = warp_sum(l);
        if (lane == 0) { stat_m[g] = m; stat_l[g] = l; }
    }
    __syncthreads();

    // Pass 2: acc[g] = sum_j p[g][j] * v_j over this thread's keys and dims.
    float acc[GMAX][DPT];
#pragma unroll
    for (int g = 0; g < GMAX; ++g)
#pragma unroll
        for (int c = 0; c < DPT; ++c) acc[g][c] = 0.f;
    for (int j0 = start; j0 < end; j0 += KEY_LANES * unroll<T>()) {
        Row<T, DPT> rows[unroll<T>()];
        load_rows<T, D, DPT>(rows, v_cache, blocks, first, bs_shift, nkv, kvh, j0, end, d0);
#pragma unroll
        for (int u = 0; u < unroll<T>(); ++u) {
            const int j = j0 + u * KEY_LANES + key_lane;
            if (j >= end) continue;
            float row[DPT];
            unpack(rows[u], row);
#pragma unroll
            for (int g = 0; g < GMAX; ++g) {
                if (g >= G) break;
                const float p = scores[g * partition + j - start];
#pragma unroll
                for (int c = 0; c < DPT; ++c) acc[g][c] += p * row[c];
            }
        }
    }
    // Reduce over key lanes: the 4 in a warp by shuffles, the 4 warps through smem.
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
        if (g >= G) break;
#pragma unroll
        for (int c = 0; c < DPT; ++c) {
            float a = acc[g][c];
            a += __shfl_xor_sync(0xffffffffu, a, 8);
            a += __shfl_xor_sync(0xffffffffu, a, 16);
            if (lane < DIM_LANES) red[warp][g][d0 + c] = a;
        }
    }
    __syncthreads();
    for (int i = tid; i < G * D; i += THREADS) {
        const int g = i / D, dim = i % D, h = kvh * G + g;
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) o += red[w][g][dim];
        if (splits == 1) {
            out[((int64_t)tok * nh + h) * D + dim] = from_float<T>(o / stat_l[g]);
        } else {
            const int64_t ws = ((int64_t)b * nh + h) * splits + split;
            part_o[ws * D + dim] = o;
            if (dim == 0) part_ml[ws] = make_float2(stat_m[g], stat_l[g]);
        }
    }
}

// Combines the splits of one (sequence, head): rescale each partial to the common max.
template <typename T>
__device__ void attn_decode_reduce(const float* __restrict__ part_o, const float2* __restrict__ part_ml,
                                   const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                                   T* __restrict__ out, int nh, int D, int partition, int splits) {
    const int h = blockIdx.x, b = blockIdx.y, dim = threadIdx.x;
    const int n = min(splits, (seq_lens[b] + partition - 1) / partition);
    const int64_t ws = ((int64_t)b * nh + h) * splits;
    float m = -INFINITY;
    for (int s = 0; s < n; ++s) m = fmaxf(m, part_ml[ws + s].x);
    float o = 0.f, l = 0.f;
    for (int s = 0; s < n; ++s) {
        const float w = __expf(part_ml[ws + s].x - m);
        o += w * part_o[(ws + s) * D + dim];
        l += w * part_ml[ws + s].y;
    }
    out[((int64_t)query_start_loc[b] * nh + h) * D + dim] = from_float<T>(l > 0.f ? o / l : 0.f);
}

// The model-sized case (16-bit cache, d=64, 3 heads per KV head) is held to 72
// registers so 7 blocks share an SM: more warps to hide the loads' latency.
#define BLOCKS_PER_SM(T, D, G) (sizeof(T) == 2 && D == 64 && G == 3 ? 7 : 1)
#define DECODE(T, N, D, G)                                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM(T, D, G)) attn_decode_##N##_d##D##_g##G( \
        const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, const int* block_tables,             \
        int max_blocks, const int* seq_lens, const int* query_start_loc, T* out, float* part_o,                 \
        float2* part_ml, int nh, int nkv, int bs, int partition, int splits, float scale) {                     \
        attn_decode<T, D, G>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens,                 \
                             query_start_loc, out, part_o, part_ml, nh, nkv, bs, partition, splits, scale);     \
    }
#define DECODE_ALL(T, N) \
    DECODE(T, N, 64, 3) DECODE(T, N, 64, 4) DECODE(T, N, 64, 8) DECODE(T, N, 128, 3) DECODE(T, N, 128, 4) DECODE(T, N, 128, 8)
FOR_EACH_DTYPE(DECODE_ALL)

#define DECODE_REDUCE(T, N)                                                                                   \
    extern "C" __global__ void attn_decode_reduce_##N(const float* part_o, const float2* part_ml,           \
                                                      const int* seq_lens, const int* query_start_loc, T* out, \
                                                      int nh, int D, int partition, int splits) {            \
        attn_decode_reduce<T>(part_o, part_ml, seq_lens, query_start_loc, out, nh, D, partition, splits);     \
    }
FOR_EACH_DTYPE(DECODE_REDUCE)
