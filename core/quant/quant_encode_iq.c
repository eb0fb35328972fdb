/* quant_encode_iq.c — weight quantizers of the grid formats: IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
 *
 * A value is db · (signed grid element), IQ1: db · (grid element ± 1/8),
 * with db = d · m(s) for the sub-block's small scale code s.  Quantizing a
 * block is three searches, outermost first:
 *   1. the block's fp16 d: two fractions (1, 0.9) of the one that gives the
 *      largest sub-block scale the top code, each judged by the reference
 *      decoder (the least squared error wins, as in quant_ref_encode.c);
 *   2. per sub-block (32 or 16 values) the scale code s, the two nearest the
 *      sub-block's own least-squares scale (and IQ1's shift sign);
 *   3. per group (8 or 4 values) the grid point nearest the values' magnitudes
 *      over db: a plain scan of the whole grid (256 to 2048 points), so every
 *      index written is a point of the codebook.
 * Signs are the values' own; where a format stores 7 sign bits and implies
 * an 8th of even parity (IQ2_XXS, IQ2_XS, IQ3_XXS), an odd count flips the
 * element whose flip costs least.  No importance matrix is needed or used. */
#include "core/quant/quant_impl.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

/* One format: its grid, its scale code and how its decoder forms db. */
struct iq_format {
    enum quant_type type;
    int group;              /* values per grid point: 8, or 4 (IQ3) */
    int sub;                /* values per scale code: 32 or 16 */
    int smax;               /* largest scale code: 15, or 7 (IQ1) */
    bool parity;            /* 7 sign bits stored, the 8th implied */
    bool shifted;           /* IQ1: points of -1/0/+1 moved by ±1/8 */
    bool shift_per_group;   /* IQ1_M: the shift's sign per group (else per 32 values) */
    int family;             /* which grid: enum iq_grid */
    float (*db)(float d, int s); /* the decoder's sub-block scale */
};

/* What a block quantizes to, before packing. */
struct iq_codes {
    float d;                 /* as decoded (fp16 value, or IQ1_M's rebuilt fp16) */
    uint16_t d16;
    uint8_t s[16];           /* scale code per sub-block */
    uint16_t idx[64];        /* grid index per group */
    uint8_t signs[32];       /* sign bits per 8 values (bit j: value j negative) */
    bool down[32];           /* IQ1 shift −1/8, per group (IQ1_M) or per 32 values (IQ1_S, in [4k]) */
};

static float db_quarter(float d, int s) { return d * (0.5f + (float)s) * 0.25f; } /* IQ2_* */
static float db_half(float d, int s) { return d * (0.5f + (float)s) * 0.5f; }     /* IQ3_XXS */
static float db_odd(float d, int s) { return d * (float)(1 + 2 * s); }             /* IQ3_S, IQ1_* */

/* ---- the grids as the search reads them ---- */

enum iq_grid { G_IQ2XXS, G_IQ2XS, G_IQ2S, G_IQ3XXS, G_IQ3S, G_IQ1S, G_COUNT };

/* A grid's points as floats (point k's element j at e[group·k + j]), half
 * their squared norms, their stored codes (ascending) and its levels. */
struct iq_grid_f {
    int n, group, lbits, n_levels;
    const uint16_t *codes;
    float levels[8];
    float *e, *half_norm;
};

static struct iq_grid_f grids[G_COUNT];
static pthread_once_t grids_once = PTHREAD_ONCE_INIT;

static void grid_setup(struct iq_grid_f *g, const uint16_t *codes, int n, int group, const float *levels, int n_levels)
{
    g->n = n, g->group = group, g->codes = codes, g->n_levels = n_levels;
    g->lbits = n_levels > 4 ? 3 : 2;
    memcpy(g->levels, levels, sizeof(float) * (size_t)n_levels);
    g->e = malloc(sizeof(float) * (size_t)(n * group));
    g->half_norm = malloc(sizeof(float) * (size_t)n);
    if (!g->e || !g->half_norm) abort(); /* 200 KB in all, once: no way to report it from a quantizer */
    for (int k = 0; k < n; k++) {
        float nn = 0;
        for (int j = 0; j < group; j++) {
            float v = levels[(codes[k] >> (g->lbits * j)) & ((1 << g->lbits) - 1)];
            g->e[group * k + j] = v, nn += v * v;
        }
        g->half_norm[k] = 0.5f * nn;
    }
}

