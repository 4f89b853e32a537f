// Paged attention for one-token queries (decode), as a work list of chunks.
//
// plan_decode (once a step, before the first layer): each sequence's keys are cut into
// chunks of nearly equal size, about `slack` times the even share of one block slot
// (the keys of every sequence and KV head over the blocks the GPU holds at once), at
// least MIN_CHUNK and at most max_chunk keys; the (sequence, KV head, chunk) items are
// listed longest first. attn_decode (every layer): a persistent grid of blocks takes the
// items in that order from an atomic queue, so the long ones start first and the short
// ones fill the gaps: any fixed partition loses either to a tail split (equal lengths:
// 1,025 keys cut 1,024 + 1) or to one long block (mixed lengths).
//
// An item serves all G = nh / nkv query heads of its KV head, so each K/V row is read
// from memory once. 128 threads = 16 key lanes x 8 dim lanes; each key's d-vector is
// spread over 8 threads in 16-byte pieces (coalesced rows), and a key lane takes N
// consecutive keys a step (one cache block, so one block-table lookup for all N).
//   pass 1: scores q.k for the chunk's keys -> shared memory (G x chunk floats),
//           the query in registers and the G partial dots summed over the 8 dim
//           lanes together (fold_heads);
//   softmax statistics per head from shared memory;
//   pass 2: p-weighted sum of V rows, reduced over the 16 key lanes.
// A sequence in one chunk: the normalised output is written directly. Several: unnormalised
// partial sums plus (max, sum) go to a workspace, and the last chunk of a (sequence, KV
// head) to finish combines them (a counter per pair, reset by that last item).
// With cos_sin given, RoPE and the cache write of the new token are fused in (see
// rope_inputs): a decode step then needs no rope_and_cache launch.
// A batch of a few rows takes attn_decode_few instead (see there): no list, a block per fixed
// chunk of each row, its cached K/V copied into shared memory before it waits on the kernel
// before it, so a latency-bound step's chain of loads is mostly behind that wait.
// Launch: plan_decode grid 1, block PLAN_THREADS; attn_decode any grid (the host gives
// one block per slot, at most one per item), block 128, dynamic smem = G * max_chunk * 4
// bytes; split_counters [B * nkv] int32 and queue[0..1] zero before the first launch
// (every launch leaves them zero); prefetch_rows: rows whose cached K/V it fetches into
// L2 before it waits for the kernel before it (0: none; see prefetch_cached_kv).
#include "common.cuh"
#include "mma.cuh"

namespace {
constexpr int THREADS = 128, DIM_LANES = 8, KEY_LANES = THREADS / DIM_LANES;
constexpr int MIN_BLOCK_SIZE = 8;                   // the host keeps to this
// Keys per chunk: MIN_CHUNK is one pass of all key lanes over 16-bit rows; chunks are
// multiples of CHUNK_ALIGN (so N consecutive keys of a lane stay in one cache block).
constexpr int MIN_CHUNK = 128, MAX_CHUNK = 2048, CHUNK_ALIGN = 16;
constexpr int MAX_SPLIT_BLOCKS = MAX_CHUNK / MIN_BLOCK_SIZE + 1;
constexpr int PLAN_THREADS = 1024, LENGTH_BUCKETS = MAX_CHUNK / CHUNK_ALIGN;
}

// The blocks an SM holds of each kernel, as its register budget (__launch_bounds__): the
// 16-bit d=64 kernels are held to 80 registers for up to 4 heads per KV head, so 6 blocks
// share an SM (more warps to hide the loads' latency; 72 registers and 7 blocks spilled
// and measured slower), and to 128 for 8 heads (4 blocks: 80 spills). Left alone, the
// compiler gave G=4 166 registers and 3 blocks. The others are the compiler's choice; the
// host sizes the work list from each kernel's real occupancy, whatever it is.
template <typename T, int D, int G>
constexpr int min_blocks_per_sm = sizeof(T) == 2 && D == 64 ? (G <= 4 ? 6 : 4) : 1;

__device__ __forceinline__ int round_up(int x, int to) { return (x + to - 1) / to * to; }

// Keys per chunk of a sequence of L keys for a target chunk size: the fewest chunks of at
// most `target` keys, made as equal as CHUNK_ALIGN allows (the last one is the shortest).
__device__ __forceinline__ int chunk_keys(int L, int target) {
    const int chunks = (L + target - 1) / target;
    return round_up((L + chunks - 1) / chunks, CHUNK_ALIGN);
}

// Exclusive prefix sum over the block (PLAN_THREADS threads); `scratch` holds 32 ints.
__device__ int block_exclusive_scan(int x, int* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inclusive = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += y;
    }
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        int w = scratch[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        scratch[lane] = w;   // inclusive over warps
    }
    __syncthreads();
    return inclusive - x + (warp ? scratch[warp - 1] : 0);
}

