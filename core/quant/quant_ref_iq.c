/* quant_ref_iq.c — the scalar reference of the grid ("IQ") formats:
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, all 256-value
 * blocks that dot with Q8_K.
 *
 * The one idea of these formats: a group of 8 values (IQ2, IQ1) or 4 (IQ3)
 * is an index into a grid of points (quant_grids.c), each element a small
 * positive integer (IQ2, IQ3) or -1/0/+1 (IQ1); signs come separately (IQ2,
 * IQ3: 8 bits a group of 8, or 7 bits and an even-parity 8th), scales per
 * 32 or 16 values are small odd integers (2s + 1) over a common fp16 d, and
 * IQ1 shifts every point by ±1/8.  So value v is
 *     d · (2s + 1) · k · (signed grid element)            (IQ2, IQ3)
 *     d · (2s + 1) · (grid element ± 1/8)                 (IQ1)
 * with k = 1/8, 1/4 or 1 per format; the decoders form the scale first
 * exactly as ggml's dequantize_row_* do (e.g. IQ2_XXS: d·(0.5 + s)·0.25), so
 * files decode to the same bits.  The dots keep the grid · activation sums
 * and the odd scale factors in integers and apply d, k and the activation
 * scale once per block (the IQ1 shift through the activation sums). */
#include "core/quant/quant_impl.h"

/* ---- reading the blocks ---- */

static inline uint8_t grid8(uint64_t point, int j) { return (uint8_t)(point >> (8 * j)); }
static inline uint8_t grid4(uint32_t point, int j) { return (uint8_t)(point >> (8 * j)); }
static inline int signed_by(int v, uint8_t signs, int j) { return (signs >> j) & 1 ? -v : v; }

static inline uint32_t u32_at(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* IQ2_XXS: 32 values are 4 words of qs: two of 4 index bytes, then two of
 * 4×7 sign bits with the 4-bit scale s on top. */
static inline void iq2xxs_group(const block_iq2_xxs *b, int ib, uint32_t *idx, uint32_t *aux)
{
    *idx = u32_at(b->qs + 4 * ib);
    *aux = u32_at(b->qs + 4 * ib + 2);
}

/* Element j of group l (8 values) of 32-value sub-block ib, signed. */
static inline int iq2xxs_value(const block_iq2_xxs *b, int ib, int l, int j)
{
    uint32_t idx, aux;
    iq2xxs_group(b, ib, &idx, &aux);
    uint8_t signs = quant_ksigns[(aux >> (7 * l)) & 127];
    return signed_by(grid8(quant_iq2xxs_grid[(idx >> (8 * l)) & 255], j), signs, j);
}

static inline int iq2xs_value(const block_iq2_xs *b, int ib, int l, int j)
{
    uint16_t q = b->qs[4 * ib + l];
    return signed_by(grid8(quant_iq2xs_grid[q & 511], j), quant_ksigns[q >> 9], j);
}

static inline int iq2s_value(const block_iq2_s *b, int ib, int l, int j)
{
    int idx = b->qs[4 * ib + l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300);
    return signed_by(grid8(quant_iq2s_grid[idx], j), b->qs[32 + 4 * ib + l], j);
}

/* IQ3_XXS: element j (0..7) of group l: two 4-element points. */
static inline int iq3xxs_value(const block_iq3_xxs *b, int ib, int l, int j)
{
    uint32_t aux = u32_at(b->qs + 64 + 4 * ib);
    uint8_t point = b->qs[8 * ib + 2 * l + j / 4];
    return signed_by(grid4(quant_iq3xxs_grid[point], j % 4), quant_ksigns[(aux >> (7 * l)) & 127], j);
}

static inline int iq3s_value(const block_iq3_s *b, int ib, int l, int j)
{
    const int half = j / 4; /* which of the two points of the group */
    int idx = b->qs[8 * ib + 2 * l + half] | ((b->qh[ib] << (8 - 2 * l - half)) & 256);
    return signed_by(grid4(quant_iq3s_grid[idx], j % 4), b->signs[4 * ib + l], j);
}

/* IQ1_S: the grid element (-1, 0, +1) of group l, and the 16-bit field of sub-block ib. */
static inline int iq1s_value(const block_iq1_s *b, int ib, int l, int j)
{
    int idx = b->qs[4 * ib + l] | (((b->qh[ib] >> (3 * l)) & 7) << 8);
    return (int8_t)grid8(quant_iq1s_grid[idx], j);
}

/* IQ1_M: qh[2ib + l/2] holds groups l (low nibble, even l) and l + 1 (high):
 * 3 index bits and the sign of the shift (bit 3 of the nibble). */
static inline int iq1m_value(const block_iq1_m *b, int ib, int l, int j)
{
    int nib = (b->qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
    int idx = b->qs[4 * ib + l] | (nib & 7) << 8;
    return (int8_t)grid8(quant_iq1s_grid[idx], j);
}

static inline bool iq1m_shift_down(const block_iq1_m *b, int ib, int l)
{
    return (b->qh[2 * ib + l / 2] >> (4 * (l % 2))) & 8;
}

/* IQ1_M's scales: four 16-bit words; 3-bit scales at 3k of word ib/2 (k = 0,
 * 1 for sub-block ib even, 2, 3 for odd), and the fp16 d in the top nibbles. */
static inline void iq1m_words(const block_iq1_m *b, uint16_t sc[4]) { memcpy(sc, b->scales, 8); }

static inline float iq1m_d(const uint16_t sc[4])
{
    return quant_half_to_float((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                          (sc[3] & 0xf000)));
}

/* 2s + 1 of the 16 values h (0, 1) of sub-block ib. */
static inline int iq1m_scale(const uint16_t sc[4], int ib, int h) { return 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7) + 1; }

/* ---- decoders ---- */

static void iq2_xxs_to_float(const void *src, float *y, int64_t n)
{
    const block_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx, aux;
            iq2xxs_group(&b[i], ib, &idx, &aux);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                for (int j = 0; j < 8; j++) *y++ = db * (float)iq2xxs_value(&b[i], ib, l, j);
        }
    }
}