static void grids_init(void)
{
    float l2[3], l3x[8], l3s[8], l1[3];
    for (int i = 0; i < 3; i++) l2[i] = quant_iq2_levels[i], l1[i] = quant_iq1_levels[i];
    for (int i = 0; i < 8; i++) l3x[i] = quant_iq3xxs_levels[i], l3s[i] = quant_iq3s_levels[i];
    grid_setup(&grids[G_IQ2XXS], quant_iq2xxs_codes, 256, 8, l2, 3);
    grid_setup(&grids[G_IQ2XS], quant_iq2xs_codes, 512, 8, l2, 3);
    grid_setup(&grids[G_IQ2S], quant_iq2s_codes, 1024, 8, l2, 3);
    grid_setup(&grids[G_IQ3XXS], quant_iq3xxs_codes, 256, 4, l3x, 8);
    grid_setup(&grids[G_IQ3S], quant_iq3s_codes, 512, 4, l3s, 8);
    grid_setup(&grids[G_IQ1S], quant_iq1s_codes, 2048, 8, l1, 3);
}

static inline float element(const struct iq_format *f, int idx, int j) { return grids[f->family].e[f->group * idx + j]; }

/* The grid point nearest t[0..group) in least squares.  Each element to its
 * nearest level gives the nearest point of the whole lattice; when the grid
 * has it (a binary search of the ascending codes), it is the answer.  Else
 * a scan of every point, as the largest t·e − |e|²/2. */
static int nearest_point(const struct iq_format *f, const float *t)
{
    const struct iq_grid_f *g = &grids[f->family];
    unsigned code = 0;
    for (int j = 0; j < g->group; j++) {
        int l = 0;
        while (l + 1 < g->n_levels && t[j] >= 0.5f * (g->levels[l] + g->levels[l + 1])) l++;
        code |= (unsigned)l << (g->lbits * j);
    }
    for (int lo = 0, hi = g->n - 1; lo <= hi;) {
        int mid = (lo + hi) / 2;
        if (g->codes[mid] == code) return mid;
        if (g->codes[mid] < code) lo = mid + 1;
        else hi = mid - 1;
    }
    int best = 0;
    float best_s = -FLT_MAX;
    for (int k = 0; k < g->n; k++) {
        const float *e = g->e + g->group * k;
        float sc = -g->half_norm[k];
        for (int j = 0; j < g->group; j++) sc += t[j] * e[j];
        if (sc > best_s) best_s = sc, best = k;
    }
    return best;
}

/* Codes of one group of 8 values (two points for IQ3) at scale db; returns
 * the squared error as decoded (db · element, signed or shifted). */
static float code_group(const struct iq_format *f, const float *x, float db, bool down, struct iq_codes *c, int g)
{
    float t[8], err = 0;
    const float shift = down ? -QUANT_IQ1_DELTA : QUANT_IQ1_DELTA, id = db != 0 ? 1.0f / db : 0.0f;
    uint8_t signs = 0;
    for (int j = 0; j < 8; j++) {
        if (f->shifted) {
            t[j] = x[j] * id - shift;
        } else {
            t[j] = fabsf(x[j]) * id;
            if (x[j] < 0) signs |= (uint8_t)(1 << j);
        }
    }
    const int points = 8 / f->group;
    for (int p = 0; p < points; p++) c->idx[points * g + p] = (uint16_t)nearest_point(f, t + f->group * p);
    if (f->parity && __builtin_parity(signs)) {
        /* flip the element where the wrong sign costs least: 4·|x|·db·e */
        int jmin = 0;
        float cmin = FLT_MAX;
        for (int j = 0; j < 8; j++) {
            float cost = fabsf(x[j]) * element(f, c->idx[points * g + j / f->group], j % f->group);
            if (cost < cmin) cmin = cost, jmin = j;
        }
        signs ^= (uint8_t)(1 << jmin);
    }
    c->signs[g] = signs;
    for (int j = 0; j < 8; j++) {
        float e = element(f, c->idx[points * g + j / f->group], j % f->group);
        float v = f->shifted ? db * (e + shift) : db * ((signs >> j) & 1 ? -e : e);
        err += (x[j] - v) * (x[j] - v);
    }
    return err;
}

