/* quant_f32_body.h — the fp32-activation dot kernels (quant.h's
 * quant_dot_f32), written once and compiled twice: quant_f32_avx2.c (8-lane
 * FMA) and quant_f32_avx512.c (16-lane FMA) include it after defining the
 * accumulator: VW (lanes), vacc, ACC_ZERO, ACC_FMA(a, w, x), ACC_ADD, ACC_SUM
 * and F32_TABLE (the name of the table this file exports).
 *
 * The key idea: the activations stay fp32 (no 8-bit quantization of x, which
 * would not be exact within float tolerance).  A weight row is decoded to
 * fp32 with 256-bit integer ops (converted 16 codes at a time where VW is
 * 16), at most 256 values at a time, into an L1
 * buffer — each value with the same float operations, in the same order, as
 * the scalar decoder of quant_ref*.c, so the weights are bit-identical to the
 * reference's — and that buffer is dotted against up to F32_ROWS activation
 * rows with FMA in float, two accumulators per row (four for one row).
 * The float and 32-value formats and Q4_K..Q6_K are here; the grid formats in quant_f32_grid.h, the
 * other low-bit ones in quant_f32_lowbit.h.  With VW 16 the formats of at
 * most 32 levels a scale build that scale's levels as a table of floats
 * (each level formed as the reference forms it) and permute it by the codes
 * (see f32_iota below).  Only the summation
 * differs from the reference (float lanes and FMA instead of a double sum),
 * which is why the results agree within float tolerance, not bit for bit. */
#ifndef VW
#error "define the accumulator (VW, vacc, ACC_*) and F32_TABLE before including quant_f32_body.h"
#endif

#include <immintrin.h>

#include "core/quant/quant_avx2_bytes.h"

#define F32_ROWS 4 /* activation rows dotted against one decoded piece */
#define PIECE 256  /* values decoded at once: one K-quant block, eight 32-value blocks */

static inline float f32_half(uint16_t h) { return _cvtsh_ss(h); }

/* The 8 bytes of group g (0..3) of 32 signed codes as 8 floats. */
static inline __m256 f32_s8x8(__m256i q, int g)
{
    __m128i h = g < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
    if (g & 1) h = _mm_srli_si128(h, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
}

/* ---- decoders: values [i, i + len) of a row into buf (or a pointer to them) ---- */

typedef const float *(*f32_decode_fn)(const uint8_t *w, int64_t i, int64_t len, float *buf);

static const float *dec_f32(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return (const float *)(const void *)w + i;
}

static const float *dec_f16(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const uint16_t *p = (const uint16_t *)(const void *)w + i;
    int64_t k = 0;
    for (; k + 8 <= len; k += 8) _mm256_storeu_ps(buf + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + k))));
    for (; k < len; k++) buf[k] = f32_half(p[k]);
    return buf;
}

static const float *dec_bf16(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const uint16_t *p = (const uint16_t *)(const void *)w + i;
    int64_t k = 0;
    for (; k + 8 <= len; k += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + k)));
        _mm256_storeu_ps(buf + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; k < len; k++) {
        uint32_t bits = (uint32_t)p[k] << 16;
        memcpy(buf + k, &bits, 4);
    }
    return buf;
}

/* d · w for 16 signed codes (Q3_K, Q4_0, MXFP4, ...): the reference's
 * (float)w * d (or d * (float)w: one rounding either way). */
static inline void put16_signed(__m128i q, float d, float *y)
{
#if VW == 16
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(d)));
#else
    __m256 D = _mm256_set1_ps(d);
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), D));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), D));
#endif
}

/* The same for 32 codes (Q8_0, IQ4_NL). */
static inline void put32_signed(__m256i q, float d, float *y)
{
    put16_signed(_mm256_castsi256_si128(q), d, y);
    put16_signed(_mm256_extracti128_si256(q, 1), d, y + 16);
}

