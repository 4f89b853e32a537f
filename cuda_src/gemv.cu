// Small-batch linear layers, y[m, n] = sum_k x'[m, k] * W[n, k], with the elementwise
// op that precedes the GEMM in a Llama layer fused in front of it (the prologue):
//   gemv_plain: x' = x
//   gemv_norm:  x' = RMSNorm(x + residual) as rms_norm.cu computes it (the same
//               roundings); block 0 also writes the float32 residual r = x + residual
//   gemv_silu:  x' = silu(gate) * up of x = [gate | up], as silu_mul.cu rounds it
// At a handful of rows a decode step is bound by its kernel count and latency, not
// by bytes, so fusing the prologue saves a launch per GEMM; each block redoes the
// prologue (a few KB read from L2) instead of waiting for another kernel.
//
// Layout: x [M, Kin] (Kin = K, or 2K for silu), residual [M, K] float, W [N, K]
// row-major (torch's linear weight), y [M, N]; 16-bit T only (a W chunk of 8 is one
// 16-byte load). M <= MAX_ROWS, K % 8 == 0.
// Launch: grid = ceil(N / WARPS), block = 32 * WARPS; each warp owns one output
// feature n; dynamic smem = M * K * 4 bytes (x' as floats, rounded to T as the
// unfused ops round it), (M + 1) * K * 4 for the NORM kernels (the norm weight too).
#include "common.cuh"

namespace {
constexpr int WARPS = 4, MAX_ROWS = 8, CHUNKS = 4;  // 16-byte W chunks in flight per lane
enum Prologue { PLAIN, NORM, SILU };
}

// Before pdl_start, for the NORM prologue: the norm weight (written by no kernel) as
// floats into shared memory after x' (ws [K]), so the prologue's last pass reads no global
// memory. Made visible by the prologue's first barrier.
template <typename T>
__device__ __forceinline__ void stage_norm_weight(float* ws, const T* __restrict__ norm_weight, int K) {
    for (int k = threadIdx.x * 8; k < K; k += blockDim.x * 8) {
        float w[8];
        load8(norm_weight + k, w);
        store8(ws + k, w);
    }
}

// x' into shared memory as floats (xs [M][K]). Every thread takes 8-element chunks, so a
// block issues its loads of x together (a loop of single-element loads would pay one L2
// round trip per iteration). NORM reads the norm weight from ws (stage_norm_weight).
template <typename T, Prologue P>
__device__ void prologue(float* xs, const T* __restrict__ x, const float* __restrict__ residual,
                         const float* ws, float* __restrict__ res_out, int M, int K, float eps) {
    __shared__ float inv_rms[MAX_ROWS];
    const int per_row = K / 8;
#pragma unroll 4
    for (int c = threadIdx.x; c < M * per_row; c += blockDim.x) {
        const int m = c / per_row, k = (c % per_row) * 8;
        float v[8];
        if (P == SILU) {
            float g[8], u[8];
            load8(x + (int64_t)m * 2 * K + k, g);
            load8(x + (int64_t)m * 2 * K + K + k, u);
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = to_float(from_float<T>(silu_times<T>(g[i], u[i])));
        } else {
            load8(x + (int64_t)m * K + k, v);
            if (P == NORM && residual) {
                float r[8];
                load8(residual + (int64_t)m * K + k, r);
#pragma unroll
                for (int i = 0; i < 8; ++i) v[i] += r[i];
            }
            if (P == NORM && blockIdx.x == 0) store8(res_out + (int64_t)m * K + k, v);
        }
        store8(xs + m * K + k, v);
    }
    if (P == NORM) {
        __syncthreads();                                  // also makes ws visible
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        for (int m = warp; m < M; m += WARPS) {   // one warp per row: no block-wide reduction
            float ss = 0.f;
            for (int k = lane; k < K; k += 32) ss += xs[m * K + k] * xs[m * K + k];
            ss = warp_sum(ss);
            if (lane == 0) inv_rms[m] = rsqrtf(ss / K + eps);
        }
        __syncthreads();
#pragma unroll 4
        for (int c = threadIdx.x; c < M * per_row; c += blockDim.x) {
            const int m = c / per_row, k = (c % per_row) * 8;
            float w[8], v[8];
            load8(ws + k, w);
            load8(xs + m * K + k, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = to_float(from_float<T>(rms_normed<T>(v[i], inv_rms[m], w[i])));
            store8(xs + m * K + k, v);
        }
    }
    __syncthreads();
}

// The lane's CHUNKS 16-byte chunks of each of R rows of W from k0 on (zeros past K). Every
// chunk's load is issued before any is used: latency, not bandwidth, is the limit.
template <typename T, int R>
__device__ __forceinline__ void load_chunks(const T* const (&rows)[R], int K, int k0, uint4 (&chunk)[R][CHUNKS]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const int k = k0 + c * 32 * 8;
            chunk[r][c] = k < K ? *reinterpret_cast<const uint4*>(rows[r] + k) : make_uint4(0, 0, 0, 0);
        }
}

