// y = x @ w^T for a GGUF 4-bit weight (w = q * d + m per block of 32 along K, q in 0..15): the
// decode-size matmul of engine/cpu_int4.py, in two builds chosen at run time by the CPU:
//   int4_matmul_bf16  bf16 activations, AVX-512 BF16 (described below);
//   int4_matmul_f32   float32 activations, AVX2 + FMA: each 16-column tile as two halves of 8
//                     lanes, a pair of keys expanded to two float vectors, 4 rows at a time
//                     (16 registers hold no more accumulators).
// Each function names its own target, so the library loads on any x86-64 CPU.
//
// Lanes are 16 output columns. The weight is stored in tiles of 16 columns (see pack in
// cpu_int4.py): for block g and key pair p, 16 bytes hold (q[2p], q[2p+1]) of the 16 columns as
// the low and high nibble, expanded here into 16 bf16 pairs; the activations' (x[2p], x[2p+1])
// pair is broadcast, and vdpbf16ps adds both products to each column's lane. The products of
// small integers and bf16 values are exact in float32, so a block's sum is exact but for float32
// addition; then y += d * sum(x q) + m * sum(x) with d and m the file's own float16 values
// (the torch kernel this replaces rounds them to bf16). Rows go 8 at a time, each with its
// block accumulator and its output accumulator in registers; tiles of columns are split
// between threads (OpenMP).
#include <immintrin.h>
#include <stdint.h>

enum { LANES = 16, BLOCK = 32, PAIRS = BLOCK / 2, ROWS = 8, HALF = 8, ROWS_F32 = 4 };

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512bf16,f16c")))
#define AVX2 __attribute__((target("avx2,fma,f16c")))

// bf16 bit patterns of the integers 0..15, indexed by a nibble (vpermw takes 32 entries).
static const uint16_t BF16_OF[32] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
                                     0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};

// Rows r0 .. r0 + R of one 16-column tile. R is a compile-time constant at every call site,
// so the accumulators stay in registers.
static inline __attribute__((always_inline)) AVX512 void tile_rows(
        const uint16_t* x, int K, int r0, const int R, const uint8_t* tile_q, const uint16_t* tile_dm,
        const float* block_sums, uint16_t* y, int N, int n0) {
    const __m512i table = _mm512_loadu_si512((const void*)BF16_OF);
    const __m512i low = _mm512_set1_epi32(0xF);
    const int blocks = K / BLOCK;
    __m512 out[ROWS];
    for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
    for (int g = 0; g < blocks; ++g) {
        __m512 acc[ROWS];
        for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
        const uint8_t* qg = tile_q + (int64_t)g * PAIRS * LANES;
        for (int p = 0; p < PAIRS; ++p) {
            const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(qg + p * LANES)));
            const __m512i nibbles = _mm512_or_si512(_mm512_and_si512(bytes, low),
                                                    _mm512_slli_epi32(_mm512_srli_epi32(bytes, 4), 16));
            const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(nibbles, table);
            for (int r = 0; r < R; ++r) {
                const uint32_t pair = *(const uint32_t*)(x + (int64_t)(r0 + r) * K + g * BLOCK + 2 * p);
                acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32((int)pair), w);
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(tile_dm + (int64_t)g * 2 * LANES)));
        const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(tile_dm + (int64_t)g * 2 * LANES + LANES)));
        for (int r = 0; r < R; ++r) {
            out[r] = _mm512_fmadd_ps(acc[r], d, out[r]);
            out[r] = _mm512_fmadd_ps(_mm512_set1_ps(block_sums[(r0 + r) * blocks + g]), m, out[r]);
        }
    }
    for (int r = 0; r < R; ++r)   // round to nearest even, as torch casts float32 to bf16
        _mm256_storeu_si256((__m256i*)(y + (int64_t)(r0 + r) * N + n0), (__m256i)_mm512_cvtneps_pbh(out[r]));
}