// The step's work list (see the top of the file). row_plan[b] = (keys per chunk, the
// row's first workspace split); items[i] = (row, chunk << 8 | KV head), longest first;
// queue[2] = the number of items. The rows are dealt to threads in contiguous runs, so
// a row's workspace splits follow its predecessor's.
extern "C" __global__ void __launch_bounds__(PLAN_THREADS) plan_decode(
    const int* __restrict__ seq_lens, int B, int nkv, int slots, float slack, int max_chunk,
    int2* __restrict__ row_plan, int2* __restrict__ items, int* __restrict__ queue) {
    pdl_start();
    __shared__ int bucket_start[LENGTH_BUCKETS];   // items per length bucket, then where each bucket starts
    __shared__ float sum_scratch[32];
    __shared__ int scan_scratch[32];
    for (int i = threadIdx.x; i < LENGTH_BUCKETS; i += PLAN_THREADS) bucket_start[i] = 0;
    const int per_thread = (B + PLAN_THREADS - 1) / PLAN_THREADS;
    const int first = min(B, threadIdx.x * per_thread), last = min(B, first + per_thread);
    float keys = 0.f;
    for (int b = first; b < last; ++b) keys += seq_lens[b];
    // Every thread gets the same sum (block_sum broadcasts one reduction), so the same target.
    const float share = block_sum(keys, sum_scratch) * nkv * slack / slots;
    const int target = min(max_chunk, max(MIN_CHUNK, round_up((int)ceilf(share), CHUNK_ALIGN)));

    int splits = 0;
    for (int b = first; b < last; ++b) {
        const int L = seq_lens[b];
        if (L <= 0) continue;
        const int chunk = chunk_keys(L, target), n = (L + chunk - 1) / chunk;
        splits += n;
        atomicAdd(&bucket_start[(chunk - 1) / CHUNK_ALIGN], (n - 1) * nkv);
        atomicAdd(&bucket_start[(L - (n - 1) * chunk - 1) / CHUNK_ALIGN], nkv);
    }
    int base = block_exclusive_scan(splits, scan_scratch);   // its barriers also order the histogram
    if (threadIdx.x == 0) {       // buckets longest first
        int at = 0;
        for (int k = LENGTH_BUCKETS - 1; k >= 0; --k) {
            const int count = bucket_start[k];
            bucket_start[k] = at;
            at += count;
        }
        queue[2] = at;
    }
    __syncthreads();
    for (int b = first; b < last; ++b) {
        const int L = seq_lens[b];
        const int chunk = L > 0 ? chunk_keys(L, target) : CHUNK_ALIGN, n = L > 0 ? (L + chunk - 1) / chunk : 0;
        row_plan[b] = make_int2(chunk, base);
        base += n;
        for (int s = 0; s < n; ++s) {
            const int keys_s = min(chunk, L - s * chunk);
            for (int h = 0; h < nkv; ++h)
                items[atomicAdd(&bucket_start[(keys_s - 1) / CHUNK_ALIGN], 1)] = make_int2(b, s << 8 | h);
        }
    }
}

// Rows in flight per thread: 16-byte words are cheap to hold, so 16-bit caches keep
// twice as many loads outstanding as float ones. Rows stay packed until used.
template <typename T> __host__ __device__ constexpr int unroll() { return sizeof(T) == 4 ? 4 : 8; }
template <typename T, int DPT> struct Row { uint4 w[DPT * sizeof(T) / 16]; };

// Issues the loads of this thread's DPT dims of the rows of its N consecutive keys
// jb, jb + 1, ... (zeros past `end`) before any is used. The N keys lie in one cache
// block (N <= the block size, jb a multiple of N), so one block-table lookup and one
// address serve all N rows. `blocks` is the split's slice of the block table in shared
// memory, starting at block `first`.
template <typename T, int D, int DPT, int N>
__device__ __forceinline__ void load_rows(Row<T, DPT> (&rows)[N], const T* cache, const int* blocks,
                                          int first, int bs_shift, int nkv, int kvh, int jb, int end, int d0) {
    const int64_t slot = jb < end ? ((int64_t)blocks[(jb >> bs_shift) - first] << bs_shift) + (jb & ((1 << bs_shift) - 1)) : 0;
    const uint4* p = reinterpret_cast<const uint4*>(cache + (slot * nkv + kvh) * D + d0);
    const int slot_words = nkv * D * (int)sizeof(T) / 16;   // 16-byte words from one slot to the next
#pragma unroll
    for (int u = 0; u < N; ++u) {
#pragma unroll
        for (int w = 0; w < DPT * (int)sizeof(T) / 16; ++w)
            rows[u].w[w] = jb + u < end ? p[u * slot_words + w] : make_uint4(0, 0, 0, 0);
    }
}

