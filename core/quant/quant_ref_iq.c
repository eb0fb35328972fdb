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

/* ---- reading the blocks ----
 * Each format is four small functions of a block (as bytes) — the decoded
 * d, the sub-scale of group l of 32-value sub-block ib (the decoder's float
 * db, and its odd integer 2s + 1 for the dot), and element j of group l —
 * and one decoder and one dot, written once over them (QUANT_INLINE: the
 * functions are constants in each instance), do the rest. */

static inline uint8_t grid8(uint64_t point, int j) { return (uint8_t)(point >> (8 * j)); }
static inline uint8_t grid4(uint32_t point, int j) { return (uint8_t)(point >> (8 * j)); }
static inline int signed_by(int v, uint8_t signs, int j) { return (signs >> j) & 1 ? -v : v; }


static inline float half_at(const void *p) { return quant_half_to_float(quant_u16(p)); }

typedef float (*iq_d_fn)(const uint8_t *b);
typedef float (*iq_db_fn)(float d, const uint8_t *b, int ib, int l);
typedef int (*iq_ls_fn)(const uint8_t *b, int ib, int l);
typedef int (*iq_value_fn)(const uint8_t *b, int ib, int l, int j);
typedef bool (*iq_down_fn)(const uint8_t *b, int ib, int l);

/* IQ2_XXS: 32 values are 4 words of qs: two of 4 index bytes, then two of
 * 4×7 sign bits with the 4-bit scale s on top.  db = d·(0.5 + s)·0.25. */
#define XXS(b) ((const block_iq2_xxs *)(const void *)(b))
static inline uint32_t iq2xxs_aux(const uint8_t *b, int ib) { return quant_u32(XXS(b)->qs + 4 * ib + 2); }
static float db_iq2_xxs(float d, const uint8_t *b, int ib, int l) { return d * (0.5f + (float)(iq2xxs_aux(b, ib) >> 28)) * 0.25f; }
static int ls_iq2_xxs(const uint8_t *b, int ib, int l) { return (int)(2 * (iq2xxs_aux(b, ib) >> 28) + 1); }
static int v_iq2_xxs(const uint8_t *b, int ib, int l, int j)
{
    uint32_t idx = quant_u32(XXS(b)->qs + 4 * ib);
    uint8_t signs = quant_ksigns[(iq2xxs_aux(b, ib) >> (7 * l)) & 127];
    return signed_by(grid8(quant_iq2xxs_grid[(idx >> (8 * l)) & 255], j), signs, j);
}

/* IQ2_XS, IQ2_S: a 4-bit scale per 16 values (scales[ib] low nibble for
 * groups 0, 1), db = d·(0.5 + s)·0.25.  XS: a 9-bit index and 7 sign bits a
 * group in one uint16; S: an 8-bit index with 2 more in qh, 8 sign bits. */
static inline int split_s(const uint8_t *scales, int ib, int l) { return (scales[ib] >> (4 * (l / 2))) & 15; }
static float db_iq2_xs(float d, const uint8_t *b, int ib, int l)
{
    return d * (0.5f + (float)split_s(((const block_iq2_xs *)(const void *)b)->scales, ib, l)) * 0.25f;
}
static float db_iq2_s(float d, const uint8_t *b, int ib, int l)
{
    return d * (0.5f + (float)split_s(((const block_iq2_s *)(const void *)b)->scales, ib, l)) * 0.25f;
}
static int ls_iq2_xs(const uint8_t *b, int ib, int l) { return 2 * split_s(((const block_iq2_xs *)(const void *)b)->scales, ib, l) + 1; }
static int ls_iq2_s(const uint8_t *b, int ib, int l) { return 2 * split_s(((const block_iq2_s *)(const void *)b)->scales, ib, l) + 1; }
static int v_iq2_xs(const uint8_t *b, int ib, int l, int j)
{
    uint16_t q = ((const block_iq2_xs *)(const void *)b)->qs[4 * ib + l];
    return signed_by(grid8(quant_iq2xs_grid[q & 511], j), quant_ksigns[q >> 9], j);
}
static int v_iq2_s(const uint8_t *b, int ib, int l, int j)
{
    const block_iq2_s *x = (const void *)b;
    int idx = x->qs[4 * ib + l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300);
    return signed_by(grid8(quant_iq2s_grid[idx], j), x->qs[32 + 4 * ib + l], j);
}

/* IQ3_XXS: element j (0..7) of group l is of two 4-element points; a word
 * after the 64 index bytes holds 4×7 sign bits and s; db = d·(0.5 + s)·0.5. */
