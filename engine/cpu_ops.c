// The torch backend's own CPU kernels besides the matmuls (engine/cpu_ops.py), float32, AVX2 +
// FMA: a layer's RMSNorm (with its residual add), RoPE with the cache write, SiLU(gate) * up, and
// decode attention. At
// decode sizes torch's ops for these cost ~10-50 us each in dispatch and temporaries, where the
// arithmetic takes a few; these run one call each.
//
// Decode attention straight from the paged KV cache: one new query token a row. The torch
// backend otherwise gathers every row's
// blocks into a padded copy (two index_selects of ~0.5 MB a layer at 8 rows x 80 tokens) and
// then runs torch's SDPA over it with a mask; here each row reads its own keys in place.
//
// Work item: one (row, KV head), all the query heads of its group together, so each key and
// value vector is loaded once for the group. For each query head h of the group:
//   s_j = scale * q_h . k_j for the row's keys j < L (the block table maps j to a cache slot),
//   p_j = exp(s_j - max s), out_h = sum_j p_j v_j / sum_j p_j.
// Scores go to a scratch row of L floats a thread; exp is a vector polynomial (below), within
// 2 ulp of expf over the softmax's range (tests/test_cpu_ops.py bounds the whole result).
// Each function returns 0, or -1 on arguments it cannot take (nothing written then).
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma")))

enum { MAX_GROUP = 16 };

// The 8 sums of 8 vectors, as one vector (sum of v[u] in lane u).
static inline AVX2 __m256 hsum8(const __m256 v[8]) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    // a: lanes 0-3 the low halves' sums of v0..v3, lanes 4-7 their high halves'; b likewise.
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

static inline AVX2 float hsum(__m256 v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// exp(x) for x <= 0 (scores minus their max): 2^n * e^r with n = round(x / ln 2) and
// |r| <= ln 2 / 2, e^r by its degree-7 Taylor polynomial (error < 1e-8 relative there); ln 2 is
// split in two so r keeps its low bits. Below -87 the result is 0 (as expf underflows).
static inline AVX2 __m256 exp_nonpositive(__m256 x) {
    const __m256 floor_x = _mm256_set1_ps(-87.0f);
    const __m256 under = _mm256_cmp_ps(x, floor_x, _CMP_LT_OQ);
    x = _mm256_max_ps(x, floor_x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

// Where each of a row's L keys lives: the start of its (block, offset) slot for KV head 0, worked
// out by blocks (a division a key costs more than the key's arithmetic).
static inline void row_slots(const int32_t* table, int block_size, int L, int64_t slot_stride, int64_t* slots) {
    for (int b = 0, j = 0; j < L; ++b)
        for (int o = 0; o < block_size && j < L; ++o, ++j)
            slots[j] = ((int64_t)table[b] * block_size + o) * slot_stride;
}

// One work item: row r's KV head kv and its `group` query heads, head size D (a compile-time
// constant at each call, so the D / 8 accumulators of a head's output stay in registers).
static inline __attribute__((always_inline)) AVX2 void attend_item(
        const int D, const float* qg, int group, int L, int kv, const float* k_cache, const float* v_cache,
        const int64_t* slots, float scale, float* scores, int padded, float* og) {
    // Scores 8 keys at a time, so 8 FMA chains run side by side (one dot product alone waits on
    // its FMAs' latency); the keys past L repeat key L - 1 and are overwritten below.
    for (int j0 = 0; j0 < L; j0 += 8) {
        const float* k[8];
        for (int u = 0; u < 8; ++u) k[u] = k_cache + slots[j0 + u < L ? j0 + u : L - 1] + (int64_t)kv * D;
        for (int h = 0; h < group; ++h) {
            __m256 acc[8];
            for (int u = 0; u < 8; ++u) acc[u] = _mm256_setzero_ps();
            for (int i = 0; i < D / 8; ++i) {
                const __m256 qv = _mm256_loadu_ps(qg + h * D + 8 * i);
                for (int u = 0; u < 8; ++u) acc[u] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[u] + 8 * i), acc[u]);
            }
            _mm256_store_ps(scores + h * padded + j0, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
        }
    }
    for (int h = 0; h < group; ++h) {
        float* s = scores + h * padded;
        float top = -INFINITY;
        for (int j = 0; j < L; ++j) top = s[j] > top ? s[j] : top;
        for (int j = L; j < padded; ++j) s[j] = -INFINITY;   // exp gives 0 there
        __m256 total = _mm256_setzero_ps();
        for (int j = 0; j < padded; j += 8) {
            const __m256 p = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(s + j), _mm256_set1_ps(top)));
            _mm256_store_ps(s + j, p);
            total = _mm256_add_ps(total, p);
        }
        const __m256 inv = _mm256_set1_ps(1.0f / hsum(total));
        __m256 acc[D / 8];
        for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_setzero_ps();
        for (int j = 0; j < L; ++j) {
            const float* v = v_cache + slots[j] + (int64_t)kv * D;
            const __m256 p = _mm256_set1_ps(s[j]);
            for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * i), acc[i]);
        }
        for (int i = 0; i < D / 8; ++i) _mm256_storeu_ps(og + h * D + 8 * i, _mm256_mul_ps(acc[i], inv));
    }
}

