/* quant_iq_avx2.c — the grid formats' dots (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K with AVX2 (the Makefile adds
 * -mavx2 -mfma -mf16c); quant_iq_avx512.c has the AVX-512 ones.
 *
 * Per 32-value sub-block the grid points of its groups are gathered as
 * 64-bit (IQ2, IQ1) or 32-bit (IQ3) lanes, unsigned.  The signs go onto the
 * activations (vpsignb with ±1 bytes), so the points go straight into
 * vpmaddubsw (at most 2·62·127 a pair: no int16 saturation), and the odd
 * scales 2s + 1 are the second operand of the vpmaddwd that widens the
 * pairs (lanes 0..3 values 0..15, lanes 4..7 values 16..31: the 16-value
 * scales of IQ2_XS, IQ2_S and IQ1_M).  IQ1's ±1/8 shift is folded into the
 * weights as 8·e + δ, made unsigned as 8·(e + 1) (+ δ + 1 for IQ1_M); what
 * that adds comes off per 16 values through the Q8_K bsums, as in
 * quant_iq512.h.  The block's d·d_y applies once, in float, and the
 * format's k (a power of two) once at the end. */
#include "core/quant/quant_impl.h"

#include <immintrin.h>

#include "core/quant/quant_avx2_bytes.h"


/* +1 or -1 in byte j by bit j of bits: the sign operand of vpsignb. */
static inline __m256i iq_signs(uint32_t bits)
{
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                    _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(1));
}

/* Four 8-byte points, values 0..31. */
static inline __m256i iq_points8(const uint64_t *grid, int i0, int i1, int i2, int i3)
{
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

/* Eight 4-byte points, values 0..31. */
static inline __m256i iq_points4(const uint32_t *grid, const int idx[8])
{
    return _mm256_setr_epi32((int)grid[idx[0]], (int)grid[idx[1]], (int)grid[idx[2]], (int)grid[idx[3]],
                             (int)grid[idx[4]], (int)grid[idx[5]], (int)grid[idx[6]], (int)grid[idx[7]]);
}

/* The 8-bit signs of four groups stored as 7 bits each (the 8th makes the
 * count even): fields at 7l of aux. */
static inline uint32_t iq_ksigns4(uint32_t aux)
{
    return (uint32_t)quant_ksigns[aux & 127] | (uint32_t)quant_ksigns[(aux >> 7) & 127] << 8 |
           (uint32_t)quant_ksigns[(aux >> 14) & 127] << 16 | (uint32_t)quant_ksigns[(aux >> 21) & 127] << 24;
}

/* Multipliers of a sub-block as 16-bit pairs: one for all 32 values, or
 * one per 16-value half (from a byte of two 4-bit s: IQ2_XS, IQ2_S). */
static inline __m256i iq_scale(int ls) { return _mm256_set1_epi16((short)ls); }
static inline __m256i iq_halves(int a, int b) { return _mm256_setr_m128i(_mm_set1_epi16((short)a), _mm_set1_epi16((short)b)); }
static inline __m256i iq_split_scales(int sc) { return iq_halves(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1); }

/* A format: per sub-block ib its unsigned weights, sign bits and
 * multipliers; per block its d and, for IQ1, the start of the block's sum
 * (the bias of the unsigned weights, through the bsums). */
typedef __m256i (*iq_vec_fn)(const uint8_t *b, int ib);
typedef uint32_t (*iq_signs_fn)(const uint8_t *b, int ib);
typedef float (*iq_d_fn)(const uint8_t *b);
typedef __m256i (*iq_bias_fn)(const uint8_t *b, const int16_t bsums[16]);

QUANT_INLINE float iq_dot(int64_t n, const uint8_t *x, size_t bsize, const block_q8_K *y, float k, iq_d_fn d,
                          iq_vec_fn weights, iq_signs_fn signs, iq_vec_fn scales, iq_bias_fn bias)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, x += bsize) {
        __m256i sumi = bias ? bias(x, y[i].bsums) : _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int ib = 0; ib < 8; ib++) {
            __m256i yv = load256(y[i].qs + 32 * ib);
            if (signs) yv = _mm256_sign_epi8(yv, iq_signs(signs(x, ib)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(weights(x, ib), yv), scales(x, ib)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d(x) * y[i].d), acc);
    }
    return avx2_hsum(acc) * k;
}

static inline float iq_d_first(const uint8_t *b)
{
    uint16_t h;
    memcpy(&h, b, 2);
    return avx2_half(h);
}

