// Sampling on the device, one block per row, bit-compatible with TorchOps.sample:
//   temperature 0 (or all_greedy): argmax of the logits, lowest index on ties;
//   else argmax over kept tokens of logits/max(t, 1e-6) - log(-log(u)), with u the
//   counter-based uniform of (seed, counter, token) and "kept" the top-k / top-p set.
// The top-k / top-p cut is a value threshold found by bitwise binary search over
// order-preserving float keys (32 passes over the row): no sort needed.
// A row with a NaN logit, or none above -inf, samples NO_TOKEN (-1): the host reads it as
// the model's failure (engine.ModelOutputError). Left at argmax's initial index, such a
// row sent the next step's embedding out of bounds, an illegal address.
// Launch: grid = B rows, block = 1024 threads.
#include "common.cuh"

constexpr int64_t NO_TOKEN = -1;     // engine.ops.base.NO_TOKEN
constexpr int NO_INDEX = 0x7fffffff;  // argmax's index where no value is above -inf

// Order-preserving map of floats to unsigned ints.
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The uniform draw of torch_ops.uniform_noise for token `col` of a row: 23 bits, so it
// never rounds to 1 (torch_ops.uniform_from_bits says why).
__device__ __forceinline__ float uniform(uint32_t row_key, uint32_t col) {
    uint32_t bits = mix32(row_key ^ mix32(col + 0x9E3779B9u));
    return ((float)(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

// Block-wide argmax of (value, index), lowest index on ties; every thread gets the index.
__device__ __forceinline__ int block_argmax(float v, int i, float* sv, int* si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, v, o);
            int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
        }
        if (pass == 1) break;
        __syncthreads();
        if (lane == 0) { sv[warp] = v; si[warp] = i; }
        __syncthreads();
        v = lane < nwarps ? sv[lane] : -INFINITY;
        i = lane < nwarps ? si[lane] : NO_INDEX;
    }
    return i;
}

// Smallest order key a token must have to survive top-k and top-p, as in
// torch_ops.filter_logits: keep the tokens at least as large as the k-th largest value
// (ties at the cut all stay), and those whose strictly larger tokens hold less than top_p
// of the probability mass; the best token always stays.
template <typename T>
__device__ uint32_t filter_threshold(const T* x, int V, float temp, int k, float p, float* scratch) {
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, to_float(x[i]) / temp);
    mx = block_max(mx, scratch);
    float z = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) z += expf(to_float(x[i]) / temp - mx);
    z = block_sum(z, scratch);
    const bool use_k = k > 0 && k < V, use_p = p < 1.f;
    // ans_k: largest key with count(key >= ans_k) >= k (the k-th largest value).
    // ans_p: largest key whose strictly-larger mass is still >= p (kept tokens lie above it).
    uint32_t ans_k = 0, ans_p = 0;
    for (int bit = 31; bit >= 0; --bit) {
        const uint32_t ck = ans_k | (1u << bit), cp = ans_p | (1u << bit);
        float count = 0.f, mass = 0.f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float s = to_float(x[i]) / temp;
            const uint32_t key = order_key(s);
            count += key >= ck;
            if (key > cp) mass += expf(s - mx);
        }
        if (use_k && block_sum(count, scratch) >= k) ans_k = ck;
        if (use_p && !(block_sum(mass, scratch) < p * z)) ans_p = cp;
    }
    uint32_t thresh = ans_k;
    if (use_p) thresh = max(thresh, ans_p == 0xffffffffu ? ans_p : ans_p + 1);  // top_p 0: only the best
    return min(thresh, order_key(mx));
}

template <typename T>
__device__ void sample(const T* __restrict__ logits, int V, const float* __restrict__ temperature,
                       const int* __restrict__ top_k, const float* __restrict__ top_p,
                       const int64_t* __restrict__ seeds, const int64_t* __restrict__ counters,
                       int64_t* __restrict__ out, int all_greedy) {
    __shared__ float scratch[32];
    __shared__ int scratch_i[32];
    const int row = blockIdx.x;
    const T* x = logits + (int64_t)row * V;
    const float t = all_greedy ? 0.f : temperature[row];
    float best = -INFINITY;
    int best_i = NO_INDEX;
    bool saw_nan = false;
    if (t == 0.f) {
        // 8 elements a load where the row allows (a row of floats is 2 loads): the loop
        // then keeps many loads in flight, not one 4-byte load per iteration. Each thread
        // sees its indices in ascending order, so its first max is kept.
        const int vector_end = V % 8 == 0 && (uintptr_t)x % 16 == 0 ? V : 0;   // the rest one at a time
#pragma unroll 4
        for (int c = threadIdx.x * 8; c < vector_end; c += blockDim.x * 8) {
            float v[8];
            load8(x + c, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (v[j] > best) { best = v[j]; best_i = c + j; }
                saw_nan |= isnan(v[j]);
            }
        }
        for (int i = vector_end + threadIdx.x; i < V; i += blockDim.x) {
            const float v = to_float(x[i]);
            if (v > best) { best = v; best_i = i; }
            saw_nan |= isnan(v);
        }
    } else {
        const float temp = fmaxf(t, 1e-6f);
        const int k = top_k[row];
        const float p = top_p[row];
        const uint32_t thresh = (k > 0 || p < 1.f) ? filter_threshold(x, V, temp, k, p, scratch) : 0u;
        const uint64_t seed = (uint64_t)seeds[row];
        const uint32_t row_key = mix32((uint32_t)seed ^ mix32((uint32_t)(seed >> 32) ^ mix32((uint32_t)counters[row])));
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float s = to_float(x[i]) / temp;
            saw_nan |= isnan(s);
            if (order_key(s) < thresh) continue;
            const float v = s - logf(-logf(uniform(row_key, (uint32_t)i)));
            if (v > best) { best = v; best_i = i; }
        }
    }
    const int i = block_argmax(best, best_i, scratch, scratch_i);
    const bool failed = __syncthreads_or(saw_nan) || i == NO_INDEX;
    if (threadIdx.x == 0) out[row] = failed ? NO_TOKEN : i;
}

#define SAMPLE(T, N)                                                                                      \
    extern "C" __global__ void sample_##N(const T* logits, int V, const float* temperature, const int* top_k, \
                                          const float* top_p, const int64_t* seeds, const int64_t* counters,  \
                                          int64_t* out, int all_greedy) {                                     \
        pdl_start();                                                                                          \
        sample<T>(logits, V, temperature, top_k, top_p, seeds, counters, out, all_greedy);                    \
    }
FOR_EACH_DTYPE(SAMPLE)
