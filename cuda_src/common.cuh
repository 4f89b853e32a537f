// Helpers shared by every kernel: dtype conversion, 8-wide vector loads/stores,
// warp/block reductions and the counter-based hash used by the sampler.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;
typedef __half f16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(f16 x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
// Round to nearest even, as torch does when it casts float32 to bf16.
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }

// Two 16-bit floats in one register (lower index in the low half): the operand
// format of the tensor-core instructions. T2 is the pair type of a 16-bit T.
template <typename T> struct Pair;
template <> struct Pair<bf16> {
    typedef __nv_bfloat162 type;
    static __device__ __forceinline__ type make(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
    // bf16 is the top half of a float: one shift or mask an element (the intrinsic
    // __bfloat1622float2 spends a permute and a shift on the upper one).
    static __device__ __forceinline__ float2 to_float2(type h) {
        const uint32_t u = *reinterpret_cast<uint32_t*>(&h);
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    }
};
template <> struct Pair<f16> {
    typedef __half2 type;
    static __device__ __forceinline__ type make(float lo, float hi) { return __floats2half2_rn(lo, hi); }
    static __device__ __forceinline__ float2 to_float2(type h) { return __half22float2(h); }
};

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    typename Pair<T>::type h = Pair<T>::make(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t u) {
    return Pair<T>::to_float2(*reinterpret_cast<typename Pair<T>::type*>(&u));
}

// Eight consecutive elements as floats. 16-bit types: one 16-byte load; float: two.
// The pointer must be 16-byte aligned (callers index in multiples of 8 elements).
template <typename T> __device__ __forceinline__ void load8(const T* p, float* f) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 t = unpack2<T>(w[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
template <> __device__ __forceinline__ void load8<float>(const float* p, float* f) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
template <typename T> __device__ __forceinline__ void store8(T* p, const float* f) {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack2<T>(f[0], f[1]), pack2<T>(f[2], f[3]),
                                              pack2<T>(f[4], f[5]), pack2<T>(f[6], f[7]));
}
template <> __device__ __forceinline__ void store8<float>(float* p, const float* f) {
    reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// Tensor-core operand type of a storage type: f16 stays f16; bf16 and float go in as bf16.
template <typename T> struct Operand { typedef bf16 type; };
template <> struct Operand<f16> { typedef f16 type; };

// Two / eight consecutive elements of T as operand-type pairs.
template <typename Op, typename T> __device__ __forceinline__ uint32_t load2_as(const T* p) {
    return pack2<Op>(to_float(p[0]), to_float(p[1]));
}
template <> __device__ __forceinline__ uint32_t load2_as<bf16, bf16>(const bf16* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}
template <> __device__ __forceinline__ uint32_t load2_as<f16, f16>(const f16* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}
template <typename Op, typename T> __device__ __forceinline__ uint4 load8_as(const T* p) {
    float f[8];
    load8(p, f);
    return make_uint4(pack2<Op>(f[0], f[1]), pack2<Op>(f[2], f[3]), pack2<Op>(f[4], f[5]), pack2<Op>(f[6], f[7]));
}
template <> __device__ __forceinline__ uint4 load8_as<bf16, bf16>(const bf16* p) {
    return *reinterpret_cast<const uint4*>(p);
}
template <> __device__ __forceinline__ uint4 load8_as<f16, f16>(const f16* p) {
    return *reinterpret_cast<const uint4*>(p);
}

// The elementwise ops that the norm, SiLU and gemv kernels share, rounded in one place so
// that a gemv kernel's fused x' is bit for bit the separate op's output (before its last
// rounding to T):
//   RMSNorm: weight * T(r * inv_rms);   SiLU-and-mul: T(silu(gate)) * up, as torch rounds it.
template <typename T> __device__ __forceinline__ float rms_normed(float r, float inv_rms, float weight) {
    return weight * to_float(from_float<T>(r * inv_rms));
}
// silu as gate / (1 + 2^(-gate log2 e)) in the MUFU's fast exponential and reciprocal, both
// flushing subnormals (ex2.approx.ftz, rcp.approx.ftz: one instruction each, where __expf adds
// a range test and two multiplies a value and __frcp_rn a called slow path): within a few
// float ulps of the IEEE expression, far inside the 16-bit rounding that follows. The called
// path's branch kept ptxas from interleaving the 64 values a thread of gemm_tma's fused
// epilogue: 64 serial chains, longer than the other warpgroup's multiplies (session 44).
// Where 2^(-gate log2 e) would be subnormal, 1 + it is 1 either way; below gate = -87.3 the
// reciprocal flushes to 0, and so does the result, as the true value rounds to.
__device__ __forceinline__ float ex2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float silu(float gate) { return gate * rcp_approx(1.f + ex2_approx(gate * -1.4426950408889634f)); }
template <typename T> __device__ __forceinline__ float silu_times(float gate, float up) {
    return to_float(from_float<T>(silu(gate))) * up;
}
// The same for two neighbouring outputs from fp32 gate and up products, rounded to T first as
// a GEMM's output is, and returned as a packed pair: every rounding is a packed conversion
// (three a pair, where one value at a time took seven: conversions issue at the MUFU's 16 a
// clock an SM, and gemm_tma's fused epilogue makes 64 pairs a thread), and the last multiply
// is one 16-bit pair multiply. Two 16-bit values' product is exact in fp32 (bar bf16 products
// below 2^-126, which fp32 rounds to a subnormal first), so rounding it once is what
// silu_times and pack2 give.
template <typename T> __device__ __forceinline__ uint32_t silu_times_pair(float gate0, float gate1, float up0, float up1) {
    const float2 gate = unpack2<T>(pack2<T>(gate0, gate1));
    const uint32_t s = pack2<T>(silu(gate.x), silu(gate.y)), up = pack2<T>(up0, up1);
    typedef typename Pair<T>::type T2;
    const T2 out = __hmul2_rn(*reinterpret_cast<const T2*>(&s), *reinterpret_cast<const T2*>(&up));
    return *reinterpret_cast<const uint32_t*>(&out);
}

// Programmatic dependent launch (sm_90). Every kernel calls pdl_start() before it reads
// anything another kernel writes; before it, it may only fetch what no kernel writes (weights,
// the RoPE table, the step's inputs the host uploads before the graph runs). Where a CUDA
// graph's edge into a kernel is programmatic (engine/ops/pdl.py), the kernel is launched
// once every block of the one before it has started, and waits in pdl_start until that one
// has finished and its writes are visible. Only then does it let the kernel after it
// launch: one kernel ahead fetches its weights while this one runs (letting every kernel of
// the graph launch at once was slower: 0.87 vs 0.71 ms a batch-1 step, B=1 ctx 256).
// Without such an edge (eager launches) both instructions are no-ops.
__device__ __forceinline__ void pdl_start() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Fetch `bytes` (a multiple of 16, from a 16-byte aligned address) into L2, without
// waiting: a kernel launched early fetches its weights while the kernel before it runs.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Block-wide sum / max; every thread gets the result. `scratch` holds 32 floats.
// Safe to call repeatedly: the leading barrier protects the previous call's reads.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < nwarps ? scratch[lane] : 0.f;
    return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < nwarps ? scratch[lane] : -INFINITY;
    return warp_max(x);
}

// murmur3's 32-bit finalizer: the same bits as torch_ops._mix32.
__device__ __forceinline__ uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    return x ^ (x >> 16);
}

// Instantiate an element-type template kernel for bf16, fp16 and float, with C
// names `<name>_bf16` / `<name>_f16` / `<name>_f32` so the host can look them up.
#define FOR_EACH_DTYPE(M) M(bf16, bf16) M(f16, f16) M(float, f32)