static void iq2_xs_to_float(const void *src, float *y, int64_t n)
{
    const block_iq2_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float db = d * (0.5f + (float)((b[i].scales[ib] >> (4 * (l / 2))) & 15)) * 0.25f;
                for (int j = 0; j < 8; j++) *y++ = db * (float)iq2xs_value(&b[i], ib, l, j);
            }
    }
}

static void iq2_s_to_float(const void *src, float *y, int64_t n)
{
    const block_iq2_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float db = d * (0.5f + (float)((b[i].scales[ib] >> (4 * (l / 2))) & 15)) * 0.25f;
                for (int j = 0; j < 8; j++) *y++ = db * (float)iq2s_value(&b[i], ib, l, j);
            }
    }
}

static void iq3_xxs_to_float(const void *src, float *y, int64_t n)
{
    const block_iq3_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (0.5f + (float)(u32_at(b[i].qs + 64 + 4 * ib) >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++)
                for (int j = 0; j < 8; j++) *y++ = db * (float)iq3xxs_value(&b[i], ib, l, j);
        }
    }
}

static void iq3_s_to_float(const void *src, float *y, int64_t n)
{
    const block_iq3_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (float)(1 + 2 * ((b[i].scales[ib / 2] >> (4 * (ib % 2))) & 15));
            for (int l = 0; l < 4; l++)
                for (int j = 0; j < 8; j++) *y++ = db * (float)iq3s_value(&b[i], ib, l, j);
        }
    }
}

static void iq1_s_to_float(const void *src, float *y, int64_t n)
{
    const block_iq1_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = quant_half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float dl = d * (float)(2 * ((b[i].qh[ib] >> 12) & 7) + 1);
            const float delta = b[i].qh[ib] & 0x8000 ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA;
            for (int l = 0; l < 4; l++)
                for (int j = 0; j < 8; j++) *y++ = dl * ((float)iq1s_value(&b[i], ib, l, j) + delta);
        }
    }
}

static void iq1_m_to_float(const void *src, float *y, int64_t n)
{
    const block_iq1_m *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        iq1m_words(&b[i], sc);
        const float d = iq1m_d(sc);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float dl = d * (float)iq1m_scale(sc, ib, l / 2);
                const float delta = iq1m_shift_down(&b[i], ib, l) ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA;
                for (int j = 0; j < 8; j++) *y++ = dl * ((float)iq1m_value(&b[i], ib, l, j) + delta);
            }
    }
}

/* ---- dots with Q8_K ----
 * Per 8-value group g: Σ element · y in int; times the sub-block's odd
 * factor 2s + 1 in int; the block's d, the format's k and y's scale once. */

/* Σ_j e(j)·y[j] over one group of 8, e read by the format's value function. */
#define GROUP_DOT(value_fn, blk, ib, l, yq, out)                               \
    do {                                                                       \
        int s_ = 0;                                                            \
        for (int j_ = 0; j_ < 8; j_++) s_ += value_fn(blk, ib, l, j_) * (yq)[j_]; \
        (out) = s_;                                                            \
    } while (0)

static void dot_iq2_xxs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq2_xxs *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx, aux;
            iq2xxs_group(&x[i], ib, &idx, &aux);
            int g = 0;
            for (int l = 0; l < 4; l++) {
                int p;
                GROUP_DOT(iq2xxs_value, &x[i], ib, l, y[i].qs + 32 * ib + 8 * l, p);
                g += p;
            }
            sumi += (int)(2 * (aux >> 28) + 1) * g;
        }
        sum += quant_half_to_float(x[i].d) * y[i].d * (float)sumi * 0.125f;
    }
    *s = sum;
}

