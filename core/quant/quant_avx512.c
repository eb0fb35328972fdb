/* quant_avx512.c — AVX-512 dot kernels with VNNI (the Makefile adds
 * -mavx512f/bw/vl/dq/vnni/bf16).
 *
 * The instruction everything rests on is _mm512_dpbusd_epi32: unsigned bytes
 * times signed bytes, four products summed straight into each int32 lane,
 * without the int16 step (and its saturation) of AVX2's maddubs.  So every
 * weight code goes in unsigned and its bias comes off afterwards:
 *     Σ (u - bias)·y = dpbusd(u, y) - dpbusd(bias, y)
 * with u the stored code (Q4_0, Q5_0), the code + 128 (Q8_0: an xor; IQ4:
 * a table of value + 128), or the raw K-quant code whose min or -32 bias is
 * folded in later through the Q8_K bsums.
 *
 * A 512-bit register holds 64 codes: two 32-value blocks of the small
 * formats (an odd last block is paired with itself at scale zero), or a
 * quarter of a K-quant super-block.  Lanes 0..7 then belong to the first
 * 32 values and lanes 8..15 to the second, so scales are two-valued vectors
 * and no horizontal sum is needed until the end of the row. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>
#include <stddef.h>

static inline float half(uint16_t h) { return _cvtsh_ss(h); }

static inline __m512i zero512(void) { return _mm512_setzero_si512(); }
static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

/* [a | b] from two 256-bit halves. */
static inline __m512i join256(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

/* Lanes 0..7 = a, lanes 8..15 = b. */
static inline __m512 split_ps(float a, float b)
{
    return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* Σ (u - bias)·y in each int32 lane (4 bytes). */
static inline __m512i dot_biased(__m512i u, __m512i y, int bias)
{
    __m512i sum = _mm512_dpbusd_epi32(zero512(), u, y);
    return _mm512_sub_epi32(sum, _mm512_dpbusd_epi32(zero512(), _mm512_set1_epi8((char)bias), y));
}

/* Two 16-byte nibble groups (32 values each) as 64 bytes in value order:
 * [a low nibbles, a high nibbles, b low nibbles, b high nibbles]. */
static inline __m512i nibbles64(const uint8_t *qa, const uint8_t *qb)
{
    __m256i ab = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qb), _mm_loadu_si128((const __m128i *)qa));
    __m512i v = join256(ab, _mm256_srli_epi16(ab, 4)); /* a, b, a>>4, b>>4 */
    v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_and_si512(v, _mm512_set1_epi8(15));
}

/* 32 bytes of nibbles as 64 bytes: low nibbles, then high nibbles. */
static inline __m512i nibbles_lo_hi(__m256i bytes)
{
    return _mm512_and_si512(join256(bytes, _mm256_srli_epi16(bytes, 4)), _mm512_set1_epi8(15));
}

/* Activations of two Q8_0/Q8_1 blocks side by side. */
static inline __m512i act64(const int8_t *a, const int8_t *b) { return join256(load256(a), load256(b)); }

/* ---- plain floats against fp32 activations ---- */