// Before pdl_start (weights are written by no kernel): the block's rows of W into L2, and
// each lane's first chunks of its warp's rows into registers, while the kernel before runs.
template <typename T, int R>
__device__ __forceinline__ void fetch_weights(const T* const (&rows)[R], int K, uint4 (&first)[R][CHUNKS]) {
    if (threadIdx.x % 32 == 0)
#pragma unroll
        for (int r = 0; r < R; ++r) prefetch_l2(rows[r], K * sizeof(T));
    load_chunks<T, R>(rows, K, threadIdx.x % 32 * 8, first);
}

// sums[r][m] = dot(x'[m], W row rows[r]) for R rows of W at once, in every lane of the warp;
// `first` holds the lane's first chunks (fetch_weights).
template <typename T, int R>
__device__ __forceinline__ void row_dots(const T* const (&rows)[R], const float* xs, int M, int K,
                                         const uint4 (&first)[R][CHUNKS], float (&sums)[R][MAX_ROWS]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MAX_ROWS; ++m) sums[r][m] = 0.f;
    for (int k0 = lane * 8; k0 < K; k0 += 32 * 8 * CHUNKS) {
        uint4 chunk[R][CHUNKS];
        if (k0 == lane * 8) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int c = 0; c < CHUNKS; ++c) chunk[r][c] = first[r][c];
        } else {
            load_chunks<T, R>(rows, K, k0, chunk);
        }
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            const int k = k0 + c * 32 * 8;
            if (k >= K) break;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float wf[8];
                load8(reinterpret_cast<const T*>(&chunk[r][c]), wf);
#pragma unroll
                for (int m = 0; m < MAX_ROWS; ++m) {
                    if (m >= M) break;
                    const float4 a = *reinterpret_cast<const float4*>(xs + m * K + k);
                    const float4 b = *reinterpret_cast<const float4*>(xs + m * K + k + 4);
                    sums[r][m] += a.x * wf[0] + a.y * wf[1] + a.z * wf[2] + a.w * wf[3]
                                + b.x * wf[4] + b.y * wf[5] + b.z * wf[6] + b.w * wf[7];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MAX_ROWS; ++m)
            if (m < M) sums[r][m] = warp_sum(sums[r][m]);
}

// The dot products of R rows of W with every x'[m], then lane 0 of the warp calls
// store(m, s) for each row m < M with s[r] = dot(x'[m], W row rows[r]).
template <typename T, int R, typename Store>
__device__ __forceinline__ void dots_then_store(const T* const (&rows)[R], const float* xs, int M, int K,
                                                const uint4 (&first)[R][CHUNKS], Store store) {
    float sums[R][MAX_ROWS];
    row_dots<T, R>(rows, xs, M, K, first, sums);
    if (threadIdx.x % 32) return;
#pragma unroll
    for (int m = 0; m < MAX_ROWS; ++m) {   // unrolled: sums stay in registers
        if (m >= M) break;
        float s[R];
#pragma unroll
        for (int r = 0; r < R; ++r) s[r] = sums[r][m];
        store(m, s);
    }
}

template <typename T, Prologue P>
__device__ void gemv(const T* __restrict__ x, const float* __restrict__ residual, const T* __restrict__ norm_weight,
                     float* __restrict__ res_out, const T* __restrict__ w, T* __restrict__ y,
                     int M, int N, int K, float eps) {
    extern __shared__ __align__(16) float xs[];     // [M][K], then NORM's ws [K]
    const int n = blockIdx.x * WARPS + threadIdx.x / 32;
    const T* rows[1] = {w + (int64_t)min(n, N - 1) * K};   // a warp past N fetches a row it will not use
    uint4 first[1][CHUNKS];
    fetch_weights<T, 1>(rows, K, first);
    if (P == NORM) stage_norm_weight(xs + M * K, norm_weight, K);
    pdl_start();
    prologue<T, P>(xs, x, residual, xs + M * K, res_out, M, K, eps);
    if (n >= N) return;
    dots_then_store<T, 1>(rows, xs, M, K, first, [&](int m, const float (&s)[1]) {
        y[(int64_t)m * N + n] = from_float<T>(s[0]);
    });
}

