#include "tma.cuh"
// One box of `map` at (c, r) into shared memory by TMA, then its raw bytes out.
__device__ void probe_body(const TensorMap& map, unsigned short* out, int c, int r) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_unaligned[];
    const uint32_t base = smem_address(smem_unaligned);
    const uint32_t tile = base + (-base & 1023), bar = tile + 16384;
    if (threadIdx.x == 0) { mbarrier_init(bar, 1); fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) { mbarrier_arrive_expect_bytes(bar, 16384); tma_load(tile, map, c, r, bar); }
    mbarrier_wait(bar, 0);
    const unsigned short* p = reinterpret_cast<const unsigned short*>(smem_unaligned + (tile - base));
    for (int i = threadIdx.x; i < 8192; i += blockDim.x) out[i] = p[i];
#endif
}
extern "C" __global__ void __cluster_dims__(1, 1, 1) probe_param(const __grid_constant__ TensorMap map, unsigned short* out, int c, int r) {
    probe_body(map, out, c, r);
}
extern "C" __global__ void __cluster_dims__(1, 1, 1) probe_global(const TensorMap* map, unsigned short* out, int c, int r) {
    probe_body(*map, out, c, r);
}
extern "C" __global__ void probe_plain(const __grid_constant__ TensorMap map, unsigned short* out, int c, int r) {
    probe_body(map, out, c, r);
}