static const float *dec_q8_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q8_0 *b = (const block_q8_0 *)(const void *)w + i / QK_SMALL;
    for (int64_t k = 0; k < len / QK_SMALL; k++) put32_signed(load256(b[k].qs), f32_half(b[k].d), buf + 32 * k);
    return buf;
}

/* IQ4_NL and MXFP4: a 16-entry table of signed levels indexed by the
 * nibbles (low nibbles values 0..15), times the block's scale: the
 * reference's (float)T[nib] * d.  qs_off is where the nibbles start. */
#if VW == 16
/* The key idea of the VW-16 decoders of the 16- and 32-level formats: a
 * block's levels, each formed as the reference forms it ((float)code · d,
 * or two roundings for the affine ones), fill one or two zmm tables, and a
 * lane's value is a permute of them by its code (vpermps reads the low 4
 * bits of each index, vpermt2ps 5) — one shuffle per 16 values instead of
 * a convert and a multiply or two.  f32_iota: 0, 1, .., 15 as floats. */
static inline __m512 f32_iota(float add)
{
    return _mm512_add_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_ps(add));
}

/* The 16 bytes at p as 32-bit lanes (a byte's low nibble in bits 0..3). */
static inline __m512i f32_bytes16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

/* 32 values of a block with 16 nibble codes a byte (low nibbles values
 * 0..15, high 16..31), table T. */
static inline void put32_perm(const uint8_t *qs, __m512 T, float *y)
{
    const __m512i q = f32_bytes16(qs);
    _mm512_storeu_ps(y, _mm512_permutexvar_ps(q, T));
    _mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), T));
}

/* The same with a fifth bit a value (bit j of qh for value j): 32 levels in
 * two tables. */
static inline void put32_perm5(const uint8_t *qs, uint32_t qh, __m512 T0, __m512 T1, float *y)
{
    const __m512i q = f32_bytes16(qs), m15 = _mm512_set1_epi32(15), b4 = _mm512_set1_epi32(16);
    __m512i lo = _mm512_and_si512(q, m15), hi = _mm512_srli_epi32(q, 4);
    lo = _mm512_mask_or_epi32(lo, (__mmask16)qh, lo, b4);
    hi = _mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, b4);
    _mm512_storeu_ps(y, _mm512_permutex2var_ps(T0, lo, T1));
    _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(T0, hi, T1));
}

/* IQ4_NL and MXFP4: the table is (float)T[nib] · d. */
QUANT_INLINE const float *dec_table4(const uint8_t *w, int64_t i, int64_t len, float *buf, const int8_t levels[16],
                                     size_t bsize, size_t qs_off, float (*scale)(const uint8_t *blk))
{
    const __m512 lv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)levels)));
    const uint8_t *b = w + (size_t)(i / QK_SMALL) * bsize;
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize)
        put32_perm(b + qs_off, _mm512_mul_ps(lv, _mm512_set1_ps(scale(b))), buf + 32 * k);
    return buf;
}
#else
QUANT_INLINE const float *dec_table4(const uint8_t *w, int64_t i, int64_t len, float *buf, const int8_t levels[16],
                                     size_t bsize, size_t qs_off, float (*scale)(const uint8_t *blk))
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
    const uint8_t *b = w + (size_t)(i / QK_SMALL) * bsize;
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize)
        put32_signed(_mm256_shuffle_epi8(table, nibbles32(b + qs_off)), scale(b), buf + 32 * k);
    return buf;
}

#endif

static inline float f32_half_at(const uint8_t *p) { return f32_half(quant_u16(p)); }
static inline float f32_e8m0(const uint8_t *p) { return quant_e8m0_half(*p); }

static const float *dec_iq4_nl(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_table4(w, i, len, buf, quant_iq4nl_values, sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs), f32_half_at);
}

static const float *dec_mxfp4(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_table4(w, i, len, buf, quant_mxfp4_values, sizeof(block_mxfp4), offsetof(block_mxfp4, qs), f32_e8m0);
}

