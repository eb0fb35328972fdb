/* quant_f32_grid.h — the fp32 decoders of the grid formats (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) for quant_f32_body.h, which
 * includes it (so it is compiled twice, VW 8 and 16, like the body).
 *
 * The one idea: every format here turns 16 consecutive values into one
 * 16-byte vector of grid elements (two 8-byte points, or four 4-byte IQ3
 * points, read from quant_grids.c's tables by scalar index), 16 sign bits
 * and one float scale — in every format 16 consecutive values share their
 * scale — and one helper (put16_grid, put16_iq1) converts that to floats.
 * The signs negate the integer element before its conversion and the scale
 * is formed by the same scalar expression as quant_ref_iq.c's db_* (for
 * IQ1: dl = d·(2s + 1), then dl · (element ± 1/8)), so every value is the
 * reference decoder's float to the bit, zeros' signs included.
 *
 * The indices are read per group with scalar loads rather than gathered: a
 * grid of at most 16 KiB stays in L1, and two scalar loads and a pinsrq per
 * 16 values keep the decode well ahead of the FMA dot. */
#ifndef NB_QUANT_F32_GRID_H
#define NB_QUANT_F32_GRID_H

#if VW != 16
/* Lane j (0..7) all ones where bit j of bits is set. */
static inline __m256i f32_lanes_of_bits(uint32_t bits)
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), bit), bit);
}
#endif

/* 16 unsigned grid elements q (IQ2, IQ3), element j negated where bit j of
 * signs is set, times s: the reference's db · (float)(±element). */
static inline void put16_grid(__m128i q, uint32_t signs, float s, float *y)
{
#if VW == 16
    __m512i v = _mm512_cvtepu8_epi32(q);
    v = _mm512_mask_sub_epi32(v, (__mmask16)signs, _mm512_setzero_si512(), v);
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(s), _mm512_cvtepi32_ps(v)));
#else
    const __m256 S = _mm256_set1_ps(s);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(q, 8) : q);
        __m256i m = f32_lanes_of_bits(signs >> (8 * h));
        v = _mm256_sub_epi32(_mm256_xor_si256(v, m), m); /* -v where m is all ones */
        _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(S, _mm256_cvtepi32_ps(v)));
    }
#endif
}

/* 16 IQ1 elements (-1, 0, +1 as int8): dl · ((float)e + delta), the first 8
 * with delta0, the next 8 with delta1 (IQ1_M shifts each group of 8). */
static inline void put16_iq1(__m128i q, float delta0, float delta1, float dl, float *y)
{
#if VW == 16
    const __m512 delta = _mm512_insertf32x8(_mm512_set1_ps(delta0), _mm256_set1_ps(delta1), 1);
    __m512 e = _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), delta);
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(dl), e));
#else
    const __m256 DL = _mm256_set1_ps(dl);
    for (int h = 0; h < 2; h++) {
        __m256 e = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h ? _mm_srli_si128(q, 8) : q));
        _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(DL, _mm256_add_ps(e, _mm256_set1_ps(h ? delta1 : delta0))));
    }
#endif
}

static inline __m128i f32_points2(uint64_t p0, uint64_t p1) { return _mm_set_epi64x((long long)p1, (long long)p0); }

/* One decoder per format: block k of the piece into y[256k..], the
 * reference's loop order (sub-block ib of 32, groups l of 8). */
#define F32_GRID_DECODER(name, block, ...)                                                                       \
    static const float *dec_##name(const uint8_t *w, int64_t i, int64_t len, float *buf)                        \
    {                                                                                                            \
        const block *blocks = (const block *)(const void *)w + i / QK_K;                                         \
        for (int64_t k = 0; k < len / QK_K; k++) {                                                               \
            const block *x = &blocks[k];                                                                         \
            float *y = buf + QK_K * k;                                                                           \
            __VA_ARGS__                                                                                          \
        }                                                                                                        \
        return buf;                                                                                              \
    }

/* IQ2_XXS: per sub-block two words of qs, 4 index bytes then 4×7 sign bits
 * with the 4-bit s on top; db = d·(0.5 + s)·0.25. */
F32_GRID_DECODER(iq2_xxs, block_iq2_xxs, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t idx = quant_u32(x->qs + 4 * ib), aux = quant_u32(x->qs + 4 * ib + 2);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        for (int l = 0; l < 4; l += 2) {
            uint32_t signs = quant_ksigns[(aux >> (7 * l)) & 127] | (uint32_t)quant_ksigns[(aux >> (7 * l + 7)) & 127] << 8;
            put16_grid(f32_points2(quant_iq2xxs_grid[(idx >> (8 * l)) & 255], quant_iq2xxs_grid[(idx >> (8 * l + 8)) & 255]),
                       signs, db, y + 32 * ib + 8 * l);
        }
    }
})

/* IQ2_XS: a 9-bit index and 7 sign bits a group in one uint16; IQ2_S: an
 * 8-bit index with 2 more bits in qh, 8 sign bits after the indices.  Both
 * have a 4-bit s per 16 values (nibble h of scales[ib]), db = d·(0.5 + s)·0.25. */
static inline float f32_db_iq2(float d, uint8_t scales, int h)
{
    return d * (0.5f + (float)((scales >> (4 * h)) & 15)) * 0.25f;
}