// The attention block's input in one kernel: RMSNorm + the packed q|k|v projection,
// then what rope_cache.cu does: half-split RoPE on q and k, and k, v into the paged
// cache at slot_mapping[m] (-1: not cached). A warp owns a RoPE pair (features i and
// i + d/2 of one q or k head: both dot products, then the rotation) or one v feature.
// y [M, (nh + 2 nkv) d] gets q and k rotated, as the unfused ops leave them.
// Launch: grid = ceil(((nh + nkv) d/2 + nkv d) / WARPS), block = 32 * WARPS, smem as gemv.
template <typename T>
__device__ void gemv_norm_qkv_rope(const T* __restrict__ x, const float* __restrict__ residual,
                                   const T* __restrict__ norm_weight, float* __restrict__ res_out,
                                   const T* __restrict__ w, T* __restrict__ y, int M, int K, float eps,
                                   const int64_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                   T* __restrict__ k_cache, T* __restrict__ v_cache,
                                   const int64_t* __restrict__ slots, int nh, int nkv, int d) {
    extern __shared__ __align__(16) float xs[];
    const int task = blockIdx.x * WARPS + threadIdx.x / 32, half = d / 2, pairs = (nh + nkv) * half;
    const int N = (nh + 2 * nkv) * d;
    // A pair task's two rows (features i and i + d/2 of a q or k head), or a v task's row
    // twice (a task past the last fetches the last row and does nothing).
    const int h = task / half, i = task % half;
    const int n = task < pairs ? h * d + i : min((nh + nkv) * d + task - pairs, N - 1);
    const T* rows[2] = {w + (int64_t)n * K, w + (int64_t)(task < pairs ? n + half : n) * K};
    uint4 first[2][CHUNKS];
    fetch_weights<T, 2>(rows, K, first);
    stage_norm_weight(xs + M * K, norm_weight, K);
    // Each row's rotation and cache slot: the step's uploaded positions and slots and the
    // RoPE table, written by no kernel, so fetched before pdl_start too.
    float rot_cos[MAX_ROWS], rot_sin[MAX_ROWS];
    int64_t slot_of[MAX_ROWS];
#pragma unroll
    for (int m = 0; m < MAX_ROWS; ++m) {
        if (m >= M) break;
        const float* cs = cos_sin + positions[m] * d;
        rot_cos[m] = cs[i];
        rot_sin[m] = cs[half + i];
        slot_of[m] = slots[m];
    }
    pdl_start();
    prologue<T, NORM>(xs, x, residual, xs + M * K, res_out, M, K, eps);
    if (task < pairs) {
        dots_then_store<T, 2>(rows, xs, M, K, first, [&](int m, const float (&dots)[2]) {
            // The GEMM's output rounding, then the rotation in float32, as the unfused ops.
            const float x1 = to_float(from_float<T>(dots[0])), x2 = to_float(from_float<T>(dots[1]));
            const float c = rot_cos[m], s = rot_sin[m];
            const T o1 = from_float<T>(x1 * c - x2 * s), o2 = from_float<T>(x2 * c + x1 * s);
            y[(int64_t)m * N + n] = o1;
            y[(int64_t)m * N + n + half] = o2;
            const int64_t slot = slot_of[m];
            if (h >= nh && slot >= 0) {
                T* kc = k_cache + (slot * nkv + (h - nh)) * d;
                kc[i] = o1;
                kc[i + half] = o2;
            }
        });
    } else if (task < pairs + nkv * d) {
        const int j = task - pairs;
        const T* row[1] = {rows[0]};
        const uint4(&first_row)[1][CHUNKS] = reinterpret_cast<const uint4(&)[1][CHUNKS]>(first[0]);
        dots_then_store<T, 1>(row, xs, M, K, first_row, [&](int m, const float (&dots)[1]) {
            const T o = from_float<T>(dots[0]);
            y[(int64_t)m * N + n] = o;
            const int64_t slot = slot_of[m];
            if (slot >= 0) v_cache[slot * nkv * d + j] = o;
        });
    }
}

#define GEMV(T, N)                                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) gemv_plain_##N(                                  \
        const T* x, const T* w, T* y, int M, int Nout, int K) {                                              \
        gemv<T, PLAIN>(x, nullptr, nullptr, nullptr, w, y, M, Nout, K, 0.f);                                   \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) gemv_norm_##N(                                   \
        const T* x, const float* residual, const T* norm_weight, float* res_out, const T* w, T* y, int M,     \
        int Nout, int K, float eps) {                                                                          \
        gemv<T, NORM>(x, residual, norm_weight, res_out, w, y, M, Nout, K, eps);                               \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) gemv_silu_##N(                                   \
        const T* x, const T* w, T* y, int M, int Nout, int K) {                                              \
        gemv<T, SILU>(x, nullptr, nullptr, nullptr, w, y, M, Nout, K, 0.f);                                    \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) gemv_norm_qkv_rope_##N(                          \
        const T* x, const float* residual, const T* norm_weight, float* res_out, const T* w, T* y, int M,     \
        int K, float eps, const int64_t* positions, const float* cos_sin, T* k_cache, T* v_cache,             \
        const int64_t* slots, int nh, int nkv, int d) {                                                        \
        gemv_norm_qkv_rope<T>(x, residual, norm_weight, res_out, w, y, M, K, eps, positions, cos_sin, k_cache, \
                              v_cache, slots, nh, nkv, d);                                                     \
    }
GEMV(bf16, bf16)
GEMV(f16, f16)