// Where a chunk's K or V rows come from. The work list's items read the paged cache
// (`blocks`: the chunk's slice of the block table, in shared memory, from block `first`);
// attn_decode_few reads the copy it made in shared memory ([keys][D] from key `start`).
template <typename T, int D> struct PagedRows {
    const T* cache;
    const int* blocks;
    int first, bs_shift, nkv, kvh;
    template <int DPT, int N>
    __device__ __forceinline__ void load(Row<T, DPT> (&rows)[N], int jb, int end, int d0) const {
        load_rows<T, D, DPT, N>(rows, cache, blocks, first, bs_shift, nkv, kvh, jb, end, d0);
    }
};
template <typename T, int D> struct StagedRows {
    const T* rows;
    int start;
    template <int DPT, int N>
    __device__ __forceinline__ void load(Row<T, DPT> (&out)[N], int jb, int end, int d0) const {
        const uint4* p = reinterpret_cast<const uint4*>(rows + (int64_t)(jb - start) * D + d0);
#pragma unroll
        for (int u = 0; u < N; ++u) {
#pragma unroll
            for (int w = 0; w < DPT * (int)sizeof(T) / 16; ++w)
                out[u].w[w] = jb + u < end ? p[u * D * (int)sizeof(T) / 16 + w] : make_uint4(0, 0, 0, 0);
        }
    }
};

// Heads per KV head, padded to a power of two for fold_heads.
__host__ __device__ constexpr int padded_heads(int g) { return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8; }

// One level of summing P values over the 8 dim lanes of a key: the lanes `mask` apart
// swap halves, so each keeps N/2 partial sums (v[0..N/2)) for N/2 shuffles. Three levels
// sum P <= 8 values in P - 1 shuffles, not 3P: the shuffles, not the DRAM, were what
// stalled pass 1 (ncu: short-scoreboard stalls on MIO, DRAM at 26%).
template <int N, int P>
__device__ __forceinline__ void fold(float (&v)[P], int lane8, int mask) {
    const bool upper = lane8 & mask;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const float give = upper ? v[i] : v[i + N / 2];
        const float keep = upper ? v[i + N / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, give, mask);
    }
}

// Sums v[0..P) over the 8 dim lanes; returns the full sum of value `lane8 >> (3 - log2 P)`
// (the lanes that share an index hold the same sum).
template <int P>
__device__ __forceinline__ float fold_heads(float (&v)[P], int lane8) {
    if constexpr (P == 8) { fold<8>(v, lane8, 4); fold<4>(v, lane8, 2); fold<2>(v, lane8, 1); }
    if constexpr (P == 4) { fold<4>(v, lane8, 4); fold<2>(v, lane8, 2); v[0] += __shfl_xor_sync(0xffffffffu, v[0], 1); }
    if constexpr (P == 2) { fold<2>(v, lane8, 4); v[0] += __shfl_xor_sync(0xffffffffu, v[0], 2);
                            v[0] += __shfl_xor_sync(0xffffffffu, v[0], 1); }
    if constexpr (P == 1) { for (int m = 4; m >= 1; m >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], m); }
    return v[0];
}

template <typename T, int DPT>
__device__ __forceinline__ void unpack(const Row<T, DPT>& row, float (&f)[DPT]) {
#pragma unroll
    for (int c = 0; c < DPT; c += 8) load8(reinterpret_cast<const T*>(&row.w[c * sizeof(T) / 16]), &f[c]);
}

// A chunk's result for query head h, dim `dim`: o = sum p v with p = exp(s - m), l = sum p.
// A sequence in one chunk is written out normalised; otherwise the partial goes to the
// workspace (row ws_split of [splits][nh]) for combine_splits.
template <typename T, int D>
__device__ __forceinline__ void store_split(float o, float m, float l, int dim, int used, int tok, int h,
                                            int ws_split, int nh, T* out, float* part_o, float2* part_ml) {
    if (used == 1) {
        out[((int64_t)tok * nh + h) * D + dim] = from_float<T>(o / l);
        return;
    }
    const int64_t ws = (int64_t)ws_split * nh + h;
    part_o[ws * D + dim] = o;
    if (dim == 0) part_ml[ws] = make_float2(m, l);
}