static inline __m512 load16_f32(const void *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 load16_f16(const void *p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
static inline __m512 load16_bf16(const void *p, __mmask16 m)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* Four accumulators hide the FMA latency; the tail is a masked load, so
 * there is no scalar loop.  Always inlined: `load` is a constant. */
QUANT_INLINE float float_dot(int64_t n, const uint8_t *x, size_t elem,
                             const float *y,
                             __m512 (*load)(const void *, __mmask16))
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(load(x + i * elem, 0xffff), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(load(x + (i + 16) * elem, 0xffff), _mm512_loadu_ps(y + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(load(x + (i + 32) * elem, 0xffff), _mm512_loadu_ps(y + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(load(x + (i + 48) * elem, 0xffff), _mm512_loadu_ps(y + i + 48), acc3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        acc0 = _mm512_fmadd_ps(load(x + i * elem, m), _mm512_maskz_loadu_ps(m, y + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

static void dot_f32(int64_t n, float *s, const void *x, const void *y) { *s = float_dot(n, x, 4, y, load16_f32); }
static void dot_f16(int64_t n, float *s, const void *x, const void *y) { *s = float_dot(n, x, 2, y, load16_f16); }
static void dot_bf16(int64_t n, float *s, const void *x, const void *y) { *s = float_dot(n, x, 2, y, load16_bf16); }

/* ---- 32-value formats, two blocks per step ----
 * Each kernel walks pairs (i, j = i + 1); an odd last block pairs with itself
 * and gets scale 0 the second time, so there is no tail loop. */

static inline int64_t pair_of(int64_t i, int64_t nb) { return i + 1 < nb ? i + 1 : i; }

/* Scales of the pair: a's, and b's unless b is a again. */
static inline __m512 pair_scales(float a, float b, bool twice) { return split_ps(a, twice ? 0.0f : b); }

static inline float first_half(const uint8_t *b)
{
    uint16_t h;
    memcpy(&h, b, 2);
    return half(h);
}

/* Q4_0, Q5_0, Q8_0 and IQ4_NL against Q8_0: value d * (u - bias), u an
 * unsigned code; the formats differ only in how two blocks' 64 codes are
 * unpacked.  Always inlined, so `codes` is a constant. */
QUANT_INLINE float dot_pairs(int64_t n, const uint8_t *x, size_t bsize,
                             __m512i (*codes)(const uint8_t *, const uint8_t *),
                             int bias, const block_q8_0 *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0, nb = n / QK_SMALL; i < nb; i += 2) {
        int64_t j = pair_of(i, nb);
        const uint8_t *a = x + i * bsize, *b = x + j * bsize;
        __m512i sumi = dot_biased(codes(a, b), act64(y[i].qs, y[j].qs), bias);
        __m512 d = pair_scales(first_half(a) * half(y[i].d), first_half(b) * half(y[j].d), i == j);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), d, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Q5 codes of blocks i and j: nibbles, plus 16 where the qh bit is set
 * (qh bit k is value k, so the two 32-bit fields are one 64-bit mask). */
static inline __m512i q5_codes(const uint8_t *qs_i, const uint8_t *qh_i, const uint8_t *qs_j, const uint8_t *qh_j)
{
    uint32_t hi, hj;
    memcpy(&hi, qh_i, 4);
    memcpy(&hj, qh_j, 4);
    __mmask64 bits = (__mmask64)hi | (__mmask64)hj << 32;
    return _mm512_or_si512(nibbles64(qs_i, qs_j), _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16)));
}

/* The IQ4 table biased by +128 (all values become unsigned), in every
 * 128-bit lane for _mm512_shuffle_epi8 lookups. */
static inline __m512i iq4_table_u8(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)quant_iq4nl_values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(t, _mm_set1_epi8((char)0x80)));
}

static inline __m512i u_q4_0(const uint8_t *a, const uint8_t *b) { return nibbles64(a + 2, b + 2); }
static inline __m512i u_q5_0(const uint8_t *a, const uint8_t *b) { return q5_codes(a + 6, a + 2, b + 6, b + 2); }
static inline __m512i u_q8_0(const uint8_t *a, const uint8_t *b) /* w + 128 */
{
    return _mm512_xor_si512(act64((const int8_t *)a + 2, (const int8_t *)b + 2), _mm512_set1_epi8((char)0x80));
}
static inline __m512i u_iq4_nl(const uint8_t *a, const uint8_t *b)
{
    return _mm512_shuffle_epi8(iq4_table_u8(), nibbles64(a + 2, b + 2));
}

static void dot_q4_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_pairs(n, x, sizeof(block_q4_0), u_q4_0, 8, y);
}
static void dot_q5_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_pairs(n, x, sizeof(block_q5_0), u_q5_0, 16, y);
}
static void dot_q8_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_pairs(n, x, sizeof(block_q8_0), u_q8_0, 128, y);
}
static void dot_iq4_nl(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_pairs(n, x, sizeof(block_iq4_nl), u_iq4_nl, 128, y);
}

/* Value d*q + m: the min multiplies Σy, taken from the codes (not `s`).
 * Q4_1 and Q5_1 (both d, m first) differ in how a pair's codes unpack. */
QUANT_INLINE float dot_affine(int64_t n, const uint8_t *x, size_t bsize,
                              __m512i (*codes)(const uint8_t *, const uint8_t *), const block_q8_1 *y)
{
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0, nb = n / QK_SMALL; i < nb; i += 2) {
        int64_t j = pair_of(i, nb);
        const uint8_t *a = x + i * bsize, *b = x + j * bsize;
        __m512i act = act64(y[i].qs, y[j].qs);
        __m512i sumi = _mm512_dpbusd_epi32(zero512(), codes(a, b), act);
        __m512i sumy = _mm512_dpbusd_epi32(zero512(), _mm512_set1_epi8(1), act);
        float dyi = half(y[i].d), dyj = i == j ? 0.0f : half(y[j].d);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), split_ps(first_half(a) * dyi, first_half(b) * dyj), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumy), split_ps(first_half(a + 2) * dyi, first_half(b + 2) * dyj), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline __m512i u_q4_1(const uint8_t *a, const uint8_t *b)
{
    return nibbles64(a + offsetof(block_q4_1, qs), b + offsetof(block_q4_1, qs));
}
static inline __m512i u_q5_1(const uint8_t *a, const uint8_t *b)
{
    return q5_codes(a + offsetof(block_q5_1, qs), a + offsetof(block_q5_1, qh), b + offsetof(block_q5_1, qs),
                    b + offsetof(block_q5_1, qh));
}

static void dot_q4_1(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_affine(n, x, sizeof(block_q4_1), u_q4_1, y);
}
static void dot_q5_1(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_affine(n, x, sizeof(block_q5_1), u_q5_1, y);
}

/* ---- 256-value formats against Q8_K: a quarter (64 values) per step ---- */

/* For quarter c of a super-block: lane k takes entry 2c (k < 8) or 2c+1
 * (k >= 8) of a vector of eight per-sub-block values. */
static inline __m512i per_quarter(__m512i v8, int c)
{
    const __m512i pick = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_epi32(_mm512_add_epi32(pick, _mm512_set1_epi32(2 * c)), v8);
}

/* Q4_K/Q5_K scales and mins as int32: lanes 0..7 scales, 8..15 mins. */
static inline __m512i kq_scales(const uint8_t s[12])
{
    uint32_t w[4];
    quant_kscale_words(s, w);
    return _mm512_cvtepu8_epi32(_mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]));
}