/* ---- IQ2_XXS: 4 index bytes, then 4×7 sign bits and s ---- */
#define XXS(b) ((const block_iq2_xxs *)(const void *)(b))
static inline __m256i w_iq2_xxs(const uint8_t *b, int ib)
{
    uint32_t idx = quant_u32(XXS(b)->qs + 4 * ib);
    return iq_points8(quant_iq2xxs_grid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
}
static inline uint32_t g_iq2_xxs(const uint8_t *b, int ib) { return iq_ksigns4(quant_u32(XXS(b)->qs + 4 * ib + 2)); }
static inline __m256i s_iq2_xxs(const uint8_t *b, int ib) { return iq_scale((int)(2 * (quant_u32(XXS(b)->qs + 4 * ib + 2) >> 28) + 1)); }
#undef XXS

/* ---- IQ2_XS: 9-bit index and 7 sign bits a group ---- */
static inline const uint16_t *iq2xs_q(const uint8_t *b, int ib) { return ((const block_iq2_xs *)(const void *)b)->qs + 4 * ib; }
static inline __m256i w_iq2_xs(const uint8_t *b, int ib)
{
    const uint16_t *q = iq2xs_q(b, ib);
    return iq_points8(quant_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
}
static inline uint32_t g_iq2_xs(const uint8_t *b, int ib)
{
    const uint16_t *q = iq2xs_q(b, ib);
    return (uint32_t)quant_ksigns[q[0] >> 9] | (uint32_t)quant_ksigns[q[1] >> 9] << 8 |
           (uint32_t)quant_ksigns[q[2] >> 9] << 16 | (uint32_t)quant_ksigns[q[3] >> 9] << 24;
}
static inline __m256i s_iq2_xs(const uint8_t *b, int ib) { return iq_split_scales(((const block_iq2_xs *)(const void *)b)->scales[ib]); }

/* ---- IQ2_S: 8+2-bit index, 8 sign bits a group ---- */
static inline __m256i w_iq2_s(const uint8_t *b, int ib)
{
    const block_iq2_s *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib;
    const int h = x->qh[ib];
    return iq_points8(quant_iq2s_grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                      q[3] | (h << 2 & 0x300));
}
static inline uint32_t g_iq2_s(const uint8_t *b, int ib) { return quant_u32(((const block_iq2_s *)(const void *)b)->qs + 32 + 4 * ib); }
static inline __m256i s_iq2_s(const uint8_t *b, int ib) { return iq_split_scales(((const block_iq2_s *)(const void *)b)->scales[ib]); }

/* ---- IQ3_XXS: 8 index bytes, then 4×7 sign bits and s ---- */
static inline uint32_t iq3xxs_aux(const uint8_t *b, int ib) { return quant_u32(((const block_iq3_xxs *)(const void *)b)->qs + 64 + 4 * ib); }
static inline __m256i w_iq3_xxs(const uint8_t *b, int ib)
{
    const block_iq3_xxs *x = (const void *)b;
    int idx[8];
    for (int k = 0; k < 8; k++) idx[k] = x->qs[8 * ib + k];
    return iq_points4(quant_iq3xxs_grid, idx);
}
static inline uint32_t g_iq3_xxs(const uint8_t *b, int ib) { return iq_ksigns4(iq3xxs_aux(b, ib)); }
static inline __m256i s_iq3_xxs(const uint8_t *b, int ib) { return iq_scale((int)(2 * (iq3xxs_aux(b, ib) >> 28) + 1)); }

/* ---- IQ3_S: 8+1-bit indices, 8 sign bits a group, 4-bit s per 32 ---- */
static inline __m256i w_iq3_s(const uint8_t *b, int ib)
{
    const block_iq3_s *x = (const void *)b;
    int idx[8];
    for (int k = 0; k < 8; k++) idx[k] = x->qs[8 * ib + k] | ((x->qh[ib] >> k) & 1) << 8;
    return iq_points4(quant_iq3s_grid, idx);
}
static inline uint32_t g_iq3_s(const uint8_t *b, int ib) { return quant_u32(((const block_iq3_s *)(const void *)b)->signs + 4 * ib); }
static inline __m256i s_iq3_s(const uint8_t *b, int ib)
{
    return iq_scale(1 + 2 * ((((const block_iq3_s *)(const void *)b)->scales[ib / 2] >> (4 * (ib % 2))) & 15));
}

/* ---- IQ1: the points as 8·(e + 1) (quant_iq1s_grid8), e = -1, 0, +1 ---- */

/* Σ_j bias_j · bsums_j over the 16 chunks of 16 values, in 8 lanes. */
static inline __m256i iq1_bias(__m256i bias16, const int16_t bsums[16]) { return _mm256_madd_epi16(load256(bsums), bias16); }

/* IQ1_S: the shift δ is per sub-block, so it stays out of the weights:
 * Σ (8e + δ)·y = Σ 8(e + 1)·y + (δ - 8)·Σy, (δ - 8)·(2s + 1) per chunk. */
static inline __m256i w_iq1_s(const uint8_t *b, int ib)
{
    const block_iq1_s *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib;
    const int h = x->qh[ib];
    return iq_points8(quant_iq1s_grid8, q[0] | (h & 7) << 8, q[1] | (h >> 3 & 7) << 8, q[2] | (h >> 6 & 7) << 8,
                      q[3] | (h >> 9 & 7) << 8);
}
static inline __m256i s_iq1_s(const uint8_t *b, int ib)
{
    return iq_scale(2 * ((((const block_iq1_s *)(const void *)b)->qh[ib] >> 12) & 7) + 1);
}
static inline __m256i b_iq1_s(const uint8_t *b, const int16_t bsums[16])
{
    const __m128i qh = _mm_loadu_si128((const __m128i *)((const block_iq1_s *)(const void *)b)->qh);
    const __m256i w = _mm256_set_m128i(_mm_unpackhi_epi16(qh, qh), _mm_unpacklo_epi16(qh, qh)); /* chunk j: qh[j/2] */
    const __m256i ls = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(w, 12), _mm256_set1_epi16(7)), 1),
                                       _mm256_set1_epi16(1));
    const __m256i dm = _mm256_add_epi16(_mm256_set1_epi16(-7), _mm256_slli_epi16(_mm256_srai_epi16(w, 15), 1));
    return iq1_bias(_mm256_mullo_epi16(ls, dm), bsums);
}

