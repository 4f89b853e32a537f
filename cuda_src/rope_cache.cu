// Half-split RoPE on q and k (in place) fused with writing k and v into the
// paged KV cache at slot_mapping[t] (slot -1: padding token, not cached).
// q, k, v may be strided views into the packed qkv GEMM output: each has its own
// token stride, heads are contiguous d-vectors. Cache layout: [slots, nkv, d].
// Launch: grid = T tokens, block = 128 threads over (head, i < d/2) pairs.
#include "common.cuh"

template <typename T>
__device__ void rope_and_cache(T* __restrict__ q, T* __restrict__ k, const T* __restrict__ v,
                               const int64_t* __restrict__ positions, const float* __restrict__ cos_sin,
                               T* __restrict__ k_cache, T* __restrict__ v_cache, const int64_t* __restrict__ slots,
                               int nh, int nkv, int d, int64_t q_stride, int64_t k_stride, int64_t v_stride) {
    const int64_t t = blockIdx.x;
    const int half = d / 2;
    const float* cs = cos_sin + positions[t] * d;  // cos | sin, float32
    const int64_t slot = slots[t];
    for (int idx = threadIdx.x; idx < (nh + nkv) * half; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        const bool is_k = h >= nh;
        T* x = is_k ? k + t * k_stride + (h - nh) * d : q + t * q_stride + h * d;
        const float c = cs[i], s = cs[half + i];
        const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
        const T o1 = from_float<T>(x1 * c - x2 * s), o2 = from_float<T>(x2 * c + x1 * s);
        x[i] = o1;
        x[i + half] = o2;
        if (is_k && slot >= 0) {
            T* kc = k_cache + (slot * nkv + (h - nh)) * d;
            kc[i] = o1;
            kc[i + half] = o2;
        }
    }
    if (slot >= 0)
        for (int idx = threadIdx.x; idx < nkv * d; idx += blockDim.x)
            v_cache[slot * nkv * d + idx] = v[t * v_stride + idx];
}

#define ROPE_CACHE(T, N)                                                                                       \
    extern "C" __global__ void rope_and_cache_##N(T* q, T* k, const T* v, const int64_t* positions,            \
                                                  const float* cos_sin, T* k_cache, T* v_cache,                \
                                                  const int64_t* slots, int nh, int nkv, int d,                \
                                                  int64_t q_stride, int64_t k_stride, int64_t v_stride) {      \
        pdl_start();                                                                                            \
        rope_and_cache<T>(q, k, v, positions, cos_sin, k_cache, v_cache, slots, nh, nkv, d, q_stride, k_stride, \
                          v_stride);                                                                           \
    }
FOR_EACH_DTYPE(ROPE_CACHE)