/* The sub-block's codes for scale code s (and for IQ1 the better shift
 * signs); returns its squared error. */
static float code_sub(const struct iq_format *f, const float *x, float d, int s, struct iq_codes *c, int sb)
{
    const float db = f->db(d, s);
    const int groups = f->sub / 8, g0 = sb * groups;
    float err = 0;
    if (!f->shifted) {
        for (int g = 0; g < groups; g++) err += code_group(f, x + 8 * g, db, false, c, g0 + g);
        return err;
    }
    if (f->shift_per_group) {
        for (int g = 0; g < groups; g++) {
            struct iq_codes up = *c;
            float e_up = code_group(f, x + 8 * g, db, false, &up, g0 + g);
            float e_down = code_group(f, x + 8 * g, db, true, c, g0 + g);
            c->down[g0 + g] = true;
            if (e_up <= e_down) *c = up, c->down[g0 + g] = false, e_down = e_up;
            err += e_down;
        }
        return err;
    }
    /* one shift sign for the sub-block of 32 */
    struct iq_codes up = *c;
    float e_up = 0, e_down = 0;
    for (int g = 0; g < groups; g++) e_up += code_group(f, x + 8 * g, db, false, &up, g0 + g);
    for (int g = 0; g < groups; g++) e_down += code_group(f, x + 8 * g, db, true, c, g0 + g);
    c->down[g0] = true;
    if (e_up <= e_down) *c = up, c->down[g0] = false, e_down = e_up;
    return e_down;
}

/* Least-squares float scale of one sub-block over its nearest points at a
 * trial scale: where its s should land. */
static float sub_scale(const struct iq_format *f, const float *x)
{
    float amax = 0;
    for (int j = 0; j < f->sub; j++) amax = fmaxf(amax, fabsf(x[j]));
    if (!(amax > 0)) return 0;
    const struct iq_grid_f *gr = &grids[f->family];
    const float top = gr->levels[gr->n_levels - 1]; /* the largest element any point has */
    struct iq_codes c;
    float best = FLT_MAX, best_scale = amax / top;
    for (int k = 0; k < 4; k++) {
        const float db = amax / top * (0.6f + 0.2f * (float)k);
        float err = 0, sxe = 0, see = 0;
        for (int g = 0; g < f->sub / 8; g++) {
            err += code_group(f, x + 8 * g, db, false, &c, g);
            for (int j = 0; j < 8; j++) {
                float e = element(f, c.idx[(8 / f->group) * g + j / f->group], j % f->group);
                float se = f->shifted ? e + QUANT_IQ1_DELTA : ((c.signs[g] >> j) & 1 ? -e : e);
                sxe += x[8 * g + j] * se, see += se * se;
            }
        }
        if (err < best) best = err, best_scale = see > 0 ? sxe / see : db;
    }
    return fabsf(best_scale);
}

static void pack(const struct iq_format *f, const struct iq_codes *c, void *blk);