/* Q4_0 (qh_off 0: no fifth bits) and Q5_0: (float)(q - bias) * d, q the
 * nibble with the fifth bit of the little-endian qh word on top. */
QUANT_INLINE const float *dec_biased32(const uint8_t *w, int64_t i, int64_t len, float *buf, size_t bsize, size_t qh_off,
                                       size_t qs_off, int bias)
{
    const uint8_t *b = w + (size_t)(i / QK_SMALL) * bsize;
#if VW == 16 /* the table: (float)(q − bias) · d */
    const __m512 l0 = f32_iota(-(float)bias), l1 = f32_iota(16.0f - (float)bias);
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize) {
        const __m512 D = _mm512_set1_ps(f32_half_at(b));
        if (qh_off) put32_perm5(b + qs_off, quant_u32(b + qh_off), _mm512_mul_ps(l0, D), _mm512_mul_ps(l1, D), buf + 32 * k);
        else put32_perm(b + qs_off, _mm512_mul_ps(l0, D), buf + 32 * k);
    }
#else
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize) {
        __m256i q = nibbles32(b + qs_off);
        if (qh_off) q = _mm256_or_si256(q, bit4_from_bits(quant_u32(b + qh_off)));
        put32_signed(_mm256_sub_epi8(q, _mm256_set1_epi8((char)bias)), f32_half_at(b), buf + 32 * k);
    }
#endif
    return buf;
}

static const float *dec_q4_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_biased32(w, i, len, buf, sizeof(block_q4_0), 0, offsetof(block_q4_0, qs), 8);
}

static const float *dec_q5_0(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_biased32(w, i, len, buf, sizeof(block_q5_0), offsetof(block_q5_0, qh), offsetof(block_q5_0, qs), 16);
}

/* 16 unsigned codes as (float)q * d + m, two roundings like the reference. */
static inline void put16_affine(__m128i q, float d, float m, float *y)
{
#if VW == 16
    _mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), _mm512_set1_ps(d)),
                                      _mm512_set1_ps(m)));
#else
    __m256 D = _mm256_set1_ps(d), M = _mm256_set1_ps(m);
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), D), M));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8))), D), M));
#endif
}

/* Q4_1 (qh_off 0) and Q5_1: d, m first, then (Q5_1) the fifth bits. */
QUANT_INLINE const float *dec_affine32(const uint8_t *w, int64_t i, int64_t len, float *buf, size_t bsize, size_t qh_off,
                                       size_t qs_off)
{
    const uint8_t *b = w + (size_t)(i / QK_SMALL) * bsize;
#if VW == 16 /* the table: (float)q · d + m */
    const __m512 l0 = f32_iota(0.0f), l1 = f32_iota(16.0f);
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize) {
        const __m512 D = _mm512_set1_ps(f32_half_at(b)), M = _mm512_set1_ps(f32_half_at(b + 2));
        const __m512 T0 = _mm512_add_ps(_mm512_mul_ps(l0, D), M);
        if (qh_off) put32_perm5(b + qs_off, quant_u32(b + qh_off), T0, _mm512_add_ps(_mm512_mul_ps(l1, D), M), buf + 32 * k);
        else put32_perm(b + qs_off, T0, buf + 32 * k);
    }
#else
    for (int64_t k = 0; k < len / QK_SMALL; k++, b += bsize) {
        __m256i q = nibbles32(b + qs_off);
        if (qh_off) q = _mm256_or_si256(q, bit4_from_bits(quant_u32(b + qh_off)));
        const float d = f32_half_at(b), m = f32_half_at(b + 2);
        put16_affine(_mm256_castsi256_si128(q), d, m, buf + 32 * k);
        put16_affine(_mm256_extracti128_si256(q, 1), d, m, buf + 32 * k + 16);
    }
#endif
    return buf;
}

static const float *dec_q4_1(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_affine32(w, i, len, buf, sizeof(block_q4_1), 0, offsetof(block_q4_1, qs));
}

