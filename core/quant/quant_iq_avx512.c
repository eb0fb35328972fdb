/* quant_iq_avx512.c — the grid formats' dots (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K with AVX-512 VNNI (the
 * Makefile adds the AVX-512 flags), two blocks at a time, 64 values (two
 * 32-value sub-blocks) a step in one 512-bit register.
 *
 * What makes them fast is that nothing is done per value that can be done
 * per register, and nothing per register that can be done per block:
 *   - the grid points come in with one gather a step (8 points of 8 bytes,
 *     or 16 of 4), their indices unpacked for the whole block at once;
 *   - the signs are a 64-bit mask that negates the activations (a masked
 *     subtract), so the points stay unsigned and go straight into vpdpbusd:
 *     the stored sign bits are that mask already (IQ2_S, IQ3_S), or the
 *     7-bit fields of IQ2_XXS, IQ2_XS and IQ3_XXS get their parity bit for
 *     two blocks at once (iq_even_signs);
 *   - the scales multiply the step sums two steps at a time, with vpdpwssd
 *     (iq_block_sum);
 *   - IQ1's ±1/8 shift is folded into the weights as 8·e + δ, made unsigned
 *     as 8·(e + 1): IQ1_S's δ is per sub-block, so it joins the 8·Σy that
 *     comes off per 16 values through the Q8_K bsums; IQ1_M's is per group,
 *     so δ + 1 goes into the weights and 9·Σy comes off.
 * A block's integer sum is exact, its float factor d·d_y is applied once per
 * block and the format's k once at the end, as in quant_ref_iq.c. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#include "core/quant/quant_iq512.h"

/* The pair functions (iq512_pair_fn): per block h and step k the weights
 * and signs, into p[h][k]; the loops are unrolled, so h and k are
 * constants. */
#define IQ_STEPS _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)

/* A gather's indices as 32-bit lanes: 8 or 16 bytes, or 8 16-bit words. */
static inline __m256i iq_idx8(const uint8_t *q) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)); }
static inline __m512i iq_idx16(const uint8_t *q) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q)); }
static inline __m256i iq_idxw(const uint16_t *w) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)w)); }
/* The same 32 (or 16) bytes of the two blocks side by side. */
static inline __m512i iq_join(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(a)), _mm256_loadu_si256(b), 1);
}
static inline __m256i iq_join256(const void *a, const void *b)
{
    return _mm256_set_m128i(_mm_loadu_si128(b), _mm_loadu_si128(a));
}

/* ---- IQ2_XXS: per sub-block 4 index bytes, then 4×7 sign bits and s ---- */
#define XXS(h) ((const block_iq2_xxs *)(const void *)b[h])
static inline void p_iq2_xxs(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                             __m512i *bias16)
{
    /* qs as 32-bit words: even ones the indices, odd ones sign bits and s */
    const __m512i q0 = _mm512_loadu_si512(XXS(0)->qs), q1 = _mm512_loadu_si512(XXS(1)->qs);
    const __m512i aux = _mm512_permutex2var_epi32(
        q0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), q1);
    /* the index bytes of each step, moved to its first 8 bytes (of 16) */
    const __m512i pick = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0));
    __mmask64 signs[8];
    uint64_t idx[2][8];
    _mm512_storeu_si512(signs, iq_ksigns32(aux));
    _mm512_storeu_si512(idx[0], _mm512_shuffle_epi8(q0, pick));
    _mm512_storeu_si512(idx[1], _mm512_shuffle_epi8(q1, pick));
    *ls16 = iq_ls16_of32(_mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(aux, 28), 1), _mm512_set1_epi32(1)));
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi64(iq_idx8((const uint8_t *)&idx[h][2 * k]), (const void *)quant_iq2xxs_grid, 8);
        p[h][k] = iq_products(g, _load_mask64(&signs[4 * h + k]), y[h]->qs + 64 * k);
    }
}
#undef XXS