/* IQ1_M: δ per group of 8, so δ + 1 goes into the weights and 9·Σy comes
 * off.  qh[2ib + l/2] holds groups l (low nibble) and l + 1: 3 index bits
 * and the shift's sign (bit 3); 3-bit s at 3k of scale word ib/2. */
static inline float iq1m_d(const uint8_t *b) { return avx2_half(quant_iq1m_half(((const block_iq1_m *)(const void *)b)->scales)); }
static inline long long iq1m_up(int nib) { return nib & 8 ? 0 : 0x0202020202020202ll; }
static inline __m256i w_iq1_m(const uint8_t *b, int ib)
{
    const block_iq1_m *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib, *qh = x->qh + 2 * ib;
    __m256i g = iq_points8(quant_iq1s_grid8, q[0] | (qh[0] & 7) << 8, q[1] | (qh[0] >> 4 & 7) << 8,
                           q[2] | (qh[1] & 7) << 8, q[3] | (qh[1] >> 4 & 7) << 8);
    __m256i up = _mm256_setr_epi64x(iq1m_up(qh[0]), iq1m_up(qh[0] >> 4), iq1m_up(qh[1]), iq1m_up(qh[1] >> 4));
    return _mm256_add_epi8(g, up);
}
static inline __m256i s_iq1_m(const uint8_t *b, int ib)
{
    uint16_t w;
    memcpy(&w, ((const block_iq1_m *)(const void *)b)->scales + 2 * (ib / 2), 2);
    const int word = w >> (6 * (ib % 2));
    return iq_halves(2 * (word & 7) + 1, 2 * (word >> 3 & 7) + 1);
}
static inline __m256i b_iq1_m(const uint8_t *b, const int16_t bsums[16])
{
    uint64_t sc;
    memcpy(&sc, ((const block_iq1_m *)(const void *)b)->scales, 8);
    /* s of chunk j: bits 3(j % 4).. of word j/4; dwords j and j + 8, packed in order */
    const __m256i shift = _mm256_setr_epi32(0, 3, 6, 9, 16, 19, 22, 25);
    const __m256i seven = _mm256_set1_epi32(7);
    __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sc), shift), seven);
    __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)(sc >> 32)), shift), seven);
    __m256i s = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
    const __m256i ls = _mm256_or_si256(_mm256_slli_epi16(s, 1), _mm256_set1_epi16(1));
    return iq1_bias(_mm256_mullo_epi16(ls, _mm256_set1_epi16(-9)), bsums);
}

#define IQ_DOT(name, block, k, d, signs, bias)                                                  \
    static void dot_##name(int64_t n, float *s, const void *x, const void *y)                   \
    {                                                                                           \
        *s = iq_dot(n, x, sizeof(block), y, k, d, w_##name, signs, s_##name, bias);             \
    }
IQ_DOT(iq2_xxs, block_iq2_xxs, 0.125f, iq_d_first, g_iq2_xxs, NULL)
IQ_DOT(iq2_xs, block_iq2_xs, 0.125f, iq_d_first, g_iq2_xs, NULL)
IQ_DOT(iq2_s, block_iq2_s, 0.125f, iq_d_first, g_iq2_s, NULL)
IQ_DOT(iq3_xxs, block_iq3_xxs, 0.25f, iq_d_first, g_iq3_xxs, NULL)
IQ_DOT(iq3_s, block_iq3_s, 1.0f, iq_d_first, g_iq3_s, NULL)
IQ_DOT(iq1_s, block_iq1_s, QUANT_IQ1_DELTA, iq_d_first, NULL, b_iq1_s)
IQ_DOT(iq1_m, block_iq1_m, QUANT_IQ1_DELTA, iq1m_d, NULL, b_iq1_m)
#undef IQ_DOT

const quant_vec_dot_fn quant_iq_avx2_vec_dot[QT_COUNT] = {
    [QT_IQ2_XXS] = dot_iq2_xxs, [QT_IQ2_XS] = dot_iq2_xs, [QT_IQ2_S] = dot_iq2_s, [QT_IQ3_XXS] = dot_iq3_xxs,
    [QT_IQ3_S] = dot_iq3_s,     [QT_IQ1_S] = dot_iq1_s,   [QT_IQ1_M] = dot_iq1_m,
};