static const float *dec_q5_1(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    return dec_affine32(w, i, len, buf, sizeof(block_q5_1), offsetof(block_q5_1, qh), offsetof(block_q5_1, qs));
}

/* 16 unsigned codes of a K-quant sub-block: dl * q - ml, as the reference
 * (two roundings, no fused multiply-add). */
static inline void put16_kq(__m128i q, float dl, float ml, float *y)
{
#if VW == 16
    _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q))),
                                      _mm512_set1_ps(ml)));
#else
    __m256 DL = _mm256_set1_ps(dl), ML = _mm256_set1_ps(ml);
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(DL, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q))), ML));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(DL, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)))), ML));
#endif
}

/* The same for 32 codes with one scale (Q4_K, Q5_K). */
static inline void put32_kq(__m256i q, float dl, float ml, float *y)
{
    put16_kq(_mm256_castsi256_si128(q), dl, ml, y);
    put16_kq(_mm256_extracti128_si256(q, 1), dl, ml, y + 16);
}

/* Q4_K (qh == NULL) and Q5_K: chunk c's low nibbles are sub-block 2c, its
 * high nibbles 2c + 1; Q5_K's fifth bits are bits 2c and 2c + 1 of qh[l]. */
QUANT_INLINE void dec_kq_block(const uint8_t *hdr, const uint8_t *qh, const uint8_t *qs, float *y)
{
    uint16_t dh, mh;
    memcpy(&dh, hdr, 2);
    memcpy(&mh, hdr + 2, 2);
    float d = f32_half(dh), dmin = f32_half(mh);
#if VW == 16 /* Q4_K: a sub-block's table dl · q − ml (Q5_K's fifth bits measured no faster so) */
    if (!qh) {
        const __m512 l0 = f32_iota(0.0f);
        for (int c = 0; c < 4; c++) { /* sub-block 2c: the low nibbles of qs[32c ..], 2c + 1 the high */
            __m512 T[2];
            for (int s = 0; s < 2; s++) {
                uint8_t sc, m;
                quant_kscale_unpack(hdr + 4, 2 * c + s, &sc, &m);
                T[s] = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d * sc), l0), _mm512_set1_ps(dmin * m));
            }
            for (int half = 0; half < 2; half++) {
                const __m512i q = f32_bytes16(qs + 32 * c + 16 * half);
                _mm512_storeu_ps(y + 64 * c + 16 * half, _mm512_permutexvar_ps(q, T[0]));
                _mm512_storeu_ps(y + 64 * c + 32 + 16 * half, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), T[1]));
            }
        }
        return;
    }
#endif
    __m256i hv = qh ? load256(qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i bytes = load256(qs + 32 * c), m15 = _mm256_set1_epi8(15);
        __m256i lo = _mm256_and_si256(bytes, m15), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m15);
        if (qh) {
            lo = _mm256_or_si256(lo, bit4_where(hv, 1 << (2 * c)));
            hi = _mm256_or_si256(hi, bit4_where(hv, 1 << (2 * c + 1)));
        }
        uint8_t sc, m;
        quant_kscale_unpack(hdr + 4, 2 * c, &sc, &m);
        put32_kq(lo, d * sc, dmin * m, y + 64 * c);
        quant_kscale_unpack(hdr + 4, 2 * c + 1, &sc, &m);
        put32_kq(hi, d * sc, dmin * m, y + 64 * c + 32);
    }
}

static const float *dec_q4_K(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q4_K *b = (const block_q4_K *)(const void *)w + i / QK_K;
    for (int64_t k = 0; k < len / QK_K; k++) dec_kq_block((const uint8_t *)&b[k], NULL, b[k].qs, buf + QK_K * k);
    return buf;
}

static const float *dec_q5_K(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q5_K *b = (const block_q5_K *)(const void *)w + i / QK_K;
    for (int64_t k = 0; k < len / QK_K; k++) dec_kq_block((const uint8_t *)&b[k], b[k].qh, b[k].qs, buf + QK_K * k);
    return buf;
}