/* ---- IQ2_XS: a 9-bit index and 7 sign bits a group, 4-bit s per 16 ---- */
#define XS(h) ((const block_iq2_xs *)(const void *)b[h])
static inline void p_iq2_xs(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                            __m512i *bias16)
{
    const __m512i w0 = _mm512_loadu_si512(XS(0)->qs), w1 = _mm512_loadu_si512(XS(1)->qs);
    __m512i s = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 9))),
                                   _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 9)), 1);
    __mmask64 signs[8];
    uint16_t idx[2][32];
    _mm512_storeu_si512(signs, iq_even_signs(s));
    _mm512_storeu_si512(idx[0], _mm512_and_si512(w0, _mm512_set1_epi16(511)));
    _mm512_storeu_si512(idx[1], _mm512_and_si512(w1, _mm512_set1_epi16(511)));
    *ls16 = iq_ls16_of_nibbles(XS(0)->scales, XS(1)->scales);
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi64(iq_idxw(idx[h] + 8 * k), (const void *)quant_iq2xs_grid, 8);
        p[h][k] = iq_products(g, _load_mask64(&signs[4 * h + k]), y[h]->qs + 64 * k);
    }
}
#undef XS

/* ---- IQ2_S: an 8-bit index with 2 more in qh, 8 sign bits a group ---- */
#define S2(h) ((const block_iq2_s *)(const void *)b[h])
/* The 32 indices of a block as 16-bit words: group G's top bits are bits
 * 2(G % 4), 2(G % 4) + 1 of qh[G / 4]. */
static inline __m512i iq2s_indices(const block_iq2_s *x)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5,
                                            6, 6, 6, 6, 7, 7, 7, 7);
    uint64_t q8;
    memcpy(&q8, x->qh, 8);
    __m256i qh = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)q8), spread); /* byte G: qh[G / 4] */
    __m512i hi = _mm512_sllv_epi16(_mm512_cvtepu8_epi16(qh), _mm512_set_epi16(2, 4, 6, 8, 2, 4, 6, 8, 2, 4, 6, 8, 2, 4, 6, 8,
                                                                             2, 4, 6, 8, 2, 4, 6, 8, 2, 4, 6, 8, 2, 4, 6, 8));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x300), hi,
                                     _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)x->qs)), IQ_AND_OR);
}
static inline void p_iq2_s(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                           __m512i *bias16)
{
    uint16_t idx[2][32];
    _mm512_storeu_si512(idx[0], iq2s_indices(S2(0)));
    _mm512_storeu_si512(idx[1], iq2s_indices(S2(1)));
    *ls16 = iq_ls16_of_nibbles(S2(0)->scales, S2(1)->scales);
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi64(iq_idxw(idx[h] + 8 * k), (const void *)quant_iq2s_grid, 8);
        p[h][k] = iq_products(g, _cvtu64_mask64(quant_u64(S2(h)->qs + 32 + 8 * k)), y[h]->qs + 64 * k);
    }
}
#undef S2

/* ---- IQ3_XXS: 8 index bytes a sub-block, then 4×7 sign bits and s ---- */
#define X3(h) ((const block_iq3_xxs *)(const void *)b[h])
static inline void p_iq3_xxs(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                             __m512i *bias16)
{
    const __m512i aux = iq_join(X3(0)->qs + 64, X3(1)->qs + 64);
    __mmask64 signs[8];
    _mm512_storeu_si512(signs, iq_ksigns32(aux));
    *ls16 = iq_ls16_of32(_mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(aux, 28), 1), _mm512_set1_epi32(1)));
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi32(iq_idx16(X3(h)->qs + 16 * k), (const void *)quant_iq3xxs_grid, 4);
        p[h][k] = iq_products(g, _load_mask64(&signs[4 * h + k]), y[h]->qs + 64 * k);
    }
}
#undef X3

