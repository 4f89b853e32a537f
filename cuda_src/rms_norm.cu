// Fused residual add + RMSNorm over a float32 residual stream:
//   r = float(x) (+ residual), kept in float32;   out = weight * T(r * rsqrt(mean(r^2) + eps)).
// Keeping the residual in float32 (not the storage dtype) is what lets a bf16
// model track the float32 one: rounding it at each of the 2 x layers adds is the
// largest error source in bf16 inference of small models.
// Launch: grid = rows, block = 256 threads; each thread strides over the row.
#include "common.cuh"

template <typename T>
__device__ void rms_norm(const T* __restrict__ x, const float* __restrict__ residual, const T* __restrict__ weight,
                         T* __restrict__ out, float* __restrict__ res_out, int H, float eps) {
    __shared__ float scratch[32];
    const int64_t base = (int64_t)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float r = to_float(x[base + i]);
        if (residual) r += residual[base + i];
        res_out[base + i] = r;
        ss += r * r;
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / H + eps);
    // Each thread re-reads only what it wrote itself above, so no barrier is needed.
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float normed = to_float(from_float<T>(res_out[base + i] * inv));
        out[base + i] = from_float<T>(to_float(weight[i]) * normed);
    }
}

#define RMS_NORM(T, N)                                                                                  \
    extern "C" __global__ void rms_norm_##N(const T* x, const float* residual, const T* weight, T* out, \
                                            float* res_out, int H, float eps) {                         \
        rms_norm<T>(x, residual, weight, out, res_out, H, eps);                                         \
    }
FOR_EACH_DTYPE(RMS_NORM)
