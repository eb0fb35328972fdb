/* quant_iq_body.h — SIMD dots of the grid formats (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K, written once and compiled
 * twice, as quant_lowbit_body.h is: quant_iq_avx2.c and quant_iq_avx512.c
 * define DOT_S8(w, y) (32 signed bytes times 32 activation bytes into 8
 * int32 lanes of 4 products each) and IQ_TABLE.
 *
 * Each kernel turns a 32-value sub-block into 32 signed weight bytes: the
 * grid points of its groups gathered as 64-bit (IQ2, IQ1) or 32-bit (IQ3)
 * lanes, their signs applied from a 32-bit mask (bit j: value j negative).
 * IQ1's shift of ±1/8 is folded into the weights as 8·e ± 1 (|w| <= 9), so
 * one int8 dot covers both parts and the block's factor takes the 1/8.  The
 * odd sub-block scales 2s + 1 multiply the int32 lanes (lanes 0..3 are
 * values 0..15, lanes 4..7 values 16..31: the 16-value scales of IQ2_XS,
 * IQ2_S and IQ1_M), and the block's d·k·d_y applies once, in float. */
#ifndef IQ_TABLE
#error "define DOT_S8 and IQ_TABLE before including quant_iq_body.h"
#endif

#include <immintrin.h>

#include "core/quant/quant_avx2_bytes.h"

static inline uint32_t iq_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Byte j all ones where bit j of bits is set. */
static inline __m256i iq_bitmask(uint32_t bits)
{
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                    _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* g with the bytes that bits marks negated. */
static inline __m256i iq_signed(__m256i g, uint32_t bits)
{
    __m256i m = iq_bitmask(bits);
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
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

static inline __m256i iq_pair(int a, int b) { return _mm256_setr_epi32(a, a, a, a, b, b, b, b); }

/* 2s + 1 of the two 16-value halves from a byte of two 4-bit s (IQ2_XS, IQ2_S). */
static inline __m256i iq_split_scales(int sc) { return iq_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1); }

/* The driver: per 32-value sub-block ib the format's signed weights and its
 * scale lanes; per block its d times k and y's scale. */
typedef __m256i (*iq_weights_fn)(const uint8_t *b, int ib);
typedef float (*iq_d_fn)(const uint8_t *b);

QUANT_INLINE float iq_dot(int64_t n, const uint8_t *x, size_t bsize, const block_q8_K *y, float k, iq_d_fn d,
                          iq_weights_fn weights, iq_weights_fn scales)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, x += bsize) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++)
            sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(DOT_S8(weights(x, ib), load256(y[i].qs + 32 * ib)), scales(x, ib)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d(x) * y[i].d * k), acc);
    }
    return avx2_hsum(acc);
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
    uint32_t idx = iq_u32(XXS(b)->qs + 4 * ib), aux = iq_u32(XXS(b)->qs + 4 * ib + 2);
    __m256i g = iq_points8(quant_iq2xxs_grid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
    return iq_signed(g, iq_ksigns4(aux));
}
static inline __m256i s_iq2_xxs(const uint8_t *b, int ib)
{
    return _mm256_set1_epi32((int)(2 * (iq_u32(XXS(b)->qs + 4 * ib + 2) >> 28) + 1));
}
#undef XXS