// q [rows, nh, d]; k_cache, v_cache [blocks, block_size, nkv, d]; block_tables [rows, stride]
// int32; seq_lens [rows] int32; out [rows, nh, d]. d is 64 or 128, nh / nkv <= MAX_GROUP, every
// seq_len >= 1 (else -1).
AVX2 int paged_decode_attention_f32(const float* q, int rows, int nh, int nkv, int d, const float* k_cache,
                                    const float* v_cache, int block_size, const int32_t* block_tables,
                                    int table_stride, const int32_t* seq_lens, float scale, float* out) {
    const int group = nh / nkv;
    if ((d != 64 && d != 128) || group > MAX_GROUP || nh % nkv) return -1;
    int longest = 0;
    for (int r = 0; r < rows; ++r) {
        if (seq_lens[r] < 1) return -1;
        longest = seq_lens[r] > longest ? seq_lens[r] : longest;
    }
#pragma omp parallel
    {
        // Per thread: the group's score rows, each padded to a whole vector, and a row's slots.
        const int padded = (longest + 7) / 8 * 8;
        float* scores = aligned_alloc(32, (size_t)group * padded * sizeof(float));
        int64_t* slots = malloc((size_t)longest * sizeof(int64_t));
        if (!scores || !slots) abort();   // a few KB: a failure here is a broken process, not a result
#pragma omp for schedule(static)
        for (int item = 0; item < rows * nkv; ++item) {
            const int r = item / nkv, kv = item % nkv, L = seq_lens[r];
            row_slots(block_tables + (int64_t)r * table_stride, block_size, L, (int64_t)nkv * d, slots);
            const int64_t first = ((int64_t)r * nh + (int64_t)kv * group) * d;   // the group's first head
            if (d == 64)
                attend_item(64, q + first, group, L, kv, k_cache, v_cache, slots, scale, scores, padded, out + first);
            else
                attend_item(128, q + first, group, L, kv, k_cache, v_cache, slots, scale, scores, padded, out + first);
        }
        free(scores);
        free(slots);
    }
    return 0;
}

// RoPE on q [T, nh, d] and k [T, nkv, d] in place (rows `stride` floats apart, as views of one
// q|k|v projection), then k and v [T, nkv, d] into their cache slots [T] (-1: none, padding).
// cos_sin [positions, d] is cos | sin of each frequency (engine.model.rope_cos_sin). The
// rotation is the torch backend's to the bit: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin,
// each product rounded, then the sum (no FMA). d % 16 == 0 (else -1).
static inline AVX2 void rotate(float* x, const float* cs, int half) {
    for (int i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + half + i);
        _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(x + half + i, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
    }
}

AVX2 int rope_cache_f32(float* q, float* k, const float* v, int64_t stride, int T, int nh, int nkv, int d,
                        const float* cos_sin, const int64_t* positions, const int64_t* slots, float* k_cache,
                        float* v_cache) {
    if (d % 16) return -1;
    for (int t = 0; t < T; ++t) {
        const float* cs = cos_sin + positions[t] * d;
        for (int h = 0; h < nh; ++h) rotate(q + t * stride + (int64_t)h * d, cs, d / 2);
        for (int h = 0; h < nkv; ++h) rotate(k + t * stride + (int64_t)h * d, cs, d / 2);
        if (slots[t] >= 0) {
            memcpy(k_cache + slots[t] * nkv * d, k + t * stride, (size_t)nkv * d * sizeof(float));
            memcpy(v_cache + slots[t] * nkv * d, v + t * stride, (size_t)nkv * d * sizeof(float));
        }
    }
    return 0;
}

// r = x + residual (residual NULL: r is x, not written), out = weight * (r / rms(r)) with
// rms(r) = sqrt(mean(r^2) + eps), a row of H at a time; x, residual, r, out [T, H], weight [H].
// H % 8 == 0 (else -1). The same products as the torch backend's rms_norm, summed in 8 lanes.
AVX2 int rms_norm_f32(const float* x, const float* residual, const float* weight, int T, int H, float eps,
                      float* r, float* out) {
    if (H % 8) return -1;
    for (int t = 0; t < T; ++t) {
        const float* xt = x + (int64_t)t * H;
        float* rt = residual ? r + (int64_t)t * H : (float*)xt;
        __m256 squares = _mm256_setzero_ps();
        for (int i = 0; i < H; i += 8) {
            __m256 v = _mm256_loadu_ps(xt + i);
            if (residual) {
                v = _mm256_add_ps(v, _mm256_loadu_ps(residual + (int64_t)t * H + i));
                _mm256_storeu_ps(rt + i, v);
            }
            squares = _mm256_fmadd_ps(v, v, squares);
        }
        const __m256 inv = _mm256_set1_ps(1.0f / sqrtf(hsum(squares) / H + eps));
        for (int i = 0; i < H; i += 8)
            _mm256_storeu_ps(out + (int64_t)t * H + i, _mm256_mul_ps(_mm256_loadu_ps(weight + i),
                                                                     _mm256_mul_ps(_mm256_loadu_ps(rt + i), inv)));
    }
    return 0;
}

// out [T, I] = silu(gate) * up for x [T, 2I] = gate | up; silu(g) = g * sigmoid(g), sigmoid from
// e = exp(-|g|) (1 / (1 + e) for g >= 0, e / (1 + e) below), so exp never overflows. I % 8 == 0.
AVX2 int silu_mul_f32(const float* x, int T, int I, float* out) {
    if (I % 8) return -1;
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    for (int t = 0; t < T; ++t) {
        const float* gate = x + (int64_t)t * 2 * I;
        for (int i = 0; i < I; i += 8) {
            const __m256 g = _mm256_loadu_ps(gate + i);
            const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign));          // exp(-|g|)
            const __m256 numerator = _mm256_blendv_ps(one, e, g);             // by g's sign bit
            const __m256 sig = _mm256_div_ps(numerator, _mm256_add_ps(one, e));
            _mm256_storeu_ps(out + (int64_t)t * I + i,
                             _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(gate + I + i)));
        }
    }
    return 0;
}