static inline uint32_t iq3xxs_aux(const uint8_t *b, int ib) { return quant_u32(((const block_iq3_xxs *)(const void *)b)->qs + 64 + 4 * ib); }
static float db_iq3_xxs(float d, const uint8_t *b, int ib, int l) { return d * (0.5f + (float)(iq3xxs_aux(b, ib) >> 28)) * 0.5f; }
static int ls_iq3_xxs(const uint8_t *b, int ib, int l) { return (int)(2 * (iq3xxs_aux(b, ib) >> 28) + 1); }
static int v_iq3_xxs(const uint8_t *b, int ib, int l, int j)
{
    uint8_t point = ((const block_iq3_xxs *)(const void *)b)->qs[8 * ib + 2 * l + j / 4];
    return signed_by(grid4(quant_iq3xxs_grid[point], j % 4), quant_ksigns[(iq3xxs_aux(b, ib) >> (7 * l)) & 127], j);
}

/* IQ3_S: 9-bit indices (the 9th in qh), 8 sign bits a group, db = d·(1 + 2s). */
static inline int iq3s_s(const uint8_t *b, int ib) { return (((const block_iq3_s *)(const void *)b)->scales[ib / 2] >> (4 * (ib % 2))) & 15; }
static float db_iq3_s(float d, const uint8_t *b, int ib, int l) { return d * (float)(1 + 2 * iq3s_s(b, ib)); }
static int ls_iq3_s(const uint8_t *b, int ib, int l) { return 1 + 2 * iq3s_s(b, ib); }
static int v_iq3_s(const uint8_t *b, int ib, int l, int j)
{
    const block_iq3_s *x = (const void *)b;
    const int half = j / 4; /* which of the two points of the group */
    int idx = x->qs[8 * ib + 2 * l + half] | ((x->qh[ib] << (8 - 2 * l - half)) & 256);
    return signed_by(grid4(quant_iq3s_grid[idx], j % 4), x->signs[4 * ib + l], j);
}

/* IQ1_S: a 16-bit field per 32 values: 3 index bits a group, the scale s
 * at 12 and the shift's sign at 15; dl = d·(2s + 1). */
static inline uint16_t iq1s_qh(const uint8_t *b, int ib) { return ((const block_iq1_s *)(const void *)b)->qh[ib]; }
static int ls_iq1_s(const uint8_t *b, int ib, int l) { return 2 * ((iq1s_qh(b, ib) >> 12) & 7) + 1; }
static bool down_iq1_s(const uint8_t *b, int ib, int l) { return iq1s_qh(b, ib) & 0x8000; }
static int v_iq1_s(const uint8_t *b, int ib, int l, int j)
{
    int idx = ((const block_iq1_s *)(const void *)b)->qs[4 * ib + l] | (((iq1s_qh(b, ib) >> (3 * l)) & 7) << 8);
    return (int8_t)grid8(quant_iq1s_grid[idx], j);
}

/* IQ1_M: qh[2ib + l/2] holds groups l (low nibble, even l) and l + 1 (high):
 * 3 index bits and the shift's sign (bit 3).  The scales are four 16-bit
 * words: 3-bit scales at 3k of word ib/2 (k = 0, 1 for ib even, 2, 3 for
 * odd; one per 16 values), and the fp16 d in the words' top nibbles. */
static inline int iq1m_nib(const uint8_t *b, int ib, int l) { return (((const block_iq1_m *)(const void *)b)->qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15; }
static inline uint16_t iq1m_word(const uint8_t *b, int k)
{
    uint16_t w;
    memcpy(&w, ((const block_iq1_m *)(const void *)b)->scales + 2 * k, 2);
    return w;
}
static float d_iq1_m(const uint8_t *b)
{
    return quant_half_to_float((uint16_t)((iq1m_word(b, 0) >> 12) | ((iq1m_word(b, 1) >> 8) & 0x00f0) |
                                          ((iq1m_word(b, 2) >> 4) & 0x0f00) | (iq1m_word(b, 3) & 0xf000)));
}
static int ls_iq1_m(const uint8_t *b, int ib, int l) { return 2 * ((iq1m_word(b, ib / 2) >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1; }
static bool down_iq1_m(const uint8_t *b, int ib, int l) { return iq1m_nib(b, ib, l) & 8; }
static int v_iq1_m(const uint8_t *b, int ib, int l, int j)
{
    int idx = ((const block_iq1_m *)(const void *)b)->qs[4 * ib + l] | (iq1m_nib(b, ib, l) & 7) << 8;
    return (int8_t)grid8(quant_iq1s_grid[idx], j);
}

static float d_first(const uint8_t *b) { return half_at(b); } /* every format but IQ1_M starts with d */

/* ---- decoders ---- */

/* IQ2, IQ3: db · signed element, db formed as ggml forms it. */
QUANT_INLINE void decode_iq(const void *src, float *y, int64_t n, size_t bsize, iq_db_fn db, iq_value_fn value)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize) {
        const float d = half_at(b);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float s = db(d, b, ib, l);
                for (int j = 0; j < 8; j++) *y++ = s * (float)value(b, ib, l, j);
            }
    }
}

