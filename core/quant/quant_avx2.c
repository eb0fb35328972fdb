/* quant_avx2.c — AVX2 dot kernels (the Makefile adds -mavx2 -mfma -mf16c).
 *
 * The one instruction everything rests on is _mm256_maddubs_epi16: unsigned
 * bytes times signed bytes, adjacent pairs summed into int16.  Weight codes
 * are made to fit its unsigned side in one of two ways:
 *   - codes that are unsigned already (the 4/5/6-bit codes of Q5_1 and the
 *     K-quants) go in as they are; their bias or min is taken off afterwards
 *     with the Q8_K bsums;
 *   - signed values (Q4_0/Q5_0 after removing their bias, Q8_0, IQ4 table
 *     values) go in as |w| while w's sign moves onto the activation byte.
 *     That is exact because activation codes are never -128 (the Q8
 *     quantizers stay in [-127, 127]).
 * No pair can saturate int16: the largest is 2 * 128 * 127.  Pairs then become
 * int32 through _mm256_madd_epi16, against ones or against the sub-block
 * scales, so a block's integer dot is exact, as in the reference; only the
 * per-block float scales round, accumulated with FMA in 8 lanes. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#include "core/quant/quant_avx2_bytes.h"


/* 8 int32 lanes, each Σ u·s over 4 bytes, weighted by the int16 scale of its
 * lane (pass ones for a plain dot). */
static inline __m256i dot_u8s8(__m256i u, __m256i s, __m256i scale16)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16);
}

/* The same for signed w: |w| against the activation with w's sign. */
static inline __m256i dot_s8s8(__m256i w, __m256i a, __m256i scale16)
{
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w), scale16);
}

#define ONES16 _mm256_set1_epi16(1)

/* ---- plain floats against fp32 activations ---- */

/* Load 8 values of each format as 8 fp32 lanes. */
static inline __m256 load8_f32(const void *p, int64_t i) { return _mm256_loadu_ps((const float *)p + i); }
static inline __m256 load8_f16(const void *p, int64_t i)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
static inline __m256 load8_bf16(const void *p, int64_t i)
{
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float load1_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline float load1_f16(const void *p, int64_t i) { return avx2_half(((const uint16_t *)p)[i]); }
static inline float load1_bf16(const void *p, int64_t i) { return quant_bf16_to_f32(((const uint16_t *)p)[i]); }

/* Four accumulators hide the FMA latency; the tail (n % 8) is scalar.  Always
 * inlined, so the loaders are constants and each caller is one tight loop. */
QUANT_INLINE float float_dot(int64_t n, const void *x, const float *y,
                             __m256 (*load8)(const void *, int64_t),
                             float (*load1)(const void *, int64_t))
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load8(x, i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load8(x, i + 8), _mm256_loadu_ps(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load8(x, i + 16), _mm256_loadu_ps(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load8(x, i + 24), _mm256_loadu_ps(y + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(x, i), _mm256_loadu_ps(y + i), acc0);
    float sum = avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) sum += load1(x, i) * y[i];
    return sum;
}

static void dot_f32(int64_t n, float *s, const void *x, const void *y)
{
    *s = float_dot(n, x, y, load8_f32, load1_f32);
}
static void dot_f16(int64_t n, float *s, const void *x, const void *y)
{
    *s = float_dot(n, x, y, load8_f16, load1_f16);
}
static void dot_bf16(int64_t n, float *s, const void *x, const void *y)
{
    *s = float_dot(n, x, y, load8_bf16, load1_bf16);
}

/* ---- Q4_0, Q5_0, Q8_0, IQ4_NL against Q8_0 ----
 * Value d * w with w a signed integer: the formats differ only in how a
 * block's 32 weights w are unpacked.  Always inlined, so `weights` is a
 * constant and each kernel is one loop. */

static inline float first_half(const uint8_t *b)
{
    uint16_t h;
    memcpy(&h, b, 2);
    return avx2_half(h);
}

QUANT_INLINE float dot_dw(int64_t n, const uint8_t *x, size_t bsize,
                          __m256i (*weights)(const uint8_t *),
                          const block_q8_0 *y)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_SMALL; i++, x += bsize) {
        __m256i sumi = dot_s8s8(weights(x), load256(y[i].qs), ONES16);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(first_half(x) * avx2_half(y[i].d)), acc);
    }
    return avx2_hsum(acc);
}

