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

static inline float iq_half(uint16_t h) { return _cvtsh_ss(h); }

static inline float iq_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

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

/* One sub-block's contribution: the int8 dot of w with its 32 activations, times the scales. */
static inline __m256i iq_step(__m256i w, const int8_t *y, __m256i scales)
{
    return _mm256_mullo_epi32(DOT_S8(w, load256(y)), scales);
}

static inline __m256 iq_block(__m256i sumi, float factor, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(factor), acc);
}

static void dot_iq2_xxs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq2_xxs *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx = iq_u32(x[i].qs + 4 * ib), aux = iq_u32(x[i].qs + 4 * ib + 2);
            __m256i g = iq_points8(quant_iq2xxs_grid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
            sumi = _mm256_add_epi32(sumi, iq_step(iq_signed(g, iq_ksigns4(aux)), y[i].qs + 32 * ib,
                                                  _mm256_set1_epi32((int)(2 * (aux >> 28) + 1))));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d * 0.125f, acc);
    }
    *s = iq_hsum(acc);
}

static void dot_iq2_xs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq2_xs *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t *q = x[i].qs + 4 * ib;
            __m256i g = iq_points8(quant_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
            uint32_t signs = (uint32_t)quant_ksigns[q[0] >> 9] | (uint32_t)quant_ksigns[q[1] >> 9] << 8 |
                             (uint32_t)quant_ksigns[q[2] >> 9] << 16 | (uint32_t)quant_ksigns[q[3] >> 9] << 24;
            const int sc = x[i].scales[ib];
            sumi = _mm256_add_epi32(sumi, iq_step(iq_signed(g, signs), y[i].qs + 32 * ib,
                                                  iq_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d * 0.125f, acc);
    }
    *s = iq_hsum(acc);
}

static void dot_iq2_s(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq2_s *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = x[i].qs + 4 * ib;
            const int h = x[i].qh[ib];
            __m256i g = iq_points8(quant_iq2s_grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300),
                                   q[2] | (h << 4 & 0x300), q[3] | (h << 2 & 0x300));
            const int sc = x[i].scales[ib];
            sumi = _mm256_add_epi32(sumi, iq_step(iq_signed(g, iq_u32(x[i].qs + 32 + 4 * ib)), y[i].qs + 32 * ib,
                                                  iq_pair(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1)));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d * 0.125f, acc);
    }
    *s = iq_hsum(acc);
}

static void dot_iq3_xxs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq3_xxs *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            int idx[8];
            for (int k = 0; k < 8; k++) idx[k] = x[i].qs[8 * ib + k];
            const uint32_t aux = iq_u32(x[i].qs + 64 + 4 * ib);
            sumi = _mm256_add_epi32(sumi, iq_step(iq_signed(iq_points4(quant_iq3xxs_grid, idx), iq_ksigns4(aux)),
                                                  y[i].qs + 32 * ib, _mm256_set1_epi32((int)(2 * (aux >> 28) + 1))));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d * 0.25f, acc);
    }
    *s = iq_hsum(acc);
}

static void dot_iq3_s(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq3_s *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            int idx[8];
            for (int k = 0; k < 8; k++) idx[k] = x[i].qs[8 * ib + k] | ((x[i].qh[ib] >> k) & 1) << 8;
            const int ls = 1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15);
            sumi = _mm256_add_epi32(sumi, iq_step(iq_signed(iq_points4(quant_iq3s_grid, idx), iq_u32(x[i].signs + 4 * ib)),
                                                  y[i].qs + 32 * ib, _mm256_set1_epi32(ls)));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d, acc);
    }
    *s = iq_hsum(acc);
}

/* 8·e + shift of four IQ1 groups: e the points' bytes (-1, 0, +1), shift
 * the byte each group's ±1 (the sign of its ±1/8), in the 64-bit lanes. */
static inline __m256i iq1_weights(__m256i g, __m256i shift)
{
    __m256i g8 = _mm256_add_epi8(g, g);
    g8 = _mm256_add_epi8(g8, g8);
    return _mm256_add_epi8(_mm256_add_epi8(g8, g8), shift);
}

static inline long long iq1_shift(bool down) { return down ? (long long)0xffffffffffffffffull : 0x0101010101010101ll; }

static void dot_iq1_s(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq1_s *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = x[i].qs + 4 * ib;
            const int h = x[i].qh[ib];
            __m256i g = iq_points8(quant_iq1s_grid, q[0] | (h & 7) << 8, q[1] | (h >> 3 & 7) << 8,
                                   q[2] | (h >> 6 & 7) << 8, q[3] | (h >> 9 & 7) << 8);
            __m256i w = iq1_weights(g, _mm256_set1_epi64x(iq1_shift(h & 0x8000)));
            sumi = _mm256_add_epi32(sumi, iq_step(w, y[i].qs + 32 * ib, _mm256_set1_epi32(2 * ((h >> 12) & 7) + 1)));
        }
        acc = iq_block(sumi, iq_half(x[i].d) * y[i].d * QUANT_IQ1_DELTA, acc);
    }
    *s = iq_hsum(acc);
}

static void dot_iq1_m(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq1_m *x = vx;
    const block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, 8);
        const uint16_t d16 = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = x[i].qs + 4 * ib, *qh = x[i].qh + 2 * ib;
            __m256i g = iq_points8(quant_iq1s_grid, q[0] | (qh[0] & 7) << 8, q[1] | (qh[0] >> 4 & 7) << 8,
                                   q[2] | (qh[1] & 7) << 8, q[3] | (qh[1] >> 4 & 7) << 8);
            __m256i shift = _mm256_setr_epi64x(iq1_shift(qh[0] & 0x08), iq1_shift(qh[0] & 0x80), iq1_shift(qh[1] & 0x08),
                                               iq1_shift(qh[1] & 0x80));
            const int word = sc[ib / 2] >> (6 * (ib % 2));
            sumi = _mm256_add_epi32(sumi, iq_step(iq1_weights(g, shift), y[i].qs + 32 * ib,
                                                  iq_pair(2 * (word & 7) + 1, 2 * (word >> 3 & 7) + 1)));
        }
        acc = iq_block(sumi, iq_half(d16) * y[i].d * QUANT_IQ1_DELTA, acc);
    }
    *s = iq_hsum(acc);
}

const quant_vec_dot_fn IQ_TABLE[QT_COUNT] = {
    [QT_IQ2_XXS] = dot_iq2_xxs, [QT_IQ2_XS] = dot_iq2_xs, [QT_IQ2_S] = dot_iq2_s, [QT_IQ3_XXS] = dot_iq3_xxs,
    [QT_IQ3_S] = dot_iq3_s,     [QT_IQ1_S] = dot_iq1_s,   [QT_IQ1_M] = dot_iq1_m,
};