// Called for every chunk of a sequence split `used` ways once its partials are stored
// (workspace rows first_split ..): the last of the (sequence, KV head) to arrive rescales
// them all to the common max, writes the output, and resets the counter for the next
// launch (or graph replay). A thread takes two dims of one head and reads 8 splits' partials
// at a time before it uses any, with a running max: one round trip to L2 per 8 splits,
// where loops that used each load as it came took one per split (the combine was most of a
// batch-1 decode's attention time after its loads had moved, session 24).
template <typename T, int D, int G>
__device__ void combine_splits(int kvh, int b, int tok, int used, int first_split, int nh, int nkv, T* out,
                               const float* part_o, const float2* part_ml, int* split_counters, bool& last_split) {
    constexpr int BATCH = 8;
    __threadfence();                               // this block's partials reach L2 before its count does
    __syncthreads();
    int* counter = split_counters + (int64_t)b * nkv + kvh;
    if (threadIdx.x == 0) last_split = atomicAdd(counter, 1) == used - 1;
    __syncthreads();
    if (!last_split) return;
    __threadfence();
    for (int i = threadIdx.x; i < G * D / 2; i += blockDim.x) {
        const int dim = 2 * i % D, h = kvh * G + 2 * i / D;
        float m = -INFINITY, l = 0.f;
        float2 o = make_float2(0.f, 0.f);
        for (int s0 = 0; s0 < used; s0 += BATCH) {
            float2 ml[BATCH], po[BATCH];
            // __ldcg: other blocks' partials, read from L2 (L1 is not coherent across SMs).
            // Past `used`, a split of weight 0 (s0 < used: the first of a batch is real).
#pragma unroll
            for (int k = 0; k < BATCH; ++k) {
                const int64_t ws = (int64_t)(first_split + s0 + k) * nh + h;
                const bool real = s0 + k < used;
                ml[k] = real ? __ldcg(&part_ml[ws]) : make_float2(-INFINITY, 0.f);
                po[k] = real ? __ldcg(reinterpret_cast<const float2*>(&part_o[ws * D + dim])) : make_float2(0.f, 0.f);
            }
#pragma unroll
            for (int k = 0; k < BATCH; ++k) {
                const float m_new = fmaxf(m, ml[k].x), keep = __expf(m - m_new), w = __expf(ml[k].x - m_new);
                l = l * keep + w * ml[k].y;
                o = make_float2(o.x * keep + w * po[k].x, o.y * keep + w * po[k].y);
                m = m_new;
            }
        }
        T* dst = out + ((int64_t)tok * nh + h) * D + dim;
        dst[0] = from_float<T>(o.x / l);
        dst[1] = from_float<T>(o.y / l);
    }
    if (threadIdx.x == 0) *counter = 0;
}

// The fused decode's inputs: `row` is the token's packed q|k|v projection output, not
// yet rotated. Every split rotates its G query heads into qs (pre-scaled); the split
// that holds the new token (position L - 1) also rotates its k and writes k and v into
// the cache, before pass 1 reads that row: no other block reads it, and the barrier
// after this makes the writes visible within the block. Values are rounded to T as
// rope_and_cache stores them, so the result equals rope_and_cache + attention.
// new_kv (optional): where the new k and v rows go in shared memory as well.
template <typename T, int D, int G>
__device__ __forceinline__ void rope_inputs(const T* row, int kvh, int nh, int nkv, const float* cs, int64_t slot,
                                            bool writes_new_kv, T* k_cache, T* v_cache, float (&qs)[G][D],
                                            float scale, T* new_k = nullptr, T* new_v = nullptr) {
    constexpr int H = D / 2;
    const int heads = writes_new_kv ? G + 1 : G;   // head G: the new k
    for (int i = threadIdx.x; i < heads * H; i += THREADS) {
        const int g = i / H, j = i % H;
        const T* x = row + (g == G ? nh + kvh : kvh * G + g) * D;
        const float c = cs[j], s = cs[H + j], x1 = to_float(x[j]), x2 = to_float(x[j + H]);
        const T o1 = from_float<T>(x1 * c - x2 * s), o2 = from_float<T>(x2 * c + x1 * s);
        if (g == G) {
            T* kc = k_cache + (slot * nkv + kvh) * D;
            kc[j] = o1;
            kc[j + H] = o2;
            if (new_k) {
                new_k[j] = o1;
                new_k[j + H] = o2;
            }
        } else {
            qs[g][j] = to_float(o1) * scale;
            qs[g][j + H] = to_float(o2) * scale;
        }
    }
    if (writes_new_kv)
        for (int j = threadIdx.x; j < D; j += THREADS) {
            const T v = row[(nh + nkv + kvh) * D + j];
            v_cache[(slot * nkv + kvh) * D + j] = v;
            if (new_v) new_v[j] = v;
        }
}