/* IQ1: dl · (element ± 1/8), dl = d·(2s + 1). */
QUANT_INLINE void decode_iq1(const void *src, float *y, int64_t n, size_t bsize, iq_d_fn dfn, iq_ls_fn ls,
                             iq_down_fn down, iq_value_fn value)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += bsize) {
        const float d = dfn(b);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float dl = d * (float)ls(b, ib, l);
                const float delta = down(b, ib, l) ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA;
                for (int j = 0; j < 8; j++) *y++ = dl * ((float)value(b, ib, l, j) + delta);
            }
    }
}

static void iq2_xxs_to_float(const void *b, float *y, int64_t n) { decode_iq(b, y, n, sizeof(block_iq2_xxs), db_iq2_xxs, v_iq2_xxs); }
static void iq2_xs_to_float(const void *b, float *y, int64_t n) { decode_iq(b, y, n, sizeof(block_iq2_xs), db_iq2_xs, v_iq2_xs); }
static void iq2_s_to_float(const void *b, float *y, int64_t n) { decode_iq(b, y, n, sizeof(block_iq2_s), db_iq2_s, v_iq2_s); }
static void iq3_xxs_to_float(const void *b, float *y, int64_t n) { decode_iq(b, y, n, sizeof(block_iq3_xxs), db_iq3_xxs, v_iq3_xxs); }
static void iq3_s_to_float(const void *b, float *y, int64_t n) { decode_iq(b, y, n, sizeof(block_iq3_s), db_iq3_s, v_iq3_s); }
static void iq1_s_to_float(const void *b, float *y, int64_t n)
{
    decode_iq1(b, y, n, sizeof(block_iq1_s), d_first, ls_iq1_s, down_iq1_s, v_iq1_s);
}
static void iq1_m_to_float(const void *b, float *y, int64_t n)
{
    decode_iq1(b, y, n, sizeof(block_iq1_m), d_iq1_m, ls_iq1_m, down_iq1_m, v_iq1_m);
}

/* ---- dots with Q8_K ----
 * Per group: Σ element·y in int, times its odd factor 2s + 1 in int; the
 * block's d, the format's k (db = d·(2s + 1)·k) and y's scale once.  IQ1's
 * ±1/8 multiplies Σy of the group, counted apart (sumd) in int too. */

static inline int group_dot(iq_value_fn value, const uint8_t *b, int ib, int l, const int8_t *yq, int *sy)
{
    int s = 0;
    *sy = 0;
    for (int j = 0; j < 8; j++) s += value(b, ib, l, j) * yq[j], *sy += yq[j];
    return s;
}

QUANT_INLINE float dot_iq(int64_t n, const uint8_t *x, size_t bsize, const block_q8_K *y, float k, iq_d_fn dfn,
                          iq_ls_fn ls, iq_down_fn down, iq_value_fn value)
{
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++, x += bsize) {
        int sumi = 0, sumd = 0;
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                int sy, p = group_dot(value, x, ib, l, y[i].qs + 32 * ib + 8 * l, &sy);
                sumi += ls(x, ib, l) * p;
                if (down) sumd += ls(x, ib, l) * (down(x, ib, l) ? -sy : sy);
            }
        sum += dfn(x) * y[i].d * ((float)sumi + QUANT_IQ1_DELTA * (float)sumd) * k;
    }
    return sum;
}

#define DOT_IQ(name, block, k, dfn, down)                                                               \
    static void dot_##name(int64_t n, float *s, const void *x, const void *y)                           \
    {                                                                                                   \
        *s = dot_iq(n, x, sizeof(block), y, k, dfn, ls_##name, down, v_##name);                         \
    }
DOT_IQ(iq2_xxs, block_iq2_xxs, 0.125f, d_first, NULL)
DOT_IQ(iq2_xs, block_iq2_xs, 0.125f, d_first, NULL)
DOT_IQ(iq2_s, block_iq2_s, 0.125f, d_first, NULL)
DOT_IQ(iq3_xxs, block_iq3_xxs, 0.25f, d_first, NULL)
DOT_IQ(iq3_s, block_iq3_s, 1.0f, d_first, NULL)
DOT_IQ(iq1_s, block_iq1_s, 1.0f, d_first, down_iq1_s)
DOT_IQ(iq1_m, block_iq1_m, 1.0f, d_iq1_m, down_iq1_m)
#undef DOT_IQ

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