#if VW != 16 /* VW 16: quant_f32_grid512.h */
F32_GRID_DECODER(iq2_xs, block_iq2_xs, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++)
        for (int h = 0; h < 2; h++) {
            const uint16_t q0 = x->qs[4 * ib + 2 * h], q1 = x->qs[4 * ib + 2 * h + 1];
            put16_grid(f32_points2(quant_iq2xs_grid[q0 & 511], quant_iq2xs_grid[q1 & 511]),
                       quant_ksigns[q0 >> 9] | (uint32_t)quant_ksigns[q1 >> 9] << 8, f32_db_iq2(d, x->scales[ib], h),
                       y + 32 * ib + 16 * h);
        }
})

#endif

F32_GRID_DECODER(iq2_s, block_iq2_s, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++)
        for (int h = 0; h < 2; h++) {
            const int l = 2 * h;
            const int i0 = x->qs[4 * ib + l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300);
            const int i1 = x->qs[4 * ib + l + 1] | ((x->qh[ib] << (6 - 2 * l)) & 0x300);
            put16_grid(f32_points2(quant_iq2s_grid[i0], quant_iq2s_grid[i1]),
                       x->qs[32 + 4 * ib + l] | (uint32_t)x->qs[32 + 4 * ib + l + 1] << 8, f32_db_iq2(d, x->scales[ib], h),
                       y + 32 * ib + 16 * h);
        }
})

/* IQ3: four 4-element points per 16 values.  IQ3_XXS: 8 index bytes a
 * sub-block, then (after all 64) a word of 4×7 sign bits and s, db =
 * d·(0.5 + s)·0.5; IQ3_S: 9-bit indices (the 9th in qh), 8 sign bits a
 * group, db = d·(1 + 2s) with s per sub-block. */
static inline __m128i f32_points4(const uint32_t *grid, int i0, int i1, int i2, int i3)
{
    return _mm_setr_epi32((int)grid[i0], (int)grid[i1], (int)grid[i2], (int)grid[i3]);
}

F32_GRID_DECODER(iq3_xxs, block_iq3_xxs, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = x->qs + 8 * ib;
        const uint32_t aux = quant_u32(x->qs + 64 + 4 * ib);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        for (int l = 0; l < 4; l += 2) {
            uint32_t signs = quant_ksigns[(aux >> (7 * l)) & 127] | (uint32_t)quant_ksigns[(aux >> (7 * l + 7)) & 127] << 8;
            put16_grid(f32_points4(quant_iq3xxs_grid, q[2 * l], q[2 * l + 1], q[2 * l + 2], q[2 * l + 3]), signs, db,
                       y + 32 * ib + 8 * l);
        }
    }
})

F32_GRID_DECODER(iq3_s, block_iq3_s, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = x->qs + 8 * ib;
        const int qh = x->qh[ib];
        const float db = d * (float)(1 + 2 * ((x->scales[ib / 2] >> (4 * (ib % 2))) & 15));
        for (int l = 0; l < 4; l += 2) {
            /* point 2l + p's 9th index bit is bit 2l + p of qh */
            const int i0 = q[2 * l] | ((qh << (8 - 2 * l)) & 256), i1 = q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
            const int i2 = q[2 * l + 2] | ((qh << (6 - 2 * l)) & 256), i3 = q[2 * l + 3] | ((qh << (5 - 2 * l)) & 256);
            put16_grid(f32_points4(quant_iq3s_grid, i0, i1, i2, i3), x->signs[4 * ib + l] | (uint32_t)x->signs[4 * ib + l + 1] << 8,
                       db, y + 32 * ib + 8 * l);
        }
    }
})

/* IQ1_S: per sub-block a 16-bit field of 3 index bits a group, s at 12 and
 * the shift's sign at 15: dl = d·(2s + 1), one shift for all 32 values. */
F32_GRID_DECODER(iq1_s, block_iq1_s, {
    const float d = f32_half(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = x->qh[ib];
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA;
        for (int l = 0; l < 4; l += 2) {
            const int i0 = x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
            const int i1 = x->qs[4 * ib + l + 1] | (((qh >> (3 * l + 3)) & 7) << 8);
            put16_iq1(f32_points2(quant_iq1s_grid[i0], quant_iq1s_grid[i1]), delta, delta, dl, y + 32 * ib + 8 * l);
        }
    }
})

/* IQ1_M: qh[2ib + h] holds groups 2h (low nibble) and 2h + 1: 3 index bits
 * and the shift's sign (bit 3); a 3-bit s per 16 values at 6·(ib%2) + 3h of
 * scale word ib/2, dl = d·(2s + 1); d is the words' top nibbles. */
F32_GRID_DECODER(iq1_m, block_iq1_m, {
    const float d = f32_half(quant_iq1m_half(x->scales));
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t sw = quant_u16(x->scales + 2 * (ib / 2));
        for (int h = 0; h < 2; h++) {
            const int nibs = x->qh[2 * ib + h];
            const float dl = d * (float)(2 * ((sw >> (6 * (ib % 2) + 3 * h)) & 7) + 1);
            const int i0 = x->qs[4 * ib + 2 * h] | (nibs & 7) << 8, i1 = x->qs[4 * ib + 2 * h + 1] | (nibs >> 4 & 7) << 8;
            put16_iq1(f32_points2(quant_iq1s_grid[i0], quant_iq1s_grid[i1]), nibs & 8 ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA,
                      nibs & 0x80 ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA, dl, y + 32 * ib + 16 * h);
        }
    }
})

#undef F32_GRID_DECODER

#if VW == 16
#include "core/quant/quant_f32_grid512.h"
#endif

#endif
