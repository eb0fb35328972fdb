/* quant_avx2_bytes.h — AVX2 helpers shared by the quantized-activation dots
 * (quant_avx2.c, quant_lowbit_body.h, quant_iq_avx2.c) and the fp32-activation
 * dots (quant_f32_body.h): the nibble and fifth-bit unpacking that ggml's
 * block layouts need, fp16 scales, the horizontal sum.  Static inline;
 * include only from files compiled with AVX2 (and F16C) enabled. */
#ifndef NB_QUANT_AVX2_BYTES_H
#define NB_QUANT_AVX2_BYTES_H

#include <immintrin.h>
#include <stdint.h>

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

#endif
