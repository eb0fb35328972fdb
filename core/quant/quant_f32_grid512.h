/* quant_f32_grid512.h — the AVX-512 (VW 16) fp32 decoder of IQ2_XS, which
 * quant_f32_grid.h includes in place of its 16-values-a-step one.
 *
 * The one idea: 64 values a step.  Their eight 8-byte grid points come in
 * one gather, their 64 sign bits are formed in a vector (quant_ksigns[s] is
 * s with its parity on bit 7, so the table is computed, not read) and
 * applied to the 64 bytes with one masked subtract, and the 16 scales of a
 * block are formed at once; only the conversion to floats is per 16 values.
 * Measured (nebula-bench-quant --f32, docs/BENCHMARKS.md) about 1.4x the
 * scalar-index decoder.  The same scheme for IQ2_XXS, IQ3_XXS and IQ1_S
 * (whose indices are bytes, cheap to extract) measured 0.9-1.0x, a gather
 * being no cheaper than eight scalar loads there, so those keep
 * quant_f32_grid.h's decoders.
 *
 * The arithmetic is the reference's, value for value: the signed integer
 * element converted, times db = d·(0.5 + s)·0.25 formed by the same float
 * operations in the same order as quant_ref_iq.c's db_iq2_xs, so
 * test_quant_f32's bit check holds. */
#ifndef NB_QUANT_F32_GRID512_H
#define NB_QUANT_F32_GRID512_H

/* quant_ksigns of eight 7-bit values in 16-bit lanes, as eight bytes of a
 * word: byte g is group g's sign bits. */
static inline uint64_t g512_ksigns8(__m128i s)
{
    __m128i p = _mm_xor_si128(s, _mm_srli_epi16(s, 4));
    p = _mm_xor_si128(p, _mm_srli_epi16(p, 2));
    p = _mm_xor_si128(p, _mm_srli_epi16(p, 1));
    s = _mm_or_si128(s, _mm_slli_epi16(_mm_and_si128(p, _mm_set1_epi16(1)), 7));
    return (uint64_t)_mm_cvtsi128_si64(_mm_packus_epi16(s, s));
}

/* Bytes 16q .. 16q + 15 of v as 16 floats times s. */
#define G512_PUT16(v, q, s, y)                                                                                   \
    _mm512_storeu_ps((y) + 16 * (q), _mm512_mul_ps(_mm512_set1_ps(s),                                           \
                                                   _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(                       \
                                                       _mm512_extracti32x4_epi32((v), (q))))))

/* 64 unsigned grid bytes g, byte j negated where bit j of signs is set, the
 * 16 values from 16q on times s[q]. */
static inline void g512_put64(__m512i g, uint64_t signs, const float s[4], float *y)
{
    const __m512i v = _mm512_mask_sub_epi8(g, _cvtu64_mask64(signs), _mm512_setzero_si512(), g);
    G512_PUT16(v, 0, s[0], y);
    G512_PUT16(v, 1, s[1], y);
    G512_PUT16(v, 2, s[2], y);
    G512_PUT16(v, 3, s[3], y);
}

/* IQ2_XS: a step is 8 uint16 of qs (9-bit index, 7 sign bits); the 16
 * scales of a block d·(0.5 + s)·0.25 formed at once, s nibble h of
 * scales[ib] for values 32ib + 16h. */
static const float *dec_iq2_xs(const uint8_t *w, int64_t i, int64_t len, float *buf)
{
    const block_iq2_xs *b = (const block_iq2_xs *)(const void *)w + i / QK_K;
    const __m128i m15 = _mm_set1_epi8(15);
    for (int64_t k = 0; k < len / QK_K; k++) {
        float db[16] __attribute__((aligned(64)));
        const __m128i sc = _mm_loadl_epi64((const __m128i *)b[k].scales);
        const __m128i s16 = _mm_unpacklo_epi8(_mm_and_si128(sc, m15), _mm_and_si128(_mm_srli_epi16(sc, 4), m15));
        const __m512 sf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(s16));
        _mm512_store_ps(db, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(f32_half(b[k].d)),
                                                        _mm512_add_ps(_mm512_set1_ps(0.5f), sf)),
                                          _mm512_set1_ps(0.25f)));
        for (int c = 0; c < 4; c++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b[k].qs + 8 * c));
            const __m256i idx = _mm256_and_si256(_mm256_cvtepu16_epi32(q), _mm256_set1_epi32(511));
            const __m512i g = _mm512_i32gather_epi64(idx, (const void *)quant_iq2xs_grid, 8);
            g512_put64(g, g512_ksigns8(_mm_srli_epi16(q, 9)), db + 4 * c, buf + QK_K * k + 64 * c);
        }
    }
    return buf;
}

#undef G512_PUT16

#endif