/* Q6_K: (d · sc[v/16]) · (q - 32), as the reference; the four 32-value
 * quarters of each half as quant_impl.h's struct comment lays them out. */
static const float *dec_q6_K(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_q6_K *b = (const block_q6_K *)(const void *)w + i / QK_K;
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), b32 = _mm256_set1_epi8(32);
    for (int64_t k = 0; k < len / QK_K; k++) {
        float d = f32_half(b[k].d), *y = buf + QK_K * k;
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = load256(b[k].ql + 64 * h), ql1 = load256(b[k].ql + 64 * h + 32);
            __m256i qh = load256(b[k].qh + 32 * h);
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(ql0, m15), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(ql1, m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m15),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
            };
            for (int quarter = 0; quarter < 4; quarter++) {
                __m256i s = _mm256_sub_epi8(q[quarter], b32);
                int v0 = 128 * h + 32 * quarter;
#if VW == 16 /* 16 values: one scale */
                for (int g = 0; g < 2; g++) {
                    __m512 D = _mm512_set1_ps(d * (float)b[k].scales[(v0 + 16 * g) / 16]);
                    __m128i h16 = g ? _mm256_extracti128_si256(s, 1) : _mm256_castsi256_si128(s);
                    _mm512_storeu_ps(y + v0 + 16 * g, _mm512_mul_ps(D, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h16))));
                }
#else
                for (int g = 0; g < 4; g++) {
                    __m256 D = _mm256_set1_ps(d * (float)b[k].scales[(v0 + 8 * g) / 16]);
                    _mm256_storeu_ps(y + v0 + 8 * g, _mm256_mul_ps(D, f32_s8x8(s, g)));
                }
#endif
            }
        }
    }
    return buf;
}

#include "core/quant/quant_f32_grid.h"
#include "core/quant/quant_f32_lowbit.h"

/* ---- the driver: decoded pieces against R activation rows ---- */

QUANT_INLINE void f32_rows(int64_t n, const uint8_t *w, const float *x, int64_t xs, float *out, const int R,
                           f32_decode_fn dec)
{
    float buf[PIECE] __attribute__((aligned(64)));
    vacc a0[F32_ROWS], a1[F32_ROWS], a2 = ACC_ZERO, a3 = ACC_ZERO;
    float tail[F32_ROWS];
    for (int t = 0; t < R; t++) a0[t] = ACC_ZERO, a1[t] = ACC_ZERO, tail[t] = 0;
    for (int64_t i = 0; i < n; i += PIECE) {
        int64_t len = n - i < PIECE ? n - i : PIECE, k = 0;
        const float *v = dec(w, i, len, buf);
        if (R == 1) /* one row: four accumulators, so the FMA latency is not the bound */
            for (; k + 4 * VW <= len; k += 4 * VW) {
                a0[0] = ACC_FMA(a0[0], v + k, x + i + k);
                a1[0] = ACC_FMA(a1[0], v + k + VW, x + i + k + VW);
                a2 = ACC_FMA(a2, v + k + 2 * VW, x + i + k + 2 * VW);
                a3 = ACC_FMA(a3, v + k + 3 * VW, x + i + k + 3 * VW);
            }
        for (; k + 2 * VW <= len; k += 2 * VW)
            for (int t = 0; t < R; t++) {
                a0[t] = ACC_FMA(a0[t], v + k, x + t * xs + i + k);
                a1[t] = ACC_FMA(a1[t], v + k + VW, x + t * xs + i + k + VW);
            }
        for (; k < len; k++) /* only plain floats have pieces that are not a multiple of 2·VW */
            for (int t = 0; t < R; t++) tail[t] += v[k] * x[t * xs + i + k];
    }
    a0[0] = ACC_ADD(a0[0], a2), a1[0] = ACC_ADD(a1[0], a3);
    for (int t = 0; t < R; t++) out[t] = ACC_SUM(ACC_ADD(a0[t], a1[t])) + tail[t];
}

QUANT_INLINE void f32_dot(int64_t n, const void *w, const float *x, int64_t xs, int nt, float *out, f32_decode_fn dec)
{
    for (int t0 = 0; t0 < nt; t0 += F32_ROWS) {
        const float *xt = x + (int64_t)t0 * xs;
        switch (nt - t0 < F32_ROWS ? nt - t0 : F32_ROWS) { /* a constant R: accumulators stay in registers */
        case 1: f32_rows(n, w, xt, xs, out + t0, 1, dec); break;
        case 2: f32_rows(n, w, xt, xs, out + t0, 2, dec); break;
        case 3: f32_rows(n, w, xt, xs, out + t0, 3, dec); break;
        default: f32_rows(n, w, xt, xs, out + t0, 4, dec); break;
        }
    }
}

#define F32_KERNEL(name)                                                                                          \
    static void dot_f32_##name(int64_t n, const void *w, const float *x, int64_t xs, int nt, float *out)          \
    {                                                                                                             \
        f32_dot(n, w, x, xs, nt, out, dec_##name);                                                                \
    }
F32_KERNEL(f32)
F32_KERNEL(f16)
F32_KERNEL(bf16)
F32_KERNEL(q8_0)
F32_KERNEL(q4_0)
F32_KERNEL(q5_0)
F32_KERNEL(q4_1)
F32_KERNEL(q5_1)
F32_KERNEL(iq4_nl)
F32_KERNEL(mxfp4)
F32_KERNEL(q2_K)
F32_KERNEL(q3_K)
F32_KERNEL(q4_K)
F32_KERNEL(q5_K)
F32_KERNEL(q6_K)
F32_KERNEL(iq4_xs)
F32_KERNEL(tq2_0)
F32_KERNEL(nvfp4)
F32_KERNEL(iq2_xxs)
F32_KERNEL(iq2_xs)
F32_KERNEL(iq2_s)
F32_KERNEL(iq3_xxs)
F32_KERNEL(iq3_s)
F32_KERNEL(iq1_s)
F32_KERNEL(iq1_m)
F32_KERNEL(tq1_0)
F32_KERNEL(q1_0)
F32_KERNEL(q2_0)

const quant_dot_f32_fn F32_TABLE[QT_COUNT] = {
    [QT_F32] = dot_f32_f32,         [QT_F16] = dot_f32_f16,       [QT_BF16] = dot_f32_bf16,
    [QT_Q8_0] = dot_f32_q8_0,       [QT_Q4_0] = dot_f32_q4_0,     [QT_Q5_0] = dot_f32_q5_0,
    [QT_Q4_1] = dot_f32_q4_1,       [QT_Q5_1] = dot_f32_q5_1,     [QT_IQ4_NL] = dot_f32_iq4_nl,
    [QT_MXFP4] = dot_f32_mxfp4,     [QT_Q2_K] = dot_f32_q2_K,     [QT_Q3_K] = dot_f32_q3_K,
    [QT_Q4_K] = dot_f32_q4_K,       [QT_Q5_K] = dot_f32_q5_K,     [QT_Q6_K] = dot_f32_q6_K,
    [QT_IQ4_XS] = dot_f32_iq4_xs,   [QT_TQ2_0] = dot_f32_tq2_0,   [QT_NVFP4] = dot_f32_nvfp4,
    [QT_IQ2_XXS] = dot_f32_iq2_xxs, [QT_IQ2_XS] = dot_f32_iq2_xs, [QT_IQ2_S] = dot_f32_iq2_s,
    [QT_IQ3_XXS] = dot_f32_iq3_xxs, [QT_IQ3_S] = dot_f32_iq3_s,   [QT_IQ1_S] = dot_f32_iq1_s,
    [QT_IQ1_M] = dot_f32_iq1_m,     [QT_TQ1_0] = dot_f32_tq1_0,   [QT_Q1_0] = dot_f32_q1_0,
    [QT_Q2_0] = dot_f32_q2_0,
};
