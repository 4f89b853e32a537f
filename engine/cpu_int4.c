// y = x @ w^T for a GGUF 4-bit weight (w = q * d + m per block of 32 along K, q in 0..15): the
// decode-size matmul of engine/cpu_int4.py, in two builds chosen at run time by the CPU:
//   int4_matmul_bf16  bf16 activations, AVX-512 BF16 (described below);
//   int4_matmul_f32   float32 activations, AVX2 + FMA: each 16-column tile unpacked once into
//                     float32 weights, then 6 rows at a time over them (described below).
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
#include <stdlib.h>

enum { LANES = 16, BLOCK = 32, PAIRS = BLOCK / 2, ROWS = 8, HALF = 8, ROWS_F32 = 6, FEW_F32 = 8 };

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

// The float32 build (AVX2 + FMA) takes two formats of the same tiles and factors:
//   Q4  the nibble pairs above, w = q d + m;
//   Q8  GGUF's Q8_0 (the tied embedding / head): [N/16, K/32, 32 keys, 16 columns] int8, w = q d
//       (m stored as 0, so w = q d + m for both).
// q d is exact in float32 (at most 8 x 11 significant bits), so every w is dequantize()'s value
// to the bit, and the product is the dense float32 one but for the order of the sums.
// Up to FEW_F32 rows, each pair of keys of 8 columns is dequantized in registers and used at
// once by every row (one accumulator a row). Above, each 16-column tile is unpacked once into
// a float32 panel and the rows run over it 6 at a time: 12 accumulators, two panel loads and
// six broadcasts for 12 FMAs a key, so the FMA units set the pace. A panel is K x 16 floats
// (98 KB at K = 1,536: in L2), one a thread and call.
enum { Q4 = 4, Q8 = 8 };

// Bytes of one block of one 16-column tile.
static inline int block_bytes(const int format) { return format == Q4 ? PAIRS * LANES : BLOCK * LANES; }

// Keys 2p and 2p + 1 of the 8 columns from `col` on of block qg, as float32 w = q d + m.
static inline __attribute__((always_inline)) AVX2 void key_pair(
        const int format, const uint8_t* qg, int p, int col, __m256 d, __m256 m, __m256* w0, __m256* w1) {
    if (format == Q4) {
        const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(qg + p * LANES + col)));
        *w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(0xF))), d, m);
        *w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4)), d, m);
    } else {
        const uint8_t* key = qg + 2 * p * LANES + col;
        *w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)key))), d, m);
        *w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(
                  _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(key + LANES)))), d, m);
    }
}

// Block g's factors of the 8 columns from `col` on.
static inline __attribute__((always_inline)) AVX2 void block_factors(
        const uint16_t* tile_dm, int g, int col, __m256* d, __m256* m) {
    const uint16_t* dm = tile_dm + (int64_t)g * 2 * LANES + col;
    *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)dm));
    *m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(dm + LANES)));
}

// Rows 0 .. R of 8 columns (`col` on in the tile, n0 on in y), dequantized in registers.
static inline __attribute__((always_inline)) AVX2 void few_rows(
        const int format, const float* x, int K, const int R, const uint8_t* tile_q, const uint16_t* tile_dm,
        int col, float* y, int N, int n0) {
    __m256 acc[FEW_F32];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int g = 0; g < K / BLOCK; ++g) {
        __m256 d, m, w0, w1;
        block_factors(tile_dm, g, col, &d, &m);
        const uint8_t* qg = tile_q + (int64_t)g * block_bytes(format);
        for (int p = 0; p < PAIRS; ++p) {
            key_pair(format, qg, p, col, d, m, &w0, &w1);
            for (int r = 0; r < R; ++r) {
                const float* xr = x + (int64_t)r * K + g * BLOCK + 2 * p;
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr), w0, acc[r]);
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr + 1), w1, acc[r]);
            }
        }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + (int64_t)r * N + n0, acc[r]);
}

// One tile's panel [K][16]: key k's 16 columns at panel + 16 k.
static inline __attribute__((always_inline)) AVX2 void unpack_tile(
        const int format, int K, const uint8_t* tile_q, const uint16_t* tile_dm, float* panel) {
    for (int g = 0; g < K / BLOCK; ++g) {
        const uint8_t* qg = tile_q + (int64_t)g * block_bytes(format);
        for (int col = 0; col < LANES; col += HALF) {
            __m256 d, m, w0, w1;
            block_factors(tile_dm, g, col, &d, &m);
            for (int p = 0; p < PAIRS; ++p) {
                key_pair(format, qg, p, col, d, m, &w0, &w1);
                float* key = panel + ((int64_t)g * BLOCK + 2 * p) * LANES + col;
                _mm256_storeu_ps(key, w0);
                _mm256_storeu_ps(key + LANES, w1);
            }
        }
    }
}