/* Σ_j m_j · Σ y over sub-block j, per sub-block in 8 lanes, from the bsums
 * (adjacent pairs of 16-value sums make the 32-value sums). */
static inline __m256i kq_mins(__m512i scales_mins, const int16_t bsums[16])
{
    __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    return _mm256_mullo_epi32(_mm512_extracti64x4_epi64(scales_mins, 1), pairs);
}

/* One Q4_K/Q5_K super-block: quarter c holds sub-blocks 2c (low nibbles)
 * and 2c+1 (high); qh gives Q5_K's fifth bits (NULL for Q4_K).  Adds the
 * scaled part to acc and the mins part to mins_acc. */
static inline void kq_dot(const uint8_t *qs, const uint8_t *scales, const uint8_t *qh, uint16_t d, uint16_t dmin,
                          const block_q8_K *y, __m512 *acc, __m256 *mins_acc)
{
    __m512i sm = kq_scales(scales), sumi = zero512();
    for (int c = 0; c < 4; c++) {
        __m512i u = nibbles_lo_hi(load256(qs + 32 * c));
        if (qh) { /* bit 2c of qh[l] is value 64c + l, bit 2c+1 value 64c + 32 + l */
            __m256i h = load256(qh);
            __mmask64 bits = (__mmask64)_mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << (2 * c)))) |
                             (__mmask64)_mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(2 << (2 * c)))) << 32;
            u = _mm512_or_si512(u, _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16)));
        }
        __m512i dot = _mm512_dpbusd_epi32(zero512(), u, load512(y->qs + 64 * c));
        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dot, per_quarter(sm, c)));
    }
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(y->d * half(d)), *acc);
    __m256 mins = _mm256_cvtepi32_ps(kq_mins(sm, y->bsums));
    *mins_acc = _mm256_fmadd_ps(mins, _mm256_set1_ps(y->d * half(dmin)), *mins_acc);
}

