// Hopper's tensor memory accelerator (TMA) and thread-block clusters (sm_90a): tiles copied
// from global to shared memory by one instruction, optionally into every block of a cluster
// at once (multicast), their arrival counted in bytes on an mbarrier; and the cluster-wide
// arrivals and barriers the blocks of a cluster use to share their stages.
#pragma once
#include "wgmma.cuh"

// A tensor map (CUtensorMap): how the TMA unit reads boxes of a 2-D tensor, made by the
// driver on the host (engine/ops/tensor_map.py) and passed by value as a __grid_constant__
// kernel parameter. CUDA 13 aligns CUtensorMap to 128 bytes; kernels take their maps as
// their first parameters, so the packed parameter buffer needs no padding before them.
struct alignas(128) TensorMap {
    uint64_t opaque[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// This thread's arrival on `bar`, announcing `bytes` that asynchronous copies will complete.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// An arrival on the barrier at shared-memory address `bar` of the cluster's block `rank`. Its
// release is at CTA scope, as CUTLASS's: at cluster scope ptxas puts a MEMBAR.ALL.GPU before
// every arrival, which cost gemm_tma ~1 µs a K chunk (session 37). What it orders, the
// arriving warp's wgmma reads of a stage, is complete before it arrives (wgmma.wait_group).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar), "r"(rank)
                 : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_id() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_count() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster meets, once its barriers are initialised, before
// any block arrives on another's. fence_barrier_init has released the inits, so the arrival
// is relaxed: a releasing one is a MEMBAR.ALL.GPU in every thread.
__device__ __forceinline__ void cluster_sync_after_init() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// ... and before it leaves: no block's shared memory is freed while another's arrivals on its
// barriers may still be on their way. Those arrivals come before the releasing arrival here.
__device__ __forceinline__ void cluster_sync_before_exit() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// mbarrier.init's writes, visible to the cluster's other blocks and to the TMA unit.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}
// The box at (column c, row r) of `map` into this block's shared memory at `dst`; its bytes
// complete on `bar`. Rows and columns past the tensor's arrive as zeros (and still count).
__device__ __forceinline__ void tma_load(uint32_t dst, const TensorMap& map, int c, int r, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(&map)), "r"(c), "r"(r),
                 "r"(bar)
                 : "memory");
}
// The same box into the same offsets of every block in `blocks` (a bit a cluster rank), each
// block's bytes completing on its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const TensorMap& map, int c, int r, uint32_t bar,
                                                   uint16_t blocks) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(&map)), "r"(c),
                 "r"(r), "r"(bar), "h"(blocks)
                 : "memory");
}
// The box at (column c, row r) of `map` from this block's shared memory at `src`, by the TMA
// unit (rows and columns past the tensor's are not written); committed as a bulk group.
__device__ __forceinline__ void tma_store(const TensorMap& map, uint32_t src, int c, int r) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(src), "r"(c), "r"(r) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed stores have read their shared memory (it may be written again).
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// ... and have written global memory.
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// This thread's shared-memory writes, visible to the TMA unit (the async proxy).
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t address, uint32_t value) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}
// `threads` threads (whole warps) meet at named barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// ... or these warps count towards its `threads` without waiting: a signal to the warps that sync.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif
