/* quant_avx2_bytes.h — AVX2 helpers shared by the quantized-activation dots
 * (quant_avx2.c, quant_lowbit_body.h, quant_iq_avx2.c) and the fp32-activation
 * dots (quant_f32_body.h): the nibble and fifth-bit unpacking that ggml's
 * block layouts need, fp16 scales, the horizontal sum.  Static inline;
 * include only from files compiled with AVX2 (and F16C) enabled. */
#ifndef NB_QUANT_AVX2_BYTES_H
#define NB_QUANT_AVX2_BYTES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline float avx2_half(uint16_t h) { return _cvtsh_ss(h); }

/* The sum of the 8 lanes. */
static inline float avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles as 32 bytes: low nibbles first (values 0..15), then
 * high nibbles, which is the value order of every 32-value nibble group. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(15));
}

/* Byte j = 0x10 where bit j of the 32-bit field is set (the fifth bits). */
static inline __m256i bit4_from_bits(uint32_t bits)
{
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                    _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(16));
}

/* Byte j = 0x10 where byte j of v has the bit `mask`. */
static inline __m256i bit4_where(__m256i v, int mask)
{
    __m256i m = _mm256_set1_epi8((char)mask);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m), m), _mm256_set1_epi8(16));
}

/* The base-3 digit of each byte of v selected by its multiplier byte
 * 3^n (mod 256): the top of 3·(v·3^n mod 256), as quant_ref_lowbit.c's trit
 * (TQ1_0: quant_lowbit_body.h's dot, quant_f32_lowbit.h's decoder). */
static inline __m256i lb_trits(__m256i v, __m256i mult)
{
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    __m256i even = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(v, lo8), _mm256_and_si256(mult, lo8)), lo8);
    __m256i odd = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), _mm256_srli_epi16(mult, 8)), lo8);
    even = _mm256_srli_epi16(_mm256_mullo_epi16(even, _mm256_set1_epi16(3)), 8);
    odd = _mm256_srli_epi16(_mm256_mullo_epi16(odd, _mm256_set1_epi16(3)), 8);
    return _mm256_or_si256(even, _mm256_slli_epi16(odd, 8));
}

static inline __m256i lb_two128(__m128i lo, __m128i hi) { return _mm256_set_m128i(hi, lo); }

/* TQ1_0's values 160..255 as three (bytes, multipliers) pairs for lb_trits,
 * value 160 + 32k + j from byte j of v[k]: digit d of the 16 bytes qs16 for
 * values 160 + 16d, and qh[j % 4]'s digit j / 4 for value 240 + j. */
static inline void tq1_tail(const uint8_t *qs16, const uint8_t qh[4], __m256i v[3], __m256i m[3])
{
    const __m128i qh_spread = _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    const __m128i qh_mult = _mm_setr_epi8(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    const __m128i q16 = _mm_loadu_si128((const __m128i *)qs16);
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m128i h16 = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)h), qh_spread);
    v[0] = v[1] = lb_two128(q16, q16);
    v[2] = lb_two128(q16, h16);
    m[0] = lb_two128(_mm_set1_epi8(1), _mm_set1_epi8(3));
    m[1] = lb_two128(_mm_set1_epi8(9), _mm_set1_epi8(27));
    m[2] = lb_two128(_mm_set1_epi8(81), qh_mult);
}

#endif