/* ---- IQ3_S: 8-bit indices with the 9th in qh, 8 sign bits a group ---- */
#define S3(h) ((const block_iq3_s *)(const void *)b[h])
static inline void p_iq3_s(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                           __m512i *bias16)
{
    uint32_t sc0, sc1;
    memcpy(&sc0, S3(0)->scales, 4);
    memcpy(&sc1, S3(1)->scales, 4);
    /* s of sub-block ib: nibble ib of the scales */
    __m512i s = _mm512_srlv_epi32(_mm512_mask_set1_epi32(_mm512_set1_epi32((int)sc0), 0xff00, (int)sc1),
                                  _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
    s = _mm512_and_si512(s, _mm512_set1_epi32(15));
    *ls16 = iq_ls16_of32(_mm512_or_si512(_mm512_slli_epi32(s, 1), _mm512_set1_epi32(1)));
    IQ_STEPS {
        /* bit m of the step's 16 qh bits: the 9th bit of point m */
        __m512i idx = iq_idx16(S3(h)->qs + 16 * k);
        idx = _mm512_mask_or_epi32(idx, _cvtu32_mask16(quant_u16(S3(h)->qh + 2 * k)), idx, _mm512_set1_epi32(256));
        __m512i g = _mm512_i32gather_epi32(idx, (const void *)quant_iq3s_grid, 4);
        p[h][k] = iq_products(g, _cvtu64_mask64(quant_u64(S3(h)->signs + 8 * k)), y[h]->qs + 64 * k);
    }
}
#undef S3

/* ---- IQ1_S: 8+3-bit indices; per sub-block the scale and the shift's sign ---- */
#define S1(h) ((const block_iq1_s *)(const void *)b[h])
/* The 32 indices of a block as 16-bit words: group G's top bits are bits
 * 3(G % 4).. of qh[G / 4]. */
static inline __m512i iq1s_indices(const block_iq1_s *x)
{
    const __m512i qh = _mm512_permutexvar_epi16(
        _mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)x->qh)));
    __m512i hi = _mm512_srlv_epi16(qh, _mm512_set_epi16(9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0,
                                                        9, 6, 3, 0, 9, 6, 3, 0));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x700), _mm512_slli_epi16(hi, 8),
                                     _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)x->qs)), IQ_AND_OR);
}
static inline void p_iq1_s(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                           __m512i *bias16)
{
    uint16_t idx[2][32];
    _mm512_storeu_si512(idx[0], iq1s_indices(S1(0)));
    _mm512_storeu_si512(idx[1], iq1s_indices(S1(1)));
    /* per chunk (16 values): qh of its sub-block, 2s + 1, and δ - 8 = -7 or -9 */
    const __m512i qh = _mm512_permutexvar_epi16(
        _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
        _mm512_castsi256_si512(iq_join256(S1(0)->qh, S1(1)->qh)));
    *ls16 = _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 12), _mm512_set1_epi16(7)), 1),
                            _mm512_set1_epi16(1));
    *bias16 = _mm512_mullo_epi16(*ls16, _mm512_add_epi16(_mm512_set1_epi16(-7), _mm512_slli_epi16(_mm512_srai_epi16(qh, 15), 1)));
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi64(iq_idxw(idx[h] + 8 * k), (const void *)quant_iq1s_grid8, 8);
        p[h][k] = iq_products(g, 0, y[h]->qs + 64 * k);
    }
}
#undef S1

/* ---- IQ1_M: 8+3-bit indices and the shift's sign per group, 3-bit s per 16 ---- */
#define M1(h) ((const block_iq1_m *)(const void *)b[h])
static inline float iq1m_d(const uint8_t *b) { return _cvtsh_ss(quant_iq1m_half(((const block_iq1_m *)(const void *)b)->scales)); }
/* The 32 indices of a block as 16-bit words (group G's top bits: nibble G
 * of qh, whose bit 3 is the shift's sign), and the groups shifted up. */