/* IQ2_XS and IQ2_S: a 4-bit scale per 16 values (low nibble groups 0, 1). */
#define DOT_IQ2_SPLIT(name, block_t, value_fn)                                                    \
    static void name(int64_t n, float *s, const void *vx, const void *vy)                         \
    {                                                                                             \
        const block_t *x = vx;                                                                    \
        const block_q8_K *y = vy;                                                                 \
        float sum = 0;                                                                            \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                  \
            int sumi = 0;                                                                         \
            for (int ib = 0; ib < 8; ib++)                                                        \
                for (int l = 0; l < 4; l++) {                                                     \
                    int p;                                                                        \
                    GROUP_DOT(value_fn, &x[i], ib, l, y[i].qs + 32 * ib + 8 * l, p);              \
                    sumi += (2 * ((x[i].scales[ib] >> (4 * (l / 2))) & 15) + 1) * p;              \
                }                                                                                 \
            sum += quant_half_to_float(x[i].d) * y[i].d * (float)sumi * 0.125f;                   \
        }                                                                                         \
        *s = sum;                                                                                 \
    }
DOT_IQ2_SPLIT(dot_iq2_xs, block_iq2_xs, iq2xs_value)
DOT_IQ2_SPLIT(dot_iq2_s, block_iq2_s, iq2s_value)

static void dot_iq3_xxs(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq3_xxs *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            int g = 0;
            for (int l = 0; l < 4; l++) {
                int p;
                GROUP_DOT(iq3xxs_value, &x[i], ib, l, y[i].qs + 32 * ib + 8 * l, p);
                g += p;
            }
            sumi += (int)(2 * (u32_at(x[i].qs + 64 + 4 * ib) >> 28) + 1) * g;
        }
        sum += quant_half_to_float(x[i].d) * y[i].d * (float)sumi * 0.25f;
    }
    *s = sum;
}

static void dot_iq3_s(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq3_s *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            int g = 0;
            for (int l = 0; l < 4; l++) {
                int p;
                GROUP_DOT(iq3s_value, &x[i], ib, l, y[i].qs + 32 * ib + 8 * l, p);
                g += p;
            }
            sumi += (1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15)) * g;
        }
        sum += quant_half_to_float(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sum;
}

/* IQ1: d·(2s+1)·(e + δ): Σ e·y in int, and δ (±1/8) times Σ y per group or
 * sub-block, from the codes (IQ1_M's groups of 8 are finer than the bsums). */
static void dot_iq1_s(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq1_s *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, sumd = 0; /* Σ (2s+1)·Σ e·y; Σ (2s+1)·sign(δ)·Σ y */
        for (int ib = 0; ib < 8; ib++) {
            const int ls = 2 * ((x[i].qh[ib] >> 12) & 7) + 1;
            int g = 0;
            for (int l = 0; l < 4; l++) {
                int p;
                GROUP_DOT(iq1s_value, &x[i], ib, l, y[i].qs + 32 * ib + 8 * l, p);
                g += p;
            }
            sumi += ls * g;
            sumd += ls * (x[i].qh[ib] & 0x8000 ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
        }
        sum += quant_half_to_float(x[i].d) * y[i].d * ((float)sumi + QUANT_IQ1_DELTA * (float)sumd);
    }
    *s = sum;
}

static void dot_iq1_m(int64_t n, float *s, const void *vx, const void *vy)
{
    const block_iq1_m *x = vx;
    const block_q8_K *y = vy;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        iq1m_words(&x[i], sc);
        int sumi = 0, sumd = 0;
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const int8_t *yq = y[i].qs + 32 * ib + 8 * l;
                const int ls = iq1m_scale(sc, ib, l / 2);
                int p, sy = 0;
                GROUP_DOT(iq1m_value, &x[i], ib, l, yq, p);
                for (int j = 0; j < 8; j++) sy += yq[j];
                sumi += ls * p;
                sumd += ls * (iq1m_shift_down(&x[i], ib, l) ? -sy : sy);
            }
        sum += iq1m_d(sc) * y[i].d * ((float)sumi + QUANT_IQ1_DELTA * (float)sumd);
    }
    *s = sum;
}

/* ---- tables ---- */

const quant_to_float_fn quant_iq_to_float[QT_COUNT] = {
    [QT_IQ2_XXS] = iq2_xxs_to_float, [QT_IQ2_XS] = iq2_xs_to_float, [QT_IQ2_S] = iq2_s_to_float,
    [QT_IQ3_XXS] = iq3_xxs_to_float, [QT_IQ3_S] = iq3_s_to_float,   [QT_IQ1_S] = iq1_s_to_float,
    [QT_IQ1_M] = iq1_m_to_float,
};

const quant_vec_dot_fn quant_iq_vec_dot[QT_COUNT] = {
    [QT_IQ2_XXS] = dot_iq2_xxs, [QT_IQ2_XS] = dot_iq2_xs, [QT_IQ2_S] = dot_iq2_s, [QT_IQ3_XXS] = dot_iq3_xxs,
    [QT_IQ3_S] = dot_iq3_s,     [QT_IQ1_S] = dot_iq1_s,   [QT_IQ1_M] = dot_iq1_m,
};