/* The IQ4 table in both 128-bit lanes, for _mm256_shuffle_epi8 lookups. */
static inline __m256i iq4_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)quant_iq4nl_values);
    return _mm256_set_m128i(t, t);
}

static inline __m256i w_q4_0(const uint8_t *b) { return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8)); }
static inline __m256i w_q8_0(const uint8_t *b) { return load256(b + 2); }
static inline __m256i w_iq4_nl(const uint8_t *b) { return _mm256_shuffle_epi8(iq4_table(), nibbles32(b + 2)); }
static inline __m256i w_q5_0(const uint8_t *b)
{
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + 6), bit4_from_bits(qh)), _mm256_set1_epi8(16));
}

static void dot_q4_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q4_0), w_q4_0, y);
}
static void dot_q5_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q5_0), w_q5_0, y);
}
static void dot_q8_0(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_q8_0), w_q8_0, y);
}
static void dot_iq4_nl(int64_t n, float *s, const void *x, const void *y)
{
    *s = dot_dw(n, x, sizeof(block_iq4_nl), w_iq4_nl, y);
}

/* Value d*q + m: the min multiplies Σy, taken from the codes (not `s`).
 * One step of Q4_1/Q5_1 against a Q8_1 block, q the 32 unsigned codes. */
static inline __m256 affine_step(__m256i q, uint16_t d, uint16_t m, const block_q8_1 *y, __m256 acc)
{
    __m256i a = load256(y->qs);
    __m256i sumi = dot_u8s8(q, a, ONES16), sumy = dot_u8s8(_mm256_set1_epi8(1), a, ONES16);
    float dy = avx2_half(y->d);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(avx2_half(d) * dy), acc);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumy), _mm256_set1_ps(avx2_half(m) * dy), acc);
}

static void dot_q5_1(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q5_1 *x = vx;
    const block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_SMALL; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        acc = affine_step(_mm256_or_si256(nibbles32(x[i].qs), bit4_from_bits(qh)), x[i].d, x[i].m, &y[i], acc);
    }
    *s = avx2_hsum(acc);
}

static void dot_q4_1(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q4_1 *x = vx;
    const block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_SMALL; i++) acc = affine_step(nibbles32(x[i].qs), x[i].d, x[i].m, &y[i], acc);
    *s = avx2_hsum(acc);
}

/* ---- 256-value formats against Q8_K ---- */

/* m_j · Σ y over sub-block j in 8 int32 lanes, from the bsums (adjacent
 * pairs of 16-value sums make the 32-value sums); `mins` packs m_0..m_7. */
static inline __m256i kq_mins(uint64_t mins, const int16_t bsums[16])
{
    __m256i pairs = _mm256_madd_epi16(load256(bsums), _mm256_set1_epi16(1));
    return _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mins)), pairs);
}

/* One Q4_K/Q5_K super-block: chunk c of 32 bytes gives sub-blocks 2c (low
 * nibbles) and 2c+1 (high nibbles); qh gives Q5_K's fifth bits (NULL for
 * Q4_K).  Adds the scaled part to acc and the mins part to mins_acc. */