// The G queries of KV head kvh for token `tok`, pre-scaled, into qs: q's rows as they are,
// or with cos_sin given, rotated from the packed q|k|v row by rope_inputs, which also writes
// the new k and v into the cache where this block holds the row's last key (`holds_new`)
// and the token has a slot (new_k, new_v: see rope_inputs). Returns whether it wrote them.
template <typename T, int D, int G>
__device__ __forceinline__ bool load_queries(const T* q, int64_t q_stride, int tok, int kvh, int nh, int nkv,
                                             const int64_t* positions, const float* cos_sin, const int64_t* slots,
                                             bool holds_new, T* k_cache, T* v_cache, float (&qs)[G][D], float scale,
                                             T* new_k = nullptr, T* new_v = nullptr) {
    if (cos_sin) {   // the caches are not __restrict__/const: this block may write the row it then reads
        const int64_t slot = slots[tok];
        rope_inputs<T, D, G>(q + tok * q_stride, kvh, nh, nkv, cos_sin + positions[tok] * D, slot,
                             holds_new && slot >= 0, k_cache, v_cache, qs, scale, new_k, new_v);
        return holds_new && slot >= 0;
    }
    for (int i = threadIdx.x; i < G * D; i += THREADS)
        qs[i / D][i % D] = to_float(q[tok * q_stride + (int64_t)(kvh * G) * D + i]) * scale;
    return false;
}

// Attention of one chunk, keys [start, end) of token `tok`'s sequence for the G query heads
// of KV head kvh, from the K and V row sources given: the two passes and the softmax of the
// top of the file (qs: the rotated, pre-scaled queries; `scores`: G x chunk floats, both in
// shared memory). The result goes out through store_split (workspace row ws_split when the
// sequence has `used` > 1 chunks). on_last_v_rows() runs on thread 0 as it issues the
// chunk's last V loads.
template <typename T, int D, int G, typename KRows, typename VRows, typename OnLastVRows>
__device__ __forceinline__ void attend_chunk(const float (&qs)[G][D], float* scores, const KRows& k_rows,
                                             const VRows& v_rows, int start, int end, int chunk, int used, int tok,
                                             int kvh, int ws_split, int nh, T* __restrict__ out,
                                             float* __restrict__ part_o, float2* __restrict__ part_ml,
                                             OnLastVRows on_last_v_rows) {
    constexpr int DPT = D / DIM_LANES;
    __shared__ float red[THREADS / 32][G][D];      // cross-warp reduction of pass 2
    __shared__ float stat_m[G], stat_l[G];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int key_lane = tid / DIM_LANES, lane8 = tid % DIM_LANES, d0 = lane8 * DPT;
    constexpr int P = padded_heads(G), LOG2_P = P == 8 ? 3 : P == 4 ? 2 : P == 2 ? 1 : 0;

    // Pass 1: scores. This thread's query dims live in registers: shared-memory reads
    // per key were the rest of pass 1's MIO traffic.
    float qr[G][DPT];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int c = 0; c < DPT; ++c) qr[g][c] = qs[g][d0 + c];
    // Keys past `end` load as zero rows, and their scores (inside the chunk: N divides
    // it and jb - start) are stored like any other: no test per key.
    constexpr int N = unroll<T>();                 // consecutive keys per thread and step
    const int g_lane = lane8 >> (3 - LOG2_P);      // the head whose sum this lane ends up with
    const bool stores_sum = (lane8 & ((8 >> LOG2_P) - 1)) == 0 && g_lane < G;
    for (int j0 = start; j0 < end; j0 += KEY_LANES * N) {
        const int jb = j0 + key_lane * N;
        Row<T, DPT> rows[N];
        k_rows.load(rows, jb, end, d0);
#pragma unroll
        for (int u = 0; u < N; ++u) {
            float row[DPT];
            unpack(rows[u], row);
            float s[P];
#pragma unroll
            for (int g = 0; g < P; ++g) {
                s[g] = 0.f;
                if (g < G) {
#pragma unroll
                    for (int c = 0; c < DPT; ++c) s[g] += qr[g][c] * row[c];
                }
            }
            // The 8 dim lanes of a key are 8 consecutive lanes of one warp.
            const float sum = fold_heads<P>(s, lane8);
            if (stores_sum && jb < end) scores[g_lane * chunk + jb - start + u] = sum;
        }
    }
    __syncthreads();

    // Softmax statistics: one warp per head; scores become exp(s - max), and the
    // weights of the keys past `end` in the last N-key step become 0 (pass 2 then needs
    // no test per key either: their rows are zeros too).
    const int n = end - start, n_padded = (n + N - 1) / N * N;
    for (int g = warp; g < G; g += THREADS / 32) {
        float m = -INFINITY;
        for (int i = lane; i < n; i += 32) m = fmaxf(m, scores[g * chunk + i]);
        m = warp_max(m);
        float l = 0.f;
        for (int i = lane; i < n; i += 32) {
            const float p = __expf(scores[g * chunk + i] - m);
            scores[g * chunk + i] = p;
            l += p;
        }
        for (int i = n + lane; i < n_padded; i += 32) scores[g * chunk + i] = 0.f;
        l = warp_sum(l);
        if (lane == 0) { stat_m[g] = m; stat_l[g] = l; }
    }
    __syncthreads();

    // Pass 2: acc[g] = sum_j p[g][j] * v_j over this thread's keys and dims.
    float acc[G][DPT];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int c = 0; c < DPT; ++c) acc[g][c] = 0.f;
    for (int j0 = start; j0 < end; j0 += KEY_LANES * N) {
        const int jb = j0 + key_lane * N;
        if (tid == 0 && j0 + KEY_LANES * N >= end) on_last_v_rows();
        if (jb >= end) continue;
        Row<T, DPT> rows[N];
        v_rows.load(rows, jb, end, d0);
        // The weights of 2 consecutive keys in one 8-byte read (jb - start and chunk
        // are even, so the read stays in the head's row).
#pragma unroll
        for (int u2 = 0; u2 < N; u2 += 2) {
            float2 p[G];
#pragma unroll
            for (int g = 0; g < G; ++g) p[g] = *reinterpret_cast<const float2*>(&scores[g * chunk + jb - start + u2]);
#pragma unroll
            for (int u = u2; u < u2 + 2; ++u) {
                float row[DPT];
                unpack(rows[u], row);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float w = u == u2 ? p[g].x : p[g].y;
#pragma unroll
                    for (int c = 0; c < DPT; ++c) acc[g][c] += w * row[c];
                }
            }
        }
    }
    // Reduce over key lanes: the 4 in a warp by shuffles, the 4 warps through smem.
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int c = 0; c < DPT; ++c) {
            float a = acc[g][c];
            a += __shfl_xor_sync(0xffffffffu, a, 8);
            a += __shfl_xor_sync(0xffffffffu, a, 16);
            if (lane < DIM_LANES) red[warp][g][d0 + c] = a;
        }
    }
    __syncthreads();
    for (int i = tid; i < G * D; i += THREADS) {
        const int g = i / D, dim = i % D;
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) o += red[w][g][dim];
        store_split<T, D>(o, stat_m[g], stat_l[g], dim, used, tok, kvh * G + g, ws_split, nh, out, part_o, part_ml);
    }
}

