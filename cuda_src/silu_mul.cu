// SiLU-and-mul of the fused gate|up GEMM output: out = T(silu(gate)) * up,
// rounded as torch does (silu result in T, then the product in T).
// Launch: 1-D, a thread per chunk of 8 outputs, T*I/8 chunks (host requires I % 8 == 0): a
// prefill's ~10^6 threads keep the most loads in flight (a grid-stride loop over 8 blocks an
// SM took 24.5 us at 8,000 x 1,536, 3 TB/s).
#include "common.cuh"

template <typename T>
__device__ void silu_and_mul(const T* __restrict__ x, T* __restrict__ out, int I, int64_t chunks) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= chunks) return;
    const int per_row = I / 8;
    const int64_t t = c / per_row;
    const int j = (int)(c % per_row) * 8;
    float g[8], u[8], o[8];
    load8(x + t * 2 * I + j, g);
    load8(x + t * 2 * I + I + j, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = silu_times<T>(g[i], u[i]);
    store8(out + t * I + j, o);
}

#define SILU_MUL(T, N)                                                                      \
    extern "C" __global__ void silu_and_mul_##N(const T* x, T* out, int I, int64_t chunks) { \
        pdl_start();                                                                        \
        silu_and_mul<T>(x, out, I, chunks);                                                 \
    }
FOR_EACH_DTYPE(SILU_MUL)
