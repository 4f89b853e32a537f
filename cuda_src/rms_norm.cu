// Fused residual add + RMSNorm over a float32 residual stream:
//   r = float(x) (+ residual), kept in float32;   out = weight * T(r * rsqrt(mean(r^2) + eps)).
// Keeping the residual in float32 (not the storage dtype) is what lets a bf16
// model track the float32 one: rounding it at each of the 2 x layers adds is the
// largest error source in bf16 inference of small models.
// Launch: grid = ceil(rows / ROWS_PER_BLOCK), block = 32 * ROWS_PER_BLOCK: a warp per row,
// reduced by shuffles alone; aligned rows of a multiple of 8 go 8 elements (16 bytes of
// 16-bit x) a lane at a time, held in registers between the sum and the scale.
#include "common.cuh"

namespace {
constexpr int ROWS_PER_BLOCK = 4;
// 16-byte chunks (8 elements) a lane holds in registers: a row of up to 32 * 8 * HELD = 1,024
// elements (SmolLM2's 576) is loaded once and scaled from registers after the sum, where
// re-reading res_out added a round trip. Longer rows (Llama-3.2-1B's 2,048) go a group of
// chunks at a time, re-reading res_out. HELD = 4 and the weights loaded after the sum keep the
// kernel at 56 registers: holding 8 chunks, or the weights too, cost long prefills occupancy
// (session 21, docs/performance.md).
constexpr int HELD = 4;
constexpr int GROUP = 32 * 8 * HELD;
}

template <typename T>
__device__ void rms_norm(const T* __restrict__ x, const float* __restrict__ residual, const T* __restrict__ weight,
                         T* __restrict__ out, float* __restrict__ res_out, int rows, int H, float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int64_t base = (int64_t)row * H;
    // 8-wide when every row starts 16-byte aligned (a view into another tensor may not).
    const uintptr_t addresses = (uintptr_t)x | (uintptr_t)residual | (uintptr_t)weight | (uintptr_t)out |
                                (uintptr_t)res_out;
    const bool vec = H % 8 == 0 && addresses % 16 == 0;
    float ss = 0.f;
    if (vec) {
        float r[HELD][8];
        for (int c0 = 0; c0 < H; c0 += GROUP) {
#pragma unroll
            for (int k = 0; k < HELD; ++k) {
                const int c = c0 + (k * 32 + lane) * 8;
                if (c >= H) continue;
                load8(x + base + c, r[k]);
                if (residual) {
                    float add[8];
                    load8(residual + base + c, add);
#pragma unroll
                    for (int i = 0; i < 8; ++i) r[k][i] += add[i];
                }
                store8(res_out + base + c, r[k]);
#pragma unroll
                for (int i = 0; i < 8; ++i) ss += r[k][i] * r[k][i];
            }
        }
        const float inv = rsqrtf(warp_sum(ss) / H + eps);
        // Each lane re-reads only what it wrote itself above, so no barrier is needed.
        for (int c0 = 0; c0 < H; c0 += GROUP) {
#pragma unroll
            for (int k = 0; k < HELD; ++k) {
                const int c = c0 + (k * 32 + lane) * 8;
                if (c >= H) continue;
                if (H > GROUP) load8(res_out + base + c, r[k]);
                float w[8];
                load8(weight + c, w);
#pragma unroll
                for (int i = 0; i < 8; ++i) r[k][i] = rms_normed<T>(r[k][i], inv, w[i]);
                store8(out + base + c, r[k]);
            }
        }
        return;
    }
    for (int i = lane; i < H; i += 32) {
        float r = to_float(x[base + i]);
        if (residual) r += residual[base + i];
        res_out[base + i] = r;
        ss += r * r;
    }
    const float inv = rsqrtf(warp_sum(ss) / H + eps);
    for (int i = lane; i < H; i += 32) {
        out[base + i] = from_float<T>(rms_normed<T>(res_out[base + i], inv, to_float(weight[i])));
    }
}

#define RMS_NORM(T, N)                                                                                  \
    extern "C" __global__ void rms_norm_##N(const T* x, const float* residual, const T* weight, T* out, \
                                            float* res_out, int rows, int H, float eps) {               \
        pdl_start();                                                                                    \
        rms_norm<T>(x, residual, weight, out, res_out, rows, H, eps);                                   \
    }
FOR_EACH_DTYPE(RMS_NORM)
