// Half-split RoPE on q and k (in place) fused with writing k and v into the
// paged KV cache at slot_mapping[t] (slot -1: padding token, not cached).
// q, k, v may be strided views into the packed qkv GEMM output: each has its own
// token stride, heads are contiguous d-vectors. Cache layout: [slots, nkv, d].
// A thread moves 16-byte vectors (8 16-bit values; floats as two): a RoPE item is one
// head's 8 values at i .. i + 7 and their partners at i + d/2 (with the table's cos and
// sin at the same offsets), a copy item 8 values of the token's v. The host requires
// d % 16 == 0 and 16-byte aligned rows (their token strides multiples of 8 values).
// Launch: 1-D, one thread per item: T x ((nh + nkv) d/16 + nkv d/8) items.
#include "common.cuh"

template <typename T>
__device__ void rope_and_cache(T* __restrict__ q, T* __restrict__ k, const T* __restrict__ v,
                               const int64_t* __restrict__ positions, const float* __restrict__ cos_sin,
                               T* __restrict__ k_cache, T* __restrict__ v_cache, const int64_t* __restrict__ slots,
                               int nh, int nkv, int d, int64_t q_stride, int64_t k_stride, int64_t v_stride,
                               int64_t items) {
    const int half = d / 2, rope_items = (nh + nkv) * (half / 8);
    const int64_t item = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (item >= items) return;
    const int64_t t = item / (rope_items + nkv * d / 8);
    const int j = (int)(item % (rope_items + nkv * d / 8));
    const int64_t slot = slots[t];
    if (j >= rope_items) {                     // v: copied to the cache as it is
        const int e = (j - rope_items) * 8;
        if (slot >= 0) {
            const uint4* from = reinterpret_cast<const uint4*>(v + t * v_stride + e);
            uint4* to = reinterpret_cast<uint4*>(v_cache + slot * nkv * d + e);
#pragma unroll
            for (int w = 0; w < (int)sizeof(T) / 2; ++w) to[w] = from[w];   // 8 values: 16 or 32 bytes
        }
        return;
    }
    const int h = j / (half / 8), i = j % (half / 8) * 8;
    const bool is_k = h >= nh;
    T* x = is_k ? k + t * k_stride + (h - nh) * d : q + t * q_stride + h * d;
    const float* cs = cos_sin + positions[t] * d;  // cos | sin, float32
    float x1[8], x2[8], c[8], s[8], o1[8], o2[8];
    load8(x + i, x1);
    load8(x + half + i, x2);
    load8(cs + i, c);
    load8(cs + half + i, s);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        o1[e] = x1[e] * c[e] - x2[e] * s[e];
        o2[e] = x2[e] * c[e] + x1[e] * s[e];
    }
    store8(x + i, o1);
    store8(x + half + i, o2);
    if (is_k && slot >= 0) {
        T* kc = k_cache + (slot * nkv + (h - nh)) * d;
        store8(kc + i, o1);
        store8(kc + half + i, o2);
    }
}

#define ROPE_CACHE(T, N)                                                                                       \
    extern "C" __global__ void rope_and_cache_##N(T* q, T* k, const T* v, const int64_t* positions,            \
                                                  const float* cos_sin, T* k_cache, T* v_cache,                \
                                                  const int64_t* slots, int nh, int nkv, int d,                \
                                                  int64_t q_stride, int64_t k_stride, int64_t v_stride,        \
                                                  int64_t items) {                                             \
        pdl_start();                                                                                           \
        rope_and_cache<T>(q, k, v, positions, cos_sin, k_cache, v_cache, slots, nh, nkv, d, q_stride, k_stride, \
                          v_stride, items);                                                                    \
    }
FOR_EACH_DTYPE(ROPE_CACHE)