// One work item: chunk `split` of sequence b, KV head kvh (row_plan[b]: keys per chunk, and
// the row's first workspace split, where its partials go). It claims the block's next item
// (into `next`) while it reads its last V rows: the atomic's round trip to L2 then overlaps
// them instead of delaying the next item's first loads. No earlier: a block busy with a
// long item would take work that an idle block should get.
template <typename T, int D, int G>
__device__ void decode_item(const T* __restrict__ q, int64_t q_stride, T* k_cache, T* v_cache,
                            const int* __restrict__ block_tables, int max_blocks,
                            const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                            T* __restrict__ out, float* __restrict__ part_o, float2* __restrict__ part_ml,
                            int* __restrict__ split_counters, int nh, int nkv, int bs, float scale,
                            const int64_t* __restrict__ positions, const float* __restrict__ cos_sin,
                            const int64_t* __restrict__ slots, const int2* __restrict__ row_plan, int b, int kvh,
                            int split, int* queue, int& next) {
    extern __shared__ float scores[];              // [G][chunk]
    __shared__ __align__(16) float qs[G][D];       // pre-scaled queries
    __shared__ int blocks[MAX_SPLIT_BLOCKS];       // the chunk's block-table slice
    __shared__ bool last_split;

    const int L = seq_lens[b];
    const int2 plan = row_plan[b];
    const int chunk = plan.x, first_split = plan.y;
    const int start = split * chunk, end = min(L, start + chunk);
    const int used = (L + chunk - 1) / chunk;      // chunks of this sequence
    const int tok = query_start_loc[b];
    const int* table = block_tables + (int64_t)b * max_blocks;
    const int tid = threadIdx.x;
    load_queries<T, D, G>(q, q_stride, tok, kvh, nh, nkv, positions, cos_sin, slots, end == L, k_cache, v_cache, qs,
                          scale);
    // Row addresses then need no dependent global load of the block table.
    const int bs_shift = __ffs(bs) - 1;            // the host keeps bs a power of two: no divisions per row
    const int first = start >> bs_shift;
    for (int i = tid; i <= ((end - 1) >> bs_shift) - first; i += THREADS) blocks[i] = table[first + i];
    __syncthreads();

    attend_chunk<T, D, G>(qs, scores, PagedRows<T, D>{k_cache, blocks, first, bs_shift, nkv, kvh},
                          PagedRows<T, D>{v_cache, blocks, first, bs_shift, nkv, kvh}, start, end, chunk, used, tok,
                          kvh, first_split + split, nh, out, part_o, part_ml,
                          [&] { next = atomicAdd(&queue[0], 1); });   // the last V rows: claim
    if (used > 1)
        combine_splits<T, D, G>(kvh, b, tok, used, first_split, nh, nkv, out, part_o, part_ml, split_counters,
                                last_split);
}

