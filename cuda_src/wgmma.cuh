// Hopper's warpgroup MMA (wgmma, sm_90a), shared by the kernels that use it: the 128-byte
// swizzle their shared-memory tiles are stored in, the tiles' matrix descriptors, the async
// proxy's fences and waits, and d[64 x 64] += a[64 x 16] b[16 x 64] with a in shared memory or
// in registers. Everything but the swizzle is built for sm_90a only (cuda_build.arch_of):
// callers guard their wgmma code with __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once
#include "mma.cuh"

// A tile of 128-byte rows (64 16-bit values) in wgmma's 128-byte swizzle: the 16-byte piece
// p of row r lies at piece p ^ (r % 8), so the 8 rows a wgmma reads together fall in
// different banks. Tiles start 1024-byte aligned (one swizzle pattern is 8 rows).
__device__ __forceinline__ void* swizzled_128(void* tile, int r, int byte) {
    return static_cast<unsigned char*>(tile) + r * 128 + (((byte >> 4) ^ (r % 8)) << 4);
}

// The loaders' layout argument for such tiles: where row r, column c of 16-bit values lies.
struct SwizzledRows {
    template <typename T> static __device__ __forceinline__ void* at(void* tile, int r, int c) {
        static_assert(sizeof(T) == 2, "a swizzled row is 64 16-bit values");
        return swizzled_128(tile, r, c * 2);
    }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The shared-memory matrix descriptor of a swizzled tile: its 8-row groups (one swizzle
// pattern, 1024 bytes) one after another. As a K-major operand (rows are M or N, 64 K values
// a row) adding 2 steps 16 columns (32 bytes) along K inside the pattern; as an MN-major one
// (rows are K, 64 M or N values a row) adding 128 steps 16 rows (2048 bytes) along K.
// smem_descriptor takes the tile's shared-memory address (smem_address).
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t tile) {
    constexpr uint64_t GROUP_BYTES = 1024, SWIZZLE_128B = 1;
    return (uint64_t)((tile & 0x3FFFF) >> 4) | (uint64_t)1 << 16 | GROUP_BYTES >> 4 << 32 | SWIZZLE_128B << 62;
}
__device__ __forceinline__ uint64_t tile_descriptor(const void* tile) { return smem_descriptor(smem_address(tile)); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// The accumulators are read only after the wait: an empty asm that "writes" them keeps the
// compiler from moving their reads above it.
template <int N> __device__ __forceinline__ void fence_registers(float (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}
// cp.async writes are generic-proxy writes; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A warpgroup's registers a thread, moved between the warpgroups of a block: dec gives
// registers back to the block's pool, inc waits until the pool holds enough and takes them.
// The whole warpgroup runs it; ptxas allocates the code after it within the new count.
template <int REGS> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// mbarriers in shared memory (at a shared-memory address, 8-byte aligned): a phase completes
// once `count` arrivals are in; a waiter names the phase by its parity (the barrier's k-th
// completion has parity k % 2). Arrivals release and waits acquire, at CTA scope.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.b32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// The 64 x 64 fp32 accumulator: 8 fragments of 16 x 8 (this warp's 16 rows), as mma.sync
// lays them out; operands %0 .. %31.
#define WGMMA_D "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
                "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
// A fragment's four accumulators as read-write asm operands; the accumulators of 8, 16 or 32.
#define WGMMA_FRAG(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define WGMMA_ACC(d)                                                                                     \
    WGMMA_FRAG(d, 0), WGMMA_FRAG(d, 1), WGMMA_FRAG(d, 2), WGMMA_FRAG(d, 3), WGMMA_FRAG(d, 4), WGMMA_FRAG(d, 5), \
        WGMMA_FRAG(d, 6), WGMMA_FRAG(d, 7)

// The 64 x 128, 64 x 192 and 64 x 256 ones (m64n128k16 ...): 16, 24 or 32 fragments, operands
// %0 .. %63, %95 or %127; each list the one before it and 32 more.
#define WGMMA_R64                                                                      \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_R96                                                                      \
    WGMMA_R64 ", "                                                                     \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WGMMA_D128 "{" WGMMA_R64 "}"
#define WGMMA_D192 "{" WGMMA_R96 "}"
#define WGMMA_D256                                                                                    \
    "{" WGMMA_R96 ", "                                                                                \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "    \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define WGMMA_ACC128(d)                                                                                      \
    WGMMA_ACC(d), WGMMA_FRAG(d, 8), WGMMA_FRAG(d, 9), WGMMA_FRAG(d, 10), WGMMA_FRAG(d, 11), WGMMA_FRAG(d, 12), \
        WGMMA_FRAG(d, 13), WGMMA_FRAG(d, 14), WGMMA_FRAG(d, 15)
#define WGMMA_ACC192(d)                                                                                        \
    WGMMA_ACC128(d), WGMMA_FRAG(d, 16), WGMMA_FRAG(d, 17), WGMMA_FRAG(d, 18), WGMMA_FRAG(d, 19), WGMMA_FRAG(d, 20), \
        WGMMA_FRAG(d, 21), WGMMA_FRAG(d, 22), WGMMA_FRAG(d, 23)
#define WGMMA_ACC256(d)                                                                                        \
    WGMMA_ACC192(d), WGMMA_FRAG(d, 24), WGMMA_FRAG(d, 25),                                                      \
        WGMMA_FRAG(d, 26), WGMMA_FRAG(d, 27), WGMMA_FRAG(d, 28), WGMMA_FRAG(d, 29), WGMMA_FRAG(d, 30),             \
        WGMMA_FRAG(d, 31)

// Wgmma<Op>: the m64nNk16 multiplies with 16-bit operands of type Op, fp32 accumulation.
//   ss(d, a, b, accumulate): d (+)= a b, a and b descriptors of K-major tiles; accumulate = 0
//                            overwrites d; N = 64, 128, 192 or 256 by d's fragments (8 ... 32).
//   rs_mn(d, a, b):          d += a b, a this warp's 16 x 16 rows in registers (the mma.sync A
//                            fragment), b the descriptor of an MN-major tile (K rows of N values).
template <typename Op> struct Wgmma;
// ss at N columns: FRAGS accumulator fragments (the operand list D, constraints ACC), then the
// a and b descriptors and the accumulate flag as operands A, B and P.
#define WGMMA_SS(NAME, N, FRAGS, D, ACC, A, B, P)                                                              \
    static __device__ __forceinline__ void ss(float (&d)[FRAGS][4], uint64_t a, uint64_t b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                              \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." NAME "." NAME " " D ", " A ", " B          \
                     ", p, 1, 1, 0, 0;\n}\n"                                                                     \
                     : ACC(d)                                                                                  \
                     : "l"(a), "l"(b), "r"(accumulate));                                                       \
    }
#define WGMMA_OPS(OP, NAME)                                                                                    \
    template <> struct Wgmma<OP> {                                                                             \
        WGMMA_SS(NAME, 64, 8, WGMMA_D, WGMMA_ACC, "%32", "%33", "%34")                                         \
        WGMMA_SS(NAME, 128, 16, WGMMA_D128, WGMMA_ACC128, "%64", "%65", "%66")                                 \
        WGMMA_SS(NAME, 192, 24, WGMMA_D192, WGMMA_ACC192, "%96", "%97", "%98")                                 \
        WGMMA_SS(NAME, 256, 32, WGMMA_D256, WGMMA_ACC256, "%128", "%129", "%130")                              \
        static __device__ __forceinline__ void rs_mn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {  \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                            \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." NAME "." NAME " " WGMMA_D              \
                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                       \
                         : WGMMA_ACC(d)                                                                        \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                                \
        }                                                                                                      \
    };
WGMMA_OPS(bf16, "bf16")
WGMMA_OPS(f16, "f16")
#endif
