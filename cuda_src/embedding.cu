// Embedding gather: out[t] = table[ids[t]]; a NO_TOKEN id (-1, a failed sample the host has
// not read yet) reads row 0, so the step after a failure runs to where the host sees it.
// Rows move as raw bytes, so one kernel serves every dtype.
// Launch: grid = T tokens, block = 128 threads.
#include "common.cuh"

extern "C" __global__ void embed_rows(const int64_t* __restrict__ ids, const char* __restrict__ table,
                                      char* __restrict__ out, int row_bytes) {
    pdl_start();
    const char* src = table + max(ids[blockIdx.x], (int64_t)0) * row_bytes;
    char* dst = out + (int64_t)blockIdx.x * row_bytes;
    if (row_bytes % 16 == 0) {  // 16-byte words whenever rows allow it (host checks base alignment)
        for (int i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
            reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    } else {                    // every supported dtype is at least 2 bytes wide
        for (int i = threadIdx.x; i < row_bytes / 2; i += blockDim.x)
            reinterpret_cast<uint16_t*>(dst)[i] = reinterpret_cast<const uint16_t*>(src)[i];
    }
}