static void dot_q4_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 mins = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++)
        kq_dot(x[i].qs, x[i].scales, NULL, x[i].d, x[i].dmin, &y[i], &acc, &mins);
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(mins));
}

static void dot_q5_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q5_K *x = vx;
    const block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 mins = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++)
        kq_dot(x[i].qs, x[i].scales, x[i].qh, x[i].d, x[i].dmin, &y[i], &acc, &mins);
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(_mm512_zextps256_ps512(mins));
}

/* Scales of sub-blocks 4k..4k+3 (16 values = 4 lanes each) as 16 int32. */
static inline __m512i q6_scales(__m128i sc, int k)
{
    const __m128i fours = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m128i idx = _mm_add_epi8(fours, _mm_set1_epi8((char)(4 * k)));
    return _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc, idx));
}

/* Q6_K: per half, [ql0 | ql1] low nibbles with qh bits 0-1 | 2-3 are values
 * 0..63, high nibbles with bits 4-5 | 6-7 are values 64..127.  The codes go
 * in unsigned; the -32 comes off as 32·Σ sc_j·bsums_j. */
static void dot_q6_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    const __m512i f = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m512i sumi = zero512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = join256(load256(x[i].ql + 64 * h), load256(x[i].ql + 64 * h + 32));
            __m256i qh256 = load256(x[i].qh + 32 * h);
            __m512i qh = join256(qh256, _mm256_srli_epi16(qh256, 2));
            __m512i u0 = _mm512_or_si512(_mm512_and_si512(ql, f), _mm512_slli_epi16(_mm512_and_si512(qh, three), 4));
            __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), f),
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), three), 4));
            __m512i d0 = _mm512_dpbusd_epi32(zero512(), u0, load512(y[i].qs + 128 * h));
            __m512i d1 = _mm512_dpbusd_epi32(zero512(), u1, load512(y[i].qs + 128 * h + 64));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(d0, q6_scales(sc, 2 * h)));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(d1, q6_scales(sc, 2 * h + 1)));
        }
        sumi = _mm512_sub_epi32(sumi, _mm512_maskz_set1_epi32(1, 32 * quant_bsums16_dot(x[i].scales, y[i].bsums)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(y[i].d * half(x[i].d)), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* The eight IQ4_XS sub-block scales (6-bit, minus 32) as int32 lanes:
 * scale j has its low nibble at bit 4j of scales_l, its top two bits at
 * bit 2j of scales_h. */
static inline __m512i iq4xs_scales(const block_iq4_xs *b)
{
    uint32_t lo_bits;
    memcpy(&lo_bits, b->scales_l, 4);
    __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)lo_bits), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(15)),
                                 _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
    return _mm512_castsi256_si512(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
}

/* IQ4_XS: table values biased by +128 go in unsigned, the bias comes off
 * per lane; the signed sub-block scales multiply the int32 lanes. */
static void dot_iq4_xs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    const __m512i table = iq4_table_u8();
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i ls = iq4xs_scales(&x[i]), sumi = zero512();
        for (int c = 0; c < 4; c++) { /* sub-blocks 2c, 2c+1 */
            __m512i u = _mm512_shuffle_epi8(table, nibbles64(x[i].qs + 32 * c, x[i].qs + 32 * c + 16));
            __m512i dot = dot_biased(u, load512(y[i].qs + 64 * c), 128);
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dot, per_quarter(ls, c)));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(y[i].d * half(x[i].d)), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

const quant_vec_dot_fn quant_avx512_vec_dot[QT_COUNT] = {
    [QT_F32] = dot_f32,       [QT_F16] = dot_f16,       [QT_BF16] = dot_bf16,   [QT_Q4_0] = dot_q4_0,
    [QT_Q5_0] = dot_q5_0,     [QT_Q5_1] = dot_q5_1,     [QT_Q8_0] = dot_q8_0,   [QT_Q4_K] = dot_q4_K,
    [QT_Q5_K] = dot_q5_K,     [QT_Q6_K] = dot_q6_K,     [QT_IQ4_NL] = dot_iq4_nl, [QT_IQ4_XS] = dot_iq4_xs,
    [QT_Q4_1] = dot_q4_1,
};