/* ---- IQ2_XS: 9-bit index and 7 sign bits a group ---- */
static inline __m256i w_iq2_xs(const uint8_t *b, int ib)
{
    const uint16_t *q = ((const block_iq2_xs *)(const void *)b)->qs + 4 * ib;
    __m256i g = iq_points8(quant_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
    uint32_t signs = (uint32_t)quant_ksigns[q[0] >> 9] | (uint32_t)quant_ksigns[q[1] >> 9] << 8 |
                     (uint32_t)quant_ksigns[q[2] >> 9] << 16 | (uint32_t)quant_ksigns[q[3] >> 9] << 24;
    return iq_signed(g, signs);
}
static inline __m256i s_iq2_xs(const uint8_t *b, int ib) { return iq_split_scales(((const block_iq2_xs *)(const void *)b)->scales[ib]); }

/* ---- IQ2_S: 8+2-bit index, 8 sign bits a group ---- */
static inline __m256i w_iq2_s(const uint8_t *b, int ib)
{
    const block_iq2_s *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib;
    const int h = x->qh[ib];
    __m256i g = iq_points8(quant_iq2s_grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                           q[3] | (h << 2 & 0x300));
    return iq_signed(g, iq_u32(x->qs + 32 + 4 * ib));
}
static inline __m256i s_iq2_s(const uint8_t *b, int ib) { return iq_split_scales(((const block_iq2_s *)(const void *)b)->scales[ib]); }

/* ---- IQ3_XXS: 8 index bytes, then 4×7 sign bits and s ---- */
static inline __m256i w_iq3_xxs(const uint8_t *b, int ib)
{
    const block_iq3_xxs *x = (const void *)b;
    int idx[8];
    for (int k = 0; k < 8; k++) idx[k] = x->qs[8 * ib + k];
    return iq_signed(iq_points4(quant_iq3xxs_grid, idx), iq_ksigns4(iq_u32(x->qs + 64 + 4 * ib)));
}
static inline __m256i s_iq3_xxs(const uint8_t *b, int ib)
{
    return _mm256_set1_epi32((int)(2 * (iq_u32(((const block_iq3_xxs *)(const void *)b)->qs + 64 + 4 * ib) >> 28) + 1));
}

/* ---- IQ3_S: 8+1-bit indices, 8 sign bits a group, 4-bit s per 32 ---- */
static inline __m256i w_iq3_s(const uint8_t *b, int ib)
{
    const block_iq3_s *x = (const void *)b;
    int idx[8];
    for (int k = 0; k < 8; k++) idx[k] = x->qs[8 * ib + k] | ((x->qh[ib] >> k) & 1) << 8;
    return iq_signed(iq_points4(quant_iq3s_grid, idx), iq_u32(x->signs + 4 * ib));
}
static inline __m256i s_iq3_s(const uint8_t *b, int ib)
{
    return _mm256_set1_epi32(1 + 2 * ((((const block_iq3_s *)(const void *)b)->scales[ib / 2] >> (4 * (ib % 2))) & 15));
}

/* ---- IQ1: 8·e + shift (the ±1/8 of the points folded in; k = 1/8) ---- */

/* 8·e + shift of four groups: e the points' bytes (-1, 0, +1), shift the
 * byte of each group's ±1, in the 64-bit lanes. */
static inline __m256i iq1_weights(__m256i g, __m256i shift)
{
    __m256i g8 = _mm256_add_epi8(g, g);
    g8 = _mm256_add_epi8(g8, g8);
    return _mm256_add_epi8(_mm256_add_epi8(g8, g8), shift);
}

static inline long long iq1_shift(bool down) { return down ? (long long)0xffffffffffffffffull : 0x0101010101010101ll; }

static inline __m256i w_iq1_s(const uint8_t *b, int ib)
{
    const block_iq1_s *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib;
    const int h = x->qh[ib];
    __m256i g = iq_points8(quant_iq1s_grid, q[0] | (h & 7) << 8, q[1] | (h >> 3 & 7) << 8, q[2] | (h >> 6 & 7) << 8,
                           q[3] | (h >> 9 & 7) << 8);
    return iq1_weights(g, _mm256_set1_epi64x(iq1_shift(h & 0x8000)));
}
static inline __m256i s_iq1_s(const uint8_t *b, int ib)
{
    return _mm256_set1_epi32(2 * ((((const block_iq1_s *)(const void *)b)->qh[ib] >> 12) & 7) + 1);
}

static inline uint16_t iq1m_word(const uint8_t *b, int k)
{
    uint16_t w;
    memcpy(&w, ((const block_iq1_m *)(const void *)b)->scales + 2 * k, 2);
    return w;
}
static inline float iq1m_d(const uint8_t *b)
{
    return avx2_half((uint16_t)((iq1m_word(b, 0) >> 12) | ((iq1m_word(b, 1) >> 8) & 0x00f0) |
                              ((iq1m_word(b, 2) >> 4) & 0x0f00) | (iq1m_word(b, 3) & 0xf000)));
}
static inline __m256i w_iq1_m(const uint8_t *b, int ib)
{
    const block_iq1_m *x = (const void *)b;
    const uint8_t *q = x->qs + 4 * ib, *qh = x->qh + 2 * ib;
    __m256i g = iq_points8(quant_iq1s_grid, q[0] | (qh[0] & 7) << 8, q[1] | (qh[0] >> 4 & 7) << 8,
                           q[2] | (qh[1] & 7) << 8, q[3] | (qh[1] >> 4 & 7) << 8);
    __m256i shift = _mm256_setr_epi64x(iq1_shift(qh[0] & 0x08), iq1_shift(qh[0] & 0x80), iq1_shift(qh[1] & 0x08),
                                       iq1_shift(qh[1] & 0x80));
    return iq1_weights(g, shift);
}
static inline __m256i s_iq1_m(const uint8_t *b, int ib)
{
    const int word = iq1m_word(b, ib / 2) >> (6 * (ib % 2));
    return iq_pair(2 * (word & 7) + 1, 2 * (word >> 3 & 7) + 1);
}

#define IQ_DOT(name, block, k, d)                                                        \
    static void dot_##name(int64_t n, float *s, const void *x, const void *y)            \
    {                                                                                    \
        *s = iq_dot(n, x, sizeof(block), y, k, d, w_##name, s_##name);                   \
    }
IQ_DOT(iq2_xxs, block_iq2_xxs, 0.125f, iq_d_first)
IQ_DOT(iq2_xs, block_iq2_xs, 0.125f, iq_d_first)
IQ_DOT(iq2_s, block_iq2_s, 0.125f, iq_d_first)
IQ_DOT(iq3_xxs, block_iq3_xxs, 0.25f, iq_d_first)
IQ_DOT(iq3_s, block_iq3_s, 1.0f, iq_d_first)
IQ_DOT(iq1_s, block_iq1_s, QUANT_IQ1_DELTA, iq_d_first)
IQ_DOT(iq1_m, block_iq1_m, QUANT_IQ1_DELTA, iq1m_d)
#undef IQ_DOT

const quant_vec_dot_fn IQ_TABLE[QT_COUNT] = {
    [QT_IQ2_XXS] = dot_iq2_xxs, [QT_IQ2_XS] = dot_iq2_xs, [QT_IQ2_S] = dot_iq2_s, [QT_IQ3_XXS] = dot_iq3_xxs,
    [QT_IQ3_S] = dot_iq3_s,     [QT_IQ1_S] = dot_iq1_s,   [QT_IQ1_M] = dot_iq1_m,
};