// Before pdl_start, at a small batch (latency-bound: a few hundred KB a layer): the cache
// blocks of the first `rows` rows into L2, spread over the grid. Their lengths and block
// tables are the step's uploaded inputs, written by no kernel; the blocks hold earlier
// steps' K/V (the new token's, written by the kernel before or after pdl_start here, is
// coherent in L2 either way).
template <typename T, int D>
__device__ __forceinline__ void prefetch_cached_kv(const T* k_cache, const T* v_cache, const int* block_tables,
                                                   int max_blocks, const int* seq_lens, int rows, int nkv, int bs) {
    const int64_t block_elems = (int64_t)bs * nkv * D;
    for (int row = 0; row < rows; ++row) {
        const int blocks = (seq_lens[row] + bs - 1) / bs;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < blocks; j += gridDim.x * blockDim.x) {
            const int64_t block = block_tables[(int64_t)row * max_blocks + j];
            prefetch_l2(k_cache + block * block_elems, block_elems * sizeof(T));
            prefetch_l2(v_cache + block * block_elems, block_elems * sizeof(T));
        }
    }
}

// The persistent loop: take the next item of the plan's list until none is left; the last
// block to finish resets the queue for the next launch.
template <typename T, int D, int G>
__device__ void attn_decode(const T* q, int64_t q_stride, T* k_cache, T* v_cache, const int* block_tables,
                            int max_blocks, const int* seq_lens, const int* query_start_loc, T* out, float* part_o,
                            float2* part_ml, int* split_counters, int nh, int nkv, int bs, float scale,
                            const int64_t* positions, const float* cos_sin, const int64_t* slots,
                            const int2* __restrict__ row_plan, const int2* __restrict__ items, int* queue,
                            int prefetch_rows) {
    prefetch_cached_kv<T, D>(k_cache, v_cache, block_tables, max_blocks, seq_lens, prefetch_rows, nkv, bs);
    pdl_start();
    __shared__ int next;
    const int count = queue[2];
    if (threadIdx.x == 0) next = atomicAdd(&queue[0], 1);
    __syncthreads();
    for (;;) {
        const int i = next;
        if (i >= count) break;
        const int2 item = items[i];
        decode_item<T, D, G>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens, query_start_loc,
                             out, part_o, part_ml, split_counters, nh, nkv, bs, scale, positions, cos_sin, slots,
                             row_plan, item.x, item.y & 255, item.y >> 8, queue, next);
        __syncthreads();   // `next` holds the claim, and the item's shared memory is free
    }
    if (threadIdx.x == 0 && atomicAdd(&queue[1], 1) == gridDim.x - 1) {
        queue[0] = 0;      // no block takes another item: the next launch starts from the top
        queue[1] = 0;
    }
}