static inline void kq_block(const uint8_t *qs, const uint8_t *scales, const uint8_t *qh, uint16_t d, uint16_t dmin,
                            const block_q8_K *y, __m256 *acc, __m256 *mins_acc)
{
    uint32_t w[4]; /* scales 0-3, 4-7, mins 0-3, 4-7 */
    quant_kscale_words(scales, w);
    const uint8_t *sc = (const uint8_t *)w;
    const __m256i f = _mm256_set1_epi8(15);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i bytes = load256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(bytes, f), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), f);
        if (qh) {
            __m256i h = load256(qh);
            lo = _mm256_or_si256(lo, bit4_where(h, 1 << (2 * c)));
            hi = _mm256_or_si256(hi, bit4_where(h, 2 << (2 * c)));
        }
        sumi = _mm256_add_epi32(sumi, dot_u8s8(lo, load256(y->qs + 64 * c), _mm256_set1_epi16(sc[2 * c])));
        sumi = _mm256_add_epi32(sumi, dot_u8s8(hi, load256(y->qs + 64 * c + 32), _mm256_set1_epi16(sc[2 * c + 1])));
    }
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y->d * avx2_half(d)), *acc);
    __m256i mins = kq_mins(w[2] | (uint64_t)w[3] << 32, y->bsums);
    *mins_acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(y->d * avx2_half(dmin)), *mins_acc);
}

static void dot_q4_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q4_K *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++)
        kq_block(x[i].qs, x[i].scales, NULL, x[i].d, x[i].dmin, &y[i], &acc, &mins);
    *s = avx2_hsum(acc) - avx2_hsum(mins);
}

static void dot_q5_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q5_K *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++)
        kq_block(x[i].qs, x[i].scales, x[i].qh, x[i].d, x[i].dmin, &y[i], &acc, &mins);
    *s = avx2_hsum(acc) - avx2_hsum(mins);
}

/* Two bits of qh at `shift`, moved to bits 4..5 of each byte. */
static inline __m256i q6_high(__m256i qh, int shift)
{
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), _mm256_set1_epi8(3)), 4);
}

/* Q6_K: the unsigned 6-bit codes go in as they are; the -32 bias comes off
 * at the end as 32·Σ sc_j·bsums_j.  A 32-byte quarter holds two 16-value
 * sub-blocks, one per 128-bit lane, hence a two-valued scale vector. */
static void dot_q6_K(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_q6_K *x = vx;
    const block_q8_K *y = vy;
    const __m256i f = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = load256(x[i].ql + 64 * h), ql1 = load256(x[i].ql + 64 * h + 32);
            __m256i qh = load256(x[i].qh + 32 * h);
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(ql0, f), q6_high(qh, 0)),
                _mm256_or_si256(_mm256_and_si256(ql1, f), q6_high(qh, 2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), f), q6_high(qh, 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), f), q6_high(qh, 6)),
            };
            for (int k = 0; k < 4; k++) {
                const int8_t *sc = x[i].scales + 8 * h + 2 * k;
                __m256i scale = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
                sumi = _mm256_add_epi32(sumi, dot_u8s8(q[k], load256(y[i].qs + 128 * h + 32 * k), scale));
            }
        }
        int bias = 32 * quant_bsums16_dot(x[i].scales, y[i].bsums); /* the -32 of every code */
        sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(bias, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

static void dot_iq4_xs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq4_xs *x = vx;
    const block_q8_K *y = vy;
    const __m256i table = iq4_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            int ls = ((x[i].scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((x[i].scales_h >> (2 * j)) & 3) << 4;
            __m256i w = _mm256_shuffle_epi8(table, nibbles32(x[i].qs + 16 * j));
            sumi = _mm256_add_epi32(sumi, dot_s8s8(w, load256(y[i].qs + 32 * j), _mm256_set1_epi16((short)(ls - 32))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(y[i].d * avx2_half(x[i].d)), acc);
    }
    *s = avx2_hsum(acc);
}

const quant_vec_dot_fn quant_avx2_vec_dot[QT_COUNT] = {
    [QT_F32] = dot_f32,       [QT_F16] = dot_f16,       [QT_BF16] = dot_bf16,   [QT_Q4_0] = dot_q4_0,
    [QT_Q5_0] = dot_q5_0,     [QT_Q5_1] = dot_q5_1,     [QT_Q8_0] = dot_q8_0,   [QT_Q4_K] = dot_q4_K,
    [QT_Q5_K] = dot_q5_K,     [QT_Q6_K] = dot_q6_K,     [QT_IQ4_NL] = dot_iq4_nl, [QT_IQ4_XS] = dot_iq4_xs,
    [QT_Q4_1] = dot_q4_1,
};