/* All sub-blocks for the block scale d (as decoded); returns the error. */
static float code_block(const struct iq_format *f, const float *x, const float *want, float d, struct iq_codes *c)
{
    float err = 0;
    c->d = d;
    for (int sb = 0; sb < QK_K / f->sub; sb++) {
        /* the code whose db is nearest the wanted scale, and its upper neighbour */
        int s0 = 0;
        for (int s = 1; s <= f->smax; s++)
            if (fabsf(f->db(d, s) - want[sb]) < fabsf(f->db(d, s0) - want[sb])) s0 = s;
        float best = FLT_MAX;
        struct iq_codes cand = *c;
        for (int s = s0; s <= s0 + 1 && s <= f->smax; s++) {
            cand.s[sb] = (uint8_t)s;
            float e = code_sub(f, x + f->sub * sb, d, s, &cand, sb);
            if (e < best) best = e, *c = cand;
        }
        err += best;
    }
    return err;
}

static void iq_encode(const struct iq_format *f, const float *x, uint8_t *dst, int64_t n)
{
    pthread_once(&grids_once, grids_init);
    const size_t bsize = quant_row_size(f->type, QK_K);
    uint8_t cand[sizeof(block_iq3_s)];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, dst += bsize) {
        float want[16], wmax = 0, y[QK_K];
        for (int sb = 0; sb < QK_K / f->sub; sb++) wmax = fmaxf(wmax, want[sb] = sub_scale(f, x + f->sub * sb));
        struct iq_codes c;
        memset(&c, 0, sizeof c);
        pack(f, &c, dst); /* all zero: the answer when x is, or if nothing is finite */
        if (!(wmax > 0) || !isfinite(wmax)) continue;
        float best = FLT_MAX;
        const float d_top = wmax / f->db(1.0f, f->smax);
        for (int k = 0; k < 2; k++) {
            c.d16 = quant_f32_to_f16(d_top * (1.0f - 0.1f * (float)k));
            code_block(f, x, want, quant_half_to_float(c.d16), &c);
            pack(f, &c, cand);
            quant_iq_to_float[f->type](cand, y, QK_K);
            float err = 0;
            for (int v = 0; v < QK_K; v++) err += (x[v] - y[v]) * (x[v] - y[v]);
            if (err < best) best = err, memcpy(dst, cand, bsize);
        }
    }
}

/* ---- packing: the inverse of quant_ref_iq.c's readers ---- */