// Decode attention for a batch of a few rows, where a step is latency-bound: no work list.
// The grid is (splits, nkv, B): block (s, kvh, b) takes chunk s of row b's keys for KV head
// kvh, the rows cut into chunks of `chunk` keys (a multiple of CHUNK_ALIGN; the host sizes
// the shared memory for them). The host gives enough splits for the longest row it may see; the splits
// past a row's end exit at once. Before pdl_start, a block copies
// its chunk's cached K and V rows into shared memory: the lengths and block tables are the
// step's uploaded inputs, and in a decode step those rows were written by earlier steps. Only
// the new token's row is the kernel before's (or this kernel's, with RoPE fused), so after the
// wait a block reads q (and that row), computes and combines: the loads that make a work-list
// item a chain of round trips (the queue, the item, its plan, the block table, K, V) are all
// behind it. A prefill step's last tokens (early_copy = 0) attend to rows the step's own
// kernels before this one wrote: there every row is copied after the wait.
// Launch: grid (splits, nkv, B), block 128, dynamic smem chunk x (2 D sizeof(T) + 4 G)
// bytes; split_counters as attn_decode's; part_o / part_ml hold B * splits workspace rows.
template <typename T, int D, int G>
__device__ void attn_decode_few(const T* __restrict__ q, int64_t q_stride, T* k_cache, T* v_cache,
                                const int* __restrict__ block_tables, int max_blocks,
                                const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc,
                                T* __restrict__ out, float* __restrict__ part_o, float2* __restrict__ part_ml,
                                int* __restrict__ split_counters, int nh, int nkv, int bs, float scale,
                                const int64_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                const int64_t* __restrict__ slots, int chunk, int early_copy) {
    constexpr int PIECES = D * (int)sizeof(T) / 16, PIECE = 16 / (int)sizeof(T);   // 16-byte pieces of a row
    extern __shared__ __align__(16) unsigned char few_smem[];
    T* ks = reinterpret_cast<T*>(few_smem);                         // [chunk][D] from key `start`
    T* vs = ks + chunk * D;                                         // [chunk][D]
    float* scores = reinterpret_cast<float*>(vs + chunk * D);       // [G][chunk]
    __shared__ __align__(16) float qs[G][D];
    __shared__ bool last_split;

    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, splits = gridDim.x;
    const int L = seq_lens[b];
    const int start = split * chunk;
    if (start >= L) return;
    const int end = min(L, start + chunk), used = (L + chunk - 1) / chunk;
    const int tok = query_start_loc[b];
    const int* table = block_tables + (int64_t)b * max_blocks;
    const int bs_shift = __ffs(bs) - 1;
    const auto copy_row = [&](int j, int piece) {
        const int64_t slot = ((int64_t)table[j >> bs_shift] << bs_shift) + (j & ((1 << bs_shift) - 1));
        const int64_t at = (slot * nkv + kvh) * D + piece * PIECE;
        cp_async16(ks + (j - start) * D + piece * PIECE, k_cache + at, true);
        cp_async16(vs + (j - start) * D + piece * PIECE, v_cache + at, true);
    };
    const int cached = min(end, L - 1) - start;                     // the rows before the new one
    const int early = early_copy ? cached : 0;                      // of them, written by earlier steps
    for (int i = threadIdx.x; i < early * PIECES; i += THREADS) copy_row(start + i / PIECES, i % PIECES);
    pdl_start();
    for (int i = early * PIECES + threadIdx.x; i < cached * PIECES; i += THREADS)
        copy_row(start + i / PIECES, i % PIECES);

    const bool holds_new = end == L;
    const bool rotated_new = load_queries<T, D, G>(q, q_stride, tok, kvh, nh, nkv, positions, cos_sin, slots,
                                                   holds_new, k_cache, v_cache, qs, scale,
                                                   ks + (L - 1 - start) * D, vs + (L - 1 - start) * D);
    if (holds_new && !rotated_new)   // the new row as the kernel before cached it
        for (int piece = threadIdx.x; piece < PIECES; piece += THREADS) copy_row(L - 1, piece);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    attend_chunk<T, D, G>(qs, scores, StagedRows<T, D>{ks, start}, StagedRows<T, D>{vs, start}, start, end, chunk,
                          used, tok, kvh, b * splits + split, nh, out, part_o, part_ml, [] {});
    if (used > 1)
        combine_splits<T, D, G>(kvh, b, tok, used, b * splits, nh, nkv, out, part_o, part_ml, split_counters,
                                last_split);
}

#define DECODE(T, N, D, G)                                                                                      \
    extern "C" __global__ void __launch_bounds__(THREADS, min_blocks_per_sm<T, D, G>) attn_decode_##N##_d##D##_g##G( \
        const T* q, int64_t q_stride, T* k_cache, T* v_cache, const int* block_tables, int max_blocks,         \
        const int* seq_lens, const int* query_start_loc, T* out, float* part_o, float2* part_ml,               \
        int* split_counters, int nh, int nkv, int bs, float scale, const int64_t* positions,                   \
        const float* cos_sin, const int64_t* slots, const int2* row_plan, const int2* items, int* queue,       \
        int prefetch_rows) {                                                                                   \
        attn_decode<T, D, G>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens,                 \
                             query_start_loc, out, part_o, part_ml, split_counters, nh, nkv, bs, scale,         \
                             positions, cos_sin, slots, row_plan, items, queue, prefetch_rows);                 \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS) attn_decode_few_##N##_d##D##_g##G(                     \
        const T* q, int64_t q_stride, T* k_cache, T* v_cache, const int* block_tables, int max_blocks,         \
        const int* seq_lens, const int* query_start_loc, T* out, float* part_o, float2* part_ml,               \
        int* split_counters, int nh, int nkv, int bs, float scale, const int64_t* positions,                   \
        const float* cos_sin, const int64_t* slots, int chunk, int early_copy) {                               \
        attn_decode_few<T, D, G>(q, q_stride, k_cache, v_cache, block_tables, max_blocks, seq_lens,             \
                                 query_start_loc, out, part_o, part_ml, split_counters, nh, nkv, bs, scale,     \
                                 positions, cos_sin, slots, chunk, early_copy);                                 \
    }
// One kernel per exact G (a compile-time head count: no per-key tests of it).
#define DECODE_DIM(T, N, D) DECODE(T, N, D, 1) DECODE(T, N, D, 2) DECODE(T, N, D, 3) DECODE(T, N, D, 4) DECODE(T, N, D, 8)
#define DECODE_ALL(T, N) DECODE_DIM(T, N, 64) DECODE_DIM(T, N, 128)
FOR_EACH_DTYPE(DECODE_ALL)