// x [M, K] bf16, row-major; q [N/16, K/32, 16 pairs, 16 columns] nibble pairs; dm [N/16, K/32,
// 2, 16] float16 (d, then m); block_sums [M, K/32] float32 scratch; y [M, N] bf16.
// K % 32 == 0 and N % 16 == 0 (the caller checks).
AVX512 void int4_matmul_bf16(const uint16_t* x, int M, int K, const uint8_t* q, const uint16_t* dm, int N,
                      float* block_sums, uint16_t* y) {
    const int blocks = K / BLOCK;
    const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int i = 0; i < M * blocks; ++i) {    // sum(x) per row and block, for the m term
        const __m512i xs = _mm512_loadu_si512((const void*)(x + (int64_t)i * BLOCK));
        block_sums[i] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)xs, ones));
    }
    const int tiles = N / LANES;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tiles; ++t) {
        const uint8_t* tile_q = q + (int64_t)t * blocks * PAIRS * LANES;
        const uint16_t* tile_dm = dm + (int64_t)t * blocks * 2 * LANES;
        int r0 = 0;
        for (; r0 + ROWS <= M; r0 += ROWS) tile_rows(x, K, r0, ROWS, tile_q, tile_dm, block_sums, y, N, t * LANES);
        switch (M - r0) {   // the last rows, each count its own unrolled copy
            case 7: tile_rows(x, K, r0, 7, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 6: tile_rows(x, K, r0, 6, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 5: tile_rows(x, K, r0, 5, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 4: tile_rows(x, K, r0, 4, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 3: tile_rows(x, K, r0, 3, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 2: tile_rows(x, K, r0, 2, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            case 1: tile_rows(x, K, r0, 1, tile_q, tile_dm, block_sums, y, N, t * LANES); break;
            default: break;
        }
    }
}

// Rows r0 .. r0 + R of one half (8 columns, n0 on) of a 16-column tile, float32 activations.
static inline __attribute__((always_inline)) AVX2 void half_tile_rows(
        const float* x, int K, int r0, const int R, const uint8_t* tile_q, const uint16_t* tile_dm, int half,
        const float* block_sums, float* y, int N, int n0) {
    const __m256i low = _mm256_set1_epi32(0xF);
    const int blocks = K / BLOCK;
    __m256 out[ROWS_F32];
    for (int r = 0; r < R; ++r) out[r] = _mm256_setzero_ps();
    for (int g = 0; g < blocks; ++g) {
        __m256 acc[ROWS_F32];
        for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
        const uint8_t* qg = tile_q + (int64_t)g * PAIRS * LANES + half * HALF;
        for (int p = 0; p < PAIRS; ++p) {
            const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(qg + p * LANES)));
            const __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, low));
            const __m256 w1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
            for (int r = 0; r < R; ++r) {
                const float* xr = x + (int64_t)(r0 + r) * K + g * BLOCK + 2 * p;
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr), w0, acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr + 1), w1, acc[r]);
            }
        }
        const uint16_t* dm = tile_dm + (int64_t)g * 2 * LANES + half * HALF;
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)dm));
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(dm + LANES)));
        for (int r = 0; r < R; ++r) {
            out[r] = _mm256_fmadd_ps(acc[r], d, out[r]);
            out[r] = _mm256_fmadd_ps(_mm256_set1_ps(block_sums[(r0 + r) * blocks + g]), m, out[r]);
        }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + (int64_t)(r0 + r) * N + n0, out[r]);
}

// As int4_matmul_bf16, with x [M, K] and y [M, N] float32.
AVX2 void int4_matmul_f32(const float* x, int M, int K, const uint8_t* q, const uint16_t* dm, int N,
                          float* block_sums, float* y) {
    const int blocks = K / BLOCK;
    for (int i = 0; i < M * blocks; ++i) {
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < BLOCK; j += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + (int64_t)i * BLOCK + j));
        const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        const __m128 q2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
        block_sums[i] = _mm_cvtss_f32(_mm_add_ss(q2, _mm_shuffle_ps(q2, q2, 1)));
    }
    const int halves = N / HALF;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < halves; ++t) {
        const uint8_t* tile_q = q + (int64_t)(t / 2) * blocks * PAIRS * LANES;
        const uint16_t* tile_dm = dm + (int64_t)(t / 2) * blocks * 2 * LANES;
        int r0 = 0;
        for (; r0 + ROWS_F32 <= M; r0 += ROWS_F32)
            half_tile_rows(x, K, r0, ROWS_F32, tile_q, tile_dm, t % 2, block_sums, y, N, t * HALF);
        switch (M - r0) {
            case 3: half_tile_rows(x, K, r0, 3, tile_q, tile_dm, t % 2, block_sums, y, N, t * HALF); break;
            case 2: half_tile_rows(x, K, r0, 2, tile_q, tile_dm, t % 2, block_sums, y, N, t * HALF); break;
            case 1: half_tile_rows(x, K, r0, 1, tile_q, tile_dm, t % 2, block_sums, y, N, t * HALF); break;
            default: break;
        }
    }
}