static void pack(const struct iq_format *f, const struct iq_codes *c, void *blk)
{
    memset(blk, 0, quant_row_size(f->type, QK_K));
    switch (f->type) {
    case QT_IQ2_XXS: {
        block_iq2_xxs *b = blk;
        b->d = c->d16;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t idx = 0, aux = (uint32_t)c->s[ib] << 28;
            for (int l = 0; l < 4; l++) idx |= (uint32_t)c->idx[4 * ib + l] << (8 * l), aux |= (uint32_t)(c->signs[4 * ib + l] & 127) << (7 * l);
            memcpy(b->qs + 4 * ib, &idx, 4);
            memcpy(b->qs + 4 * ib + 2, &aux, 4);
        }
        break;
    }
    case QT_IQ2_XS: {
        block_iq2_xs *b = blk;
        b->d = c->d16;
        for (int g = 0; g < 32; g++) b->qs[g] = (uint16_t)(c->idx[g] | (c->signs[g] & 127) << 9);
        for (int ib = 0; ib < 8; ib++) b->scales[ib] = (uint8_t)(c->s[2 * ib] | c->s[2 * ib + 1] << 4);
        break;
    }
    case QT_IQ2_S: {
        block_iq2_s *b = blk;
        b->d = c->d16;
        for (int g = 0; g < 32; g++) {
            b->qs[g] = (uint8_t)c->idx[g];
            b->qh[g / 4] |= (uint8_t)((c->idx[g] >> 8) << (2 * (g % 4)));
            b->qs[32 + g] = c->signs[g];
        }
        for (int ib = 0; ib < 8; ib++) b->scales[ib] = (uint8_t)(c->s[2 * ib] | c->s[2 * ib + 1] << 4);
        break;
    }
    case QT_IQ3_XXS: {
        block_iq3_xxs *b = blk;
        b->d = c->d16;
        for (int p = 0; p < 64; p++) b->qs[p] = (uint8_t)c->idx[p];
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux = (uint32_t)c->s[ib] << 28;
            for (int l = 0; l < 4; l++) aux |= (uint32_t)(c->signs[4 * ib + l] & 127) << (7 * l);
            memcpy(b->qs + 64 + 4 * ib, &aux, 4);
        }
        break;
    }
    case QT_IQ3_S: {
        block_iq3_s *b = blk;
        b->d = c->d16;
        for (int p = 0; p < 64; p++) {
            b->qs[p] = (uint8_t)c->idx[p];
            b->qh[p / 8] |= (uint8_t)((c->idx[p] >> 8) << (p % 8));
        }
        memcpy(b->signs, c->signs, 32);
        for (int ib = 0; ib < 8; ib++) b->scales[ib / 2] |= (uint8_t)(c->s[ib] << (4 * (ib % 2)));
        break;
    }
    case QT_IQ1_S: {
        block_iq1_s *b = blk;
        b->d = c->d16;
        for (int ib = 0; ib < 8; ib++) {
            uint16_t h = (uint16_t)(c->s[ib] << 12 | (c->down[4 * ib] ? 0x8000 : 0));
            for (int l = 0; l < 4; l++) {
                b->qs[4 * ib + l] = (uint8_t)c->idx[4 * ib + l];
                h |= (uint16_t)((c->idx[4 * ib + l] >> 8) << (3 * l));
            }
            b->qh[ib] = h;
        }
        break;
    }
    case QT_IQ1_M: {
        block_iq1_m *b = blk;
        uint16_t sc[4] = {0};
        for (int g = 0; g < 32; g++) {
            b->qs[g] = (uint8_t)c->idx[g];
            b->qh[g / 2] |= (uint8_t)(((c->idx[g] >> 8) | (c->down[g] ? 8 : 0)) << (4 * (g % 2)));
        }
        for (int sb = 0; sb < 16; sb++) sc[sb / 4] |= (uint16_t)(c->s[sb] << (3 * (sb % 4)));
        for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((c->d16 >> (4 * k)) & 15) << 12);
        memcpy(b->scales, sc, 8);
        break;
    }
    default: break;
    }
}

/* ---- the formats ---- */

#define IQ(T, grp, sub, smax, par, shifted, per_group, family, db)                             \
    static void encode_##T(const float *x, void *dst, int64_t n)                                 \
    {                                                                                            \
        static const struct iq_format f = {QT_##T, grp, sub, smax, par, shifted, per_group, family, db}; \
        iq_encode(&f, x, dst, n);                                                                \
    }
IQ(IQ2_XXS, 8, 32, 15, true, false, false, G_IQ2XXS, db_quarter)
IQ(IQ2_XS, 8, 16, 15, true, false, false, G_IQ2XS, db_quarter)
IQ(IQ2_S, 8, 16, 15, false, false, false, G_IQ2S, db_quarter)
IQ(IQ3_XXS, 4, 32, 15, true, false, false, G_IQ3XXS, db_half)
IQ(IQ3_S, 4, 32, 15, false, false, false, G_IQ3S, db_odd)
IQ(IQ1_S, 8, 32, 7, false, true, false, G_IQ1S, db_odd)
IQ(IQ1_M, 8, 16, 7, false, true, true, G_IQ1S, db_odd)
#undef IQ

const quant_from_float_fn quant_iq_from_float[QT_COUNT] = {
    [QT_IQ2_XXS] = encode_IQ2_XXS, [QT_IQ2_XS] = encode_IQ2_XS, [QT_IQ2_S] = encode_IQ2_S, [QT_IQ3_XXS] = encode_IQ3_XXS,
    [QT_IQ3_S] = encode_IQ3_S,     [QT_IQ1_S] = encode_IQ1_S,   [QT_IQ1_M] = encode_IQ1_M,
};