static inline __m512i iq1m_indices(const block_iq1_m *x, __mmask32 *up)
{
    /* word G = qh[G / 2], then its nibble G % 2 at bits 8..11 */
    const __m512i pick = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
    __m512i qh = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x->qh)),
                                     _mm512_add_epi8(pick, _mm512_set_epi32(0x000c000c, 0x000c000c, 0x000c000c, 0x000c000c, 0x00080008,
                                                                              0x00080008, 0x00080008, 0x00080008, 0x00040004,
                                                                              0x00040004, 0x00040004, 0x00040004, 0, 0, 0, 0)));
    qh = _mm512_sllv_epi16(qh, _mm512_set_epi16(4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8, 4, 8,
                                                  4, 8, 4, 8, 4, 8, 4, 8));
    *up = _mm512_testn_epi16_mask(qh, _mm512_set1_epi16(0x800));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x700), qh,
                                     _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)x->qs)), IQ_AND_OR);
}
static inline void p_iq1_m(const uint8_t *const b[2], const block_q8_K *const y[2], __m512i p[2][4], __m512i *ls16,
                           __m512i *bias16)
{
    uint16_t idx[2][32];
    __mmask32 up[2];
    _mm512_storeu_si512(idx[0], iq1m_indices(M1(0), &up[0]));
    _mm512_storeu_si512(idx[1], iq1m_indices(M1(1), &up[1]));
    /* s of chunk j: bits 3(j % 4).. of the scales' 16-bit word j/4 */
    const __m512i words = _mm512_permutexvar_epi16(
        _mm512_set_epi16(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_castsi128_si512(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)M1(0)->scales),
                                                  _mm_loadl_epi64((const __m128i *)M1(1)->scales))));
    const __m512i s = _mm512_and_si512(
        _mm512_srlv_epi16(words, _mm512_set_epi16(9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0,
                                                  9, 6, 3, 0, 9, 6, 3, 0)),
        _mm512_set1_epi16(7));
    *ls16 = _mm512_or_si512(_mm512_slli_epi16(s, 1), _mm512_set1_epi16(1));
    *bias16 = _mm512_mullo_epi16(*ls16, _mm512_set1_epi16(-9));
    IQ_STEPS {
        __m512i g = _mm512_i32gather_epi64(iq_idxw(idx[h] + 8 * k), (const void *)quant_iq1s_grid8, 8);
        /* δ + 1 = 2 on the groups shifted up */
        g = _mm512_mask_add_epi64(g, (__mmask8)(up[h] >> (8 * k)), g, _mm512_set1_epi8(2));
        p[h][k] = iq_products(g, 0, y[h]->qs + 64 * k);
    }
}
#undef M1

static inline float iq_d_first(const uint8_t *b)
{
    uint16_t h;
    memcpy(&h, b, 2);
    return _cvtsh_ss(h);
}

#define IQ_DOT(name, block, k, d, shifted)                                               \
    static void dot_##name(int64_t n, float *s, const void *x, const void *y)            \
    {                                                                                    \
        *s = iq512_dot(n, x, sizeof(block), y, k, d, p_##name, shifted);                 \
    }
IQ_DOT(iq2_xxs, block_iq2_xxs, 0.125f, iq_d_first, false)
IQ_DOT(iq2_xs, block_iq2_xs, 0.125f, iq_d_first, false)
IQ_DOT(iq2_s, block_iq2_s, 0.125f, iq_d_first, false)
IQ_DOT(iq3_xxs, block_iq3_xxs, 0.25f, iq_d_first, false)
IQ_DOT(iq3_s, block_iq3_s, 1.0f, iq_d_first, false)
IQ_DOT(iq1_s, block_iq1_s, QUANT_IQ1_DELTA, iq_d_first, true)
IQ_DOT(iq1_m, block_iq1_m, QUANT_IQ1_DELTA, iq1m_d, true)
#undef IQ_DOT

const quant_vec_dot_fn quant_iq_avx512_vec_dot[QT_COUNT] = {
    [QT_IQ2_XXS] = dot_iq2_xxs, [QT_IQ2_XS] = dot_iq2_xs, [QT_IQ2_S] = dot_iq2_s, [QT_IQ3_XXS] = dot_iq3_xxs,
    [QT_IQ3_S] = dot_iq3_s,     [QT_IQ1_S] = dot_iq1_s,   [QT_IQ1_M] = dot_iq1_m,
};