// Rows r0 .. r0 + R of one tile (16 columns, n0 on) from its panel.
static inline __attribute__((always_inline)) AVX2 void panel_rows(
        const float* x, int K, int r0, const int R, const float* panel, float* y, int N, int n0) {
    __m256 acc[FEW_F32][2];    // sized for every count FOR_ROWS expands; R <= ROWS_F32 here
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float* xr = x + (int64_t)r0 * K;
    for (int k = 0; k < K; ++k) {
        const __m256 w0 = _mm256_loadu_ps(panel + (int64_t)k * LANES);
        const __m256 w1 = _mm256_loadu_ps(panel + (int64_t)k * LANES + HALF);
        for (int r = 0; r < R; ++r) {
            const __m256 xs = _mm256_broadcast_ss(xr + (int64_t)r * K + k);
            acc[r][0] = _mm256_fmadd_ps(xs, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xs, w1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(y + (int64_t)(r0 + r) * N + n0, acc[r][0]);
        _mm256_storeu_ps(y + (int64_t)(r0 + r) * N + n0 + HALF, acc[r][1]);
    }
}

// Every row count its own unrolled copy, so the accumulators stay in registers.
#define FOR_ROWS(R, CALL)                                                    \
    switch (R) {                                                             \
        case 8: { const int rows_ = 8; CALL; } break;                        \
        case 7: { const int rows_ = 7; CALL; } break;                        \
        case 6: { const int rows_ = 6; CALL; } break;                        \
        case 5: { const int rows_ = 5; CALL; } break;                        \
        case 4: { const int rows_ = 4; CALL; } break;                        \
        case 3: { const int rows_ = 3; CALL; } break;                        \
        case 2: { const int rows_ = 2; CALL; } break;                        \
        case 1: { const int rows_ = 1; CALL; } break;                        \
        default: break;                                                      \
    }

// x [M, K] float32, row-major; q and dm in `format`'s layout; y [M, N] float32.
static inline __attribute__((always_inline)) AVX2 void matmul_f32(
        const int format, const float* x, int M, int K, const uint8_t* q, const uint16_t* dm, int N, float* y) {
    const int blocks = K / BLOCK;
    const int64_t tile_bytes = (int64_t)blocks * block_bytes(format), tile_factors = (int64_t)blocks * 2 * LANES;
    if (M <= FEW_F32) {
#pragma omp parallel for schedule(static)
        for (int t = 0; t < N / HALF; ++t) {
            const uint8_t* tile_q = q + (t / 2) * tile_bytes;
            const uint16_t* tile_dm = dm + (t / 2) * tile_factors;
            FOR_ROWS(M, few_rows(format, x, K, rows_, tile_q, tile_dm, (t % 2) * HALF, y, N, t * HALF))
        }
        return;
    }
#pragma omp parallel
    {
        float* panel = aligned_alloc(32, (size_t)K * LANES * sizeof(float));
        if (!panel) abort();   // ~100 KB: a failure here is a broken process, not a result
#pragma omp for schedule(static)
        for (int t = 0; t < N / LANES; ++t) {
            unpack_tile(format, K, q + t * tile_bytes, dm + t * tile_factors, panel);
            int r0 = 0;
            for (; r0 + ROWS_F32 <= M; r0 += ROWS_F32) panel_rows(x, K, r0, ROWS_F32, panel, y, N, t * LANES);
            FOR_ROWS(M - r0, panel_rows(x, K, r0, rows_, panel, y, N, t * LANES))
        }
        free(panel);
    }
}

AVX2 void int4_matmul_f32(const float* x, int M, int K, const uint8_t* q, const uint16_t* dm, int N, float* y) {
    matmul_f32(Q4, x, M, K, q, dm, N, y);
}

AVX2 void int8_matmul_f32(const float* x, int M, int K, const uint8_t* q, const uint16_t* dm, int N, float* y) {
    matmul_f32(Q8, x, M, K, q, dm, N, y);
}
