// Decode inputs made on the device from tokens the host has not read yet.
//
// build_decode_inputs builds the next decode step's inputs from the tokens just
// sampled, so the host need not see them first. Per running row r:
//   input_ids[r] = sampled[r]; positions[r] = seq_lens[r] (the new token's position);
//   slot_mapping[r] = its cache slot through the row's block table (-1 if the table
//   has no block there yet); seq_lens[r] += 1 (in place: the state moves one step).
// Launch: 1-D, one thread per row.
#include "common.cuh"

extern "C" __global__ void build_decode_inputs(const int64_t* __restrict__ sampled, int* __restrict__ seq_lens,
                                               const int* __restrict__ block_tables, int max_blocks, int block_size,
                                               int64_t* __restrict__ input_ids, int64_t* __restrict__ positions,
                                               int64_t* __restrict__ slot_mapping, int rows) {
    pdl_start();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int pos = seq_lens[r];
    const int blk = pos / block_size;
    input_ids[r] = sampled[r];
    positions[r] = pos;
    slot_mapping[r] = blk < max_blocks
        ? (int64_t)block_tables[(int64_t)r * max_blocks + blk] * block_size + pos % block_size
        : -1;
    seq_lens[r] = pos + 1;
}

// take_pending_tokens: token_ids[i] = previous[source_rows[i]] where source_rows[i] >= 0
// (a row's newest token, still only in the previous step's output). One launch where
// torch's where/clamp/gather took four, each microseconds of host time a step.
// Launch: 1-D, one thread per token.
extern "C" __global__ void take_pending_tokens(int64_t* __restrict__ token_ids, const int64_t* __restrict__ source_rows,
                                               const int64_t* __restrict__ previous, int n) {
    pdl_start();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && source_rows[i] >= 0) token_ids[i] = previous[source_rows[i]];
}
