// take_pending_tokens: token_ids[i] = previous[source_rows[i]] where source_rows[i] >= 0
// (a row's newest token, still only in the previous step's output). One launch where
// torch's where/clamp/gather took four, each microseconds of host time a step.
// Launch: 1-D, one thread per token.
#include "common.cuh"

extern "C" __global__ void take_pending_tokens(int64_t* __restrict__ token_ids, const int64_t* __restrict__ source_rows,
                                               const int64_t* __restrict__ previous, int n) {
    pdl_start();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && source_rows[i] >= 0) token_ids[i] = previous[source_rows[i]];
}
