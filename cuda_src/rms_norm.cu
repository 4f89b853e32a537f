// Fused residual add + RMSNorm, rounding exactly where torch_ops does:
//   r = x (+ residual), rounded to T;   out = weight * T(r * rsqrt(mean(r^2) + eps)).
// Launch: grid = rows, block = 256 threads; each thread strides over the row.
#include "common.cuh"

template <typename T>
__device__ void rms_norm(const T* __restrict__ x, const T* __restrict__ residual, const T* __restrict__ weight,
                         T* __restrict__ out, T* __restrict__ res_out, int H, float eps) {
    __shared__ float scratch[32];
    const int64_t base = (int64_t)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float r = to_float(x[base + i]);
        if (residual) {
            T rt = from_float<T>(r + to_float(residual[base + i]));
            res_out[base + i] = rt;
            r = to_float(rt);
        }
        ss += r * r;
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / H + eps);
    // Each thread re-reads only what it wrote itself above, so no barrier is needed.
    const T* r = residual ? res_out : x;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float normed = to_float(from_float<T>(to_float(r[base + i]) * inv));
        out[base + i] = from_float<T>(to_float(weight[i]) * normed);
    }
}

#define RMS_NORM(T, N)                                                                              \
    extern "C" __global__ void rms_norm_##N(const T* x, const T* residual, const T* weight, T* out, \
                                            T* res_out, int H, float eps) {                         \
        rms_norm<T>(x, residual, weight, out, res_out, H, eps);                                     \
    }
FOR_EACH_DTYPE(RMS_NORM)
