// Builds the next decode step's inputs on the device from the tokens just
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
