/* quant_iq512.h — what the 512-bit dots of the grid formats share
 * (quant_iq_avx512.c): the loop over pairs of blocks, the sign masks of the
 * 7-bit sign fields, the step every format takes, the scales applied to its
 * sums, and the bias of IQ1's unsigned weights.  quant_lowbit_avx512.c's
 * Q3_K uses the scales too.  Static inline; include only from files
 * compiled with the AVX-512 flags.
 *
 * A step is 64 values (k = 0..3 of a block): vpdpbusd's 16 int32 lanes of
 * four products each, lane l the 16-value chunk 4k + l/4.  A format gives
 * per chunk a small integer multiplier (the grid formats' odd 2s + 1, a
 * 32-value scale counting twice; Q3_K's s - 32) as 16-bit words: ls16,
 * block 0 in words 0..15, block 1 in 16..31.  A step's sums fit in 16 bits
 * (at most 4·62·127), so two steps pack into one vector of words
 * (vpackssdw, exact) and one vpdpwssd multiplies and accumulates them
 * against the matching words of ls16 (iq_block_sum). */
#ifndef NB_QUANT_IQ512_H
#define NB_QUANT_IQ512_H

#include <immintrin.h>
#include <stdint.h>

#define IQ_SELECT 0xCA  /* vpternlog: a ? b : c, bit by bit */
#define IQ_AND_OR 0xEA  /* (a & b) | c */
#define IQ_OR_XOR 0xF6  /* a | (b ^ c) */

/* Bytes of 7 sign bits with the 8th on top: set where the 7 have odd
 * parity, so the count of negative values is even (ggml's ksigns). */
static inline __m512i iq_even_signs(__m512i r)
{
    /* bit 7 where a nibble has odd parity, by table */
    const __m512i odd = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
    __m512i lo = _mm512_shuffle_epi8(odd, r); /* bit 7 of r is clear: the low nibble indexes */
    __m512i hi = _mm512_shuffle_epi8(odd, _mm512_and_si512(_mm512_srli_epi16(r, 4), _mm512_set1_epi8(15)));
    return _mm512_ternarylogic_epi32(r, lo, hi, IQ_OR_XOR);
}

/* 32-bit words of four 7-bit sign fields (bits 7l..7l+6; 28..31 ignored),
 * IQ2_XXS's and IQ3_XXS's: the 32 signs of each word, field l in byte l. */
static inline __m512i iq_ksigns32(__m512i a)
{
    __m512i r = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0xff), a, _mm512_slli_epi32(a, 1), IQ_SELECT);
    r = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0xffff), r, _mm512_slli_epi32(a, 2), IQ_SELECT);
    r = _mm512_ternarylogic_epi32(_mm512_set1_epi32(0xffffff), r, _mm512_slli_epi32(a, 3), IQ_SELECT);
    return iq_even_signs(_mm512_and_si512(r, _mm512_set1_epi8(0x7f)));
}

/* ls16 from eight 2s + 1 a block in 32-bit lanes (block 0 lanes 0..7):
 * each in both of its 16-bit halves. */
static inline __m512i iq_ls16_of32(__m512i ls)
{
    return _mm512_or_si512(ls, _mm512_slli_epi32(ls, 16));
}

/* ls16 from 8 bytes a block of two 4-bit s (low nibble: the first chunk of
 * the sub-block), IQ2_XS's and IQ2_S's. */
static inline __m512i iq_ls16_of_nibbles(const uint8_t *s0, const uint8_t *s1)
{
    __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)s0), _mm_loadl_epi64((const __m128i *)s1));
    __m256i s = _mm256_and_si256(_mm256_set_m128i(_mm_unpackhi_epi8(b, _mm_srli_epi16(b, 4)), _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4))),
                                 _mm256_set1_epi8(15));
    return _mm512_or_si512(_mm512_slli_epi16(_mm512_cvtepu8_epi16(s), 1), _mm512_set1_epi16(1));
}

/* A step's sums: unsigned weights w times the activations, those that
 * signs marks negated. */
static inline __m512i iq_products(__m512i w, __mmask64 signs, const int8_t *yq)
{
    __m512i y = _mm512_loadu_si512(yq);
    y = _mm512_mask_sub_epi8(y, signs, _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, y);
}

/* sum + Σ over the four step sums p of block h, each lane times its
 * chunk's multiplier: steps 2q, 2q + 1 packed, 128-bit lane L of the pack holding
 * chunks 8q + L (words 0..3) and 8q + 4 + L (words 4..7). */
static inline __m512i iq_block_sum(__m512i sum, const __m512i p[4], __m512i ls16, int h)
{
    const __m512i chunk = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2,
                                           5, 5, 5, 5, 1, 1, 1, 1, 4, 4, 4, 4, 0, 0, 0, 0);
    _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) {
        __m512i m = _mm512_permutexvar_epi16(_mm512_add_epi16(chunk, _mm512_set1_epi16((short)(16 * h + 8 * q))), ls16);
        sum = _mm512_dpwssd_epi32(sum, _mm512_packs_epi32(p[2 * q], p[2 * q + 1]), m);
    }
    return sum;
}

/* The start of the two blocks' sums (block 0 in lanes 0..7, block 1 in
 * 8..15): Σ over chunks of bias16 · Σy, the part of IQ1's unsigned weights
 * (and, for IQ1_S, of its shift) that is the same for a whole chunk. */
static inline void iq1_bias(__m512i bias16, const int16_t *bsums0, const int16_t *bsums1, __m512i sum[2])
{
    __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)bsums0)),
                                   _mm256_loadu_si256((const __m256i *)bsums1), 1);
    b = _mm512_madd_epi16(b, bias16);
    sum[0] = _mm512_maskz_mov_epi32(0x00ff, b);
    sum[1] = _mm512_maskz_mov_epi32(0xff00, b);
}

/* A format's two blocks b[0], b[1] against y[0], y[1]: the four steps'
 * sums of each (p[h][k]), ls16, and for IQ1 the bias words. */
typedef void (*iq512_pair_fn)(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                              __m512i *bias16);

/* The loop, two blocks at a time (an odd last block is taken twice, the
 * second time at factor 0); d() is a block's fp16 scale, k the format's
 * constant, a power of two, so applying it to the total is exact. */
QUANT_INLINE float iq512_dot(int64_t n, const uint8_t *x, size_t bsize, const block_q8_K *y, float k,
                             float (*d)(const uint8_t *), iq512_pair_fn pair, bool shifted)
{
    const int64_t nb = n / QK_K;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 2) {
        const int64_t j = i + 1 < nb ? i + 1 : i;
        const uint8_t *const b[2] = {x + (size_t)i * bsize, x + (size_t)j * bsize};
        const block_q8_K *const yy[2] = {&y[i], &y[j]};
        __m512i p[2][4], ls16, bias16 = _mm512_setzero_si512(), sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        pair(b, yy, p, &ls16, &bias16);
        if (shifted) iq1_bias(bias16, yy[0]->bsums, yy[1]->bsums, sum);
        const float f0 = d(b[0]) * yy[0]->d, f1 = j > i ? d(b[1]) * yy[1]->d : 0.0f;
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iq_block_sum(sum[0], p[0], ls16, 0)), _mm512_set1_ps(f0), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iq_block_sum(sum[1], p[1], ls16, 1)), _mm512_set1_ps(f1), acc);
    }
    return _mm512_reduce_add_ps(acc) * k;
}

#endif
