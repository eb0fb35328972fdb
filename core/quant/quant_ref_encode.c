/* quant_ref_encode.c — weight quantizers: rows of floats to ggml blocks.
 *
 * One idea throughout: build a few candidate encodings of a block, decode each
 * with the reference decoder, keep the one with the least squared error.  The
 * decoder is the judge, so the kept block decodes exactly as it was scored,
 * with its scales already rounded to fp16.  Among the candidates there is
 * always a "safe" one built so that no value is clipped and each lands within
 * half a step of its level; the result can only be better than that one, which
 * gives every format a simple error bound (tests/core/test_quant.c checks it):
 *
 *   Q4_0, Q5_0    step = max|x| / 7 or / 15   (the positive levels only)
 *   Q4_1, Q5_1    step = (max - min) / 15 or / 31, plus one fp16 ulp of min
 *   Q4_K, Q5_K    per 32 values: (max - min(min, 0) + dmin) / 15 or / 31, plus d
 *   Q2_K          per 16 values: (max - min(min, 0) + dmin) / 3, plus d
 *   Q6_K, Q3_K    per 16 values: max|x| / 31 or / 3, plus d
 *   IQ4_NL        max|x| / 113 per table unit; the widest table gap is 24 units
 *   IQ4_XS        per 32 values: max|x| / 113 plus d per table unit
 *
 * Other candidates follow ggml's recipe loosely: the block's signed extreme on
 * the most negative level (that level has no positive twin), a few stretches
 * of the scale, and a least-squares refit of the scale for the codes found. */
#include "core/quant/quant_impl.h"

#include <float.h>
#include <math.h>

/* A sorted set of levels that codes index; its size is a power of two. */
struct levels {
    const int8_t *v;
    int n;
};

/* -32..31: Q6_K's levels; its middle 32 are Q5_0's and middle 16 Q4_0's. */
static const int8_t uniform_levels[64] = {
    -32, -31, -30, -29, -28, -27, -26, -25, -24, -23, -22, -21, -20, -19, -18, -17,
    -16, -15, -14, -13, -12, -11, -10, -9,  -8,  -7,  -6,  -5,  -4,  -3,  -2,  -1,
    0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,
    16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  26,  27,  28,  29,  30,  31,
};
static const struct levels q4_levels = {uniform_levels + 24, 16};
static const struct levels q5_levels = {uniform_levels + 16, 32};
static const struct levels q6_levels = {uniform_levels, 64};
static const struct levels q3_levels = {uniform_levels + 28, 8}; /* -4..3 */
static const struct levels iq4_levels = {quant_iq4nl_values, 16};

/* Index of the level nearest t: bisect on the midpoints between neighbours
 * (doubled, so they stay integers).  A NaN lands on level 0. */
static int nearest_level(const struct levels *lv, float t)
{
    int idx = 0;
    for (int step = lv->n / 2; step > 0; step /= 2)
        if (2.0f * t >= (float)(lv->v[idx + step - 1] + lv->v[idx + step])) idx += step;
    return idx;
}

/* ---- fp16 rounding of scales ---- */

static float half_value(float v) { return quant_half_to_float(quant_f32_to_f16(v)); }

/* Smallest fp16 >= v, for v >= 0 (saturating at the largest finite half). */
static uint16_t half_up(float v)
{
    if (!(v < 65504.0f)) return 0x7bff;
    uint16_t h = quant_f32_to_f16(v);
    if (quant_half_to_float(h) < v) h++;
    return h;
}

/* Largest fp16 <= v, for finite v within the fp16 range. */
static uint16_t half_down(float v)
{
    uint16_t h = quant_f32_to_f16(v);
    if (quant_half_to_float(h) > v) h = (uint16_t)(v >= 0 ? h - 1 : h + 1);
    return h;
}

/* The reference decoder of t: the judge of every candidate. */
static quant_to_float_fn decoder(enum quant_type t) { return quant_traits_of(t)->to_float; }

static float sq_error(const float *x, const float *y, int n)
{
    float err = 0;
    for (int i = 0; i < n; i++) err += (x[i] - y[i]) * (x[i] - y[i]);
    return err;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    *mn = *mx = x[0];
    for (int i = 1; i < n; i++) {
        *mn = fminf(*mn, x[i]);
        *mx = fmaxf(*mx, x[i]);
    }
}

/* Largest |x| and the signed value that has it. */
static float abs_max(const float *x, int n, float *signed_max)
{
    float amax = 0;
    *signed_max = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            *signed_max = x[i];
        }
    }
    return amax;
}

/* ---- one scale, symmetric levels: Q4_0, Q5_0, IQ4_NL, and the sub-blocks
 * of Q6_K and IQ4_XS ---- */

struct sym_best {
    float err, d;
    uint8_t L[32];
};

/* Tries scale d on n <= 32 values (nearest level each, error computed as the
 * decoders do: d * level); keeps it if best so far.  Returns the
 * least-squares scale for the codes it found, the next thing worth trying. */
static float sym_consider(struct sym_best *b, const float *x, int n, const struct levels *lv, float d)
{
    uint8_t L[32];
    float id = d != 0 ? 1.0f / d : 0.0f, err = 0, sxl = 0, sll = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)nearest_level(lv, x[i] * id);
        float l = (float)lv->v[L[i]], e = x[i] - d * l;
        err += e * e;
        sxl += x[i] * l;
        sll += l * l;
    }
    if (err < b->err) {
        b->err = err;
        b->d = d;
        memcpy(b->L, L, (size_t)n);
    }
    return sll > 0 ? sxl / sll : d;
}

/* Best scale for x over levels lv; rounds candidate scales to fp16 if asked
 * (block scales) or keeps them exact (sub-block scales, coded later). */
static void sym_search(const float *x, int n, const struct levels *lv, bool fp16, struct sym_best *b)
{
    float xe, amax = abs_max(x, n, &xe);
    /* All zero: the answer when x is, and the fallback if every error is
     * NaN (a NaN in x): the block stays defined. */
    b->err = FLT_MAX;
    b->d = 0;
    memset(b->L, nearest_level(lv, 0.0f), (size_t)n);
    sym_consider(b, x, n, lv, 0.0f);
    if (amax == 0) return;
    /* xe on level t: from the most negative level t_lo to the mirror of the
     * top level t_hi (the safe candidate, k = 6), and a little beyond. */
    float t_lo = lv->v[0], t_hi = -(float)lv->v[lv->n - 1];
    for (int k = 0; k <= 8; k++) {
        float d = xe / (t_lo + (t_hi - t_lo) * (float)k / 6.0f);
        float refit = sym_consider(b, x, n, lv, fp16 ? half_value(d) : d);
        sym_consider(b, x, n, lv, fp16 ? half_value(refit) : refit);
    }
}

/* The codes of a block: 32 nibbles (value j low nibble of byte j, value
 * 16 + j high nibble), Q5_0 adds the fifth bits. */
static void pack_nibbles(const uint8_t L[32], uint8_t qs[16])
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 15) | (L[j + 16] & 15) << 4);
}

static void pack_q5(const uint8_t L[32], uint8_t qh[4], uint8_t qs[16])
{
    uint32_t h = 0;
    pack_nibbles(L, qs);
    for (int j = 0; j < 32; j++) h |= (uint32_t)(L[j] >> 4) << j;
    memcpy(qh, &h, 4);
}

static void codes_q4(uint8_t *blk, const uint8_t L[32]) { pack_nibbles(L, blk + 2); }
static void codes_q5_0(uint8_t *blk, const uint8_t L[32]) { pack_q5(L, blk + 2, blk + 6); }

/* Q4_0, Q5_0, IQ4_NL: fp16 d first, then the codes. */
static void sym_encode(const float *x, uint8_t *dst, int64_t n, size_t bsize, const struct levels *lv,
                       void (*codes)(uint8_t *blk, const uint8_t L[32]))
{
    for (int64_t i = 0; i < n / QK_SMALL; i++, x += QK_SMALL, dst += bsize) {
        struct sym_best best;
        sym_search(x, QK_SMALL, lv, true, &best);
        uint16_t d = quant_f32_to_f16(best.d); /* exact: best.d is an fp16 value */
        memcpy(dst, &d, 2);
        codes(dst, best.L);
    }
}

void quant_encode_q4_0(const float *x, void *dst, int64_t n)
{
    sym_encode(x, dst, n, sizeof(block_q4_0), &q4_levels, codes_q4);
}
void quant_encode_q5_0(const float *x, void *dst, int64_t n)
{
    sym_encode(x, dst, n, sizeof(block_q5_0), &q5_levels, codes_q5_0);
}
void quant_encode_iq4_nl(const float *x, void *dst, int64_t n)
{
    sym_encode(x, dst, n, sizeof(block_iq4_nl), &iq4_levels, codes_q4);
}

/* ---- scale and offset: Q4_1, Q5_1 ---- */

/* A 32-value format of value d * q + m, q in 0..nmax, as its packer. */
struct affine_format {
    enum quant_type type;
    int nmax;
    void (*pack)(uint8_t *blk, uint16_t d, uint16_t m, const uint8_t L[32]);
};

static void pack_q4_1(uint8_t *blk, uint16_t d, uint16_t m, const uint8_t L[32])
{
    block_q4_1 *b = (block_q4_1 *)(void *)blk;
    b->d = d, b->m = m;
    pack_nibbles(L, b->qs);
}

static void pack_q5_1(uint8_t *blk, uint16_t d, uint16_t m, const uint8_t L[32])
{
    block_q5_1 *b = (block_q5_1 *)(void *)blk;
    b->d = d, b->m = m;
    pack_q5(L, b->qh, b->qs);
}

/* Scores the encoding (d16, m16) of 32 values: codes into L, block into
 * blk, error as decoded. */
static float affine_try(const struct affine_format *f, const float *x, uint16_t d16, uint16_t m16, uint8_t L[32],
                        uint8_t *blk)
{
    float d = quant_half_to_float(d16), m = quant_half_to_float(m16);
    float id = d != 0 ? 1.0f / d : 0.0f, y[32];
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)fmaxf(0.0f, fminf((float)f->nmax, nearbyintf((x[j] - m) * id)));
    f->pack(blk, d16, m16, L);
    decoder(f->type)(blk, y, 32);
    return sq_error(x, y, 32);
}

/* Least-squares (d, m) for codes L: minimise the sum of (x - d*q - m)^2. */
static void affine_refit(const float *x, const uint8_t L[32], uint16_t *d16, uint16_t *m16)
{
    float sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < 32; j++) {
        float q = (float)L[j];
        sq += q;
        sqq += q * q;
        sx += x[j];
        sqx += q * x[j];
    }
    float det = 32 * sqq - sq * sq;
    float d = det > 0 ? (32 * sqx - sq * sx) / det : 0.0f;
    *d16 = quant_f32_to_f16(fmaxf(d, 0.0f));
    *m16 = quant_f32_to_f16((sx - quant_half_to_float(*d16) * sq) / 32);
}

static void affine_encode(const struct affine_format *f, const float *x, uint8_t *dst, int64_t n)
{
    const size_t bsize = quant_row_size(f->type, QK_SMALL);
    const float nmax = (float)f->nmax;
    for (int64_t i = 0; i < n / QK_SMALL; i++, x += QK_SMALL, dst += bsize) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        uint8_t cand[sizeof(block_q5_1)], L[32];
        uint16_t d16, m16;
        /* Nearest scales, then the refit of its codes, then the safe one:
         * min rounded down, step rounded up, so nothing clips. */
        float best = affine_try(f, x, quant_f32_to_f16((mx - mn) / nmax), quant_f32_to_f16(mn), L, dst);
        affine_refit(x, L, &d16, &m16);
        float err = affine_try(f, x, d16, m16, L, cand);
        if (err < best) {
            best = err;
            memcpy(dst, cand, bsize);
        }
        m16 = half_down(mn);
        if (affine_try(f, x, half_up((mx - quant_half_to_float(m16)) / nmax), m16, L, cand) < best)
            memcpy(dst, cand, bsize);
    }
}

static const struct affine_format q4_1_format = {QT_Q4_1, 15, pack_q4_1};
static const struct affine_format q5_1_format = {QT_Q5_1, 31, pack_q5_1};

void quant_encode_q4_1(const float *x, void *dst, int64_t n) { affine_encode(&q4_1_format, x, dst, n); }
void quant_encode_q5_1(const float *x, void *dst, int64_t n) { affine_encode(&q5_1_format, x, dst, n); }

/* ---- K-quants with mins: Q2_K, Q4_K, Q5_K ----
 * Value = d*sc[j]*q - dmin*m[j]: Q4_K/Q5_K 6-bit sc and m per 32-value
 * sub-block (q to 15 or 31), Q2_K 4-bit ones per 16 values (q to 3). */

struct kq_codes {
    uint16_t d, dmin;
    uint8_t sc[16], m[16];
    uint8_t L[QK_K];
};

struct kq_format {
    enum quant_type type;
    int sub;  /* values per sub-block */
    int nmax; /* largest code */
    int smax; /* largest sub-block scale and min */
    void (*pack)(void *blk, const struct kq_codes *c);
};

/* Float step s and offset o >= 0 of one sub-block of n values, x ~ s*q - o:
 * least squares over a few stretches of the range.  The offset cannot be
 * negative (mins are unsigned), so a sub-block of positive values starts at zero. */
static void kq_fit_sub(const float *x, int n, int nmax, float *s, float *o)
{
    float mn, mx, best = FLT_MAX;
    min_max(x, n, &mn, &mx);
    mn = fminf(mn, 0.0f);
    *s = (mx - mn) / (float)nmax;
    *o = -mn;
    if (mx == mn) return;
    for (int k = -4; k <= 4; k++) {
        float step = (mx - mn) / ((float)nmax + 0.25f * (float)k), sq = 0, sqq = 0, sx = 0, sqx = 0;
        float q[32];
        for (int j = 0; j < n; j++) {
            q[j] = fmaxf(0.0f, fminf((float)nmax, nearbyintf((x[j] - mn) / step)));
            sq += q[j];
            sqq += q[j] * q[j];
            sx += x[j];
            sqx += q[j] * x[j];
        }
        float det = (float)n * sqq - sq * sq;
        if (det <= 0) continue;
        float ls = ((float)n * sqx - sq * sx) / det, lo = (sqq * sx - sq * sqx) / det;
        if (lo > 0) { /* offsets are unsigned: refit the step alone */
            lo = 0;
            ls = sqx / sqq;
        }
        float err = 0;
        for (int j = 0; j < n; j++) err += (x[j] - ls * q[j] - lo) * (x[j] - ls * q[j] - lo);
        if (err < best) {
            best = err;
            *s = ls;
            *o = -lo;
        }
    }
}

/* Candidate 1: each sub-block's fitted (s, o), coded to the nearest multiple
 * of d = max s / smax and dmin = max o / smax. */
static void kq_codes_nearest(const struct kq_format *f, const float *x, struct kq_codes *c)
{
    const int nsub = QK_K / f->sub;
    const float smax = (float)f->smax;
    float s[16], o[16], s_top = 0, o_top = 0;
    for (int j = 0; j < nsub; j++) {
        kq_fit_sub(x + f->sub * j, f->sub, f->nmax, &s[j], &o[j]);
        s_top = fmaxf(s_top, s[j]);
        o_top = fmaxf(o_top, o[j]);
    }
    c->d = quant_f32_to_f16(s_top / smax);
    c->dmin = quant_f32_to_f16(o_top / smax);
    float d = quant_half_to_float(c->d), dmin = quant_half_to_float(c->dmin);
    for (int j = 0; j < nsub; j++) {
        c->sc[j] = (uint8_t)(d > 0 ? fmaxf(0.0f, fminf(smax, nearbyintf(s[j] / d))) : 0);
        c->m[j] = (uint8_t)(dmin > 0 ? fmaxf(0.0f, fminf(smax, nearbyintf(o[j] / dmin))) : 0);
    }
}

/* Candidate 2, the safe one: offsets rounded up so the lowest value is
 * reachable, steps rounded up so the highest is, nothing clips. */
static void kq_codes_safe(const struct kq_format *f, const float *x, struct kq_codes *c)
{
    const int nsub = QK_K / f->sub, nmax = f->nmax;
    const float smax = (float)f->smax;
    float lo[16], hi[16], need[16], omax = 0, rmax = 0;
    for (int j = 0; j < nsub; j++) {
        min_max(x + f->sub * j, f->sub, &lo[j], &hi[j]);
        lo[j] = fminf(lo[j], 0.0f);
        omax = fmaxf(omax, -lo[j]);
    }
    c->dmin = half_up(omax / smax);
    float dmin = quant_half_to_float(c->dmin);
    for (int j = 0; j < nsub; j++) {
        c->m[j] = (uint8_t)(dmin > 0 ? fminf(smax, ceilf(-lo[j] / dmin)) : 0);
        need[j] = hi[j] + dmin * (float)c->m[j]; /* span the step must cover */
        rmax = fmaxf(rmax, need[j]);
    }
    c->d = half_up(rmax / (float)(nmax * f->smax));
    float d = quant_half_to_float(c->d);
    for (int j = 0; j < nsub; j++)
        c->sc[j] = (uint8_t)(d > 0 ? fminf(smax, ceilf(need[j] / ((float)nmax * d))) : 0);
}

/* Codes of every value for the coded scales, nearest level, clamped. */
static void kq_requantize(const struct kq_format *f, const float *x, struct kq_codes *c)
{
    float d = quant_half_to_float(c->d), dmin = quant_half_to_float(c->dmin);
    for (int j = 0; j < QK_K / f->sub; j++) {
        float dl = d * c->sc[j], ml = dmin * c->m[j], id = dl != 0 ? 1.0f / dl : 0.0f;
        for (int k = f->sub * j; k < f->sub * (j + 1); k++)
            c->L[k] = (uint8_t)fmaxf(0.0f, fminf((float)f->nmax, nearbyintf((x[k] + ml) * id)));
    }
}

/* Inverse of quant_kscale_unpack. */
static void kq_pack_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t m[8])
{
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = sc[j];
        s[j + 4] = m[j];
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

static void pack_q4_K(void *blk, const struct kq_codes *c)
{
    block_q4_K *b = blk;
    b->d = c->d;
    b->dmin = c->dmin;
    kq_pack_scales(b->scales, c->sc, c->m);
    for (int ch = 0; ch < 4; ch++)
        for (int l = 0; l < 32; l++)
            b->qs[32 * ch + l] = (uint8_t)(c->L[64 * ch + l] | c->L[64 * ch + 32 + l] << 4);
}

static void pack_q5_K(void *blk, const struct kq_codes *c)
{
    block_q5_K *b = blk;
    b->d = c->d;
    b->dmin = c->dmin;
    kq_pack_scales(b->scales, c->sc, c->m);
    memset(b->qh, 0, sizeof b->qh);
    for (int ch = 0; ch < 4; ch++) {
        for (int l = 0; l < 32; l++) {
            uint8_t lo = c->L[64 * ch + l], hi = c->L[64 * ch + 32 + l];
            b->qs[32 * ch + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            b->qh[l] |= (uint8_t)((lo >> 4) << (2 * ch) | (hi >> 4) << (2 * ch + 1));
        }
    }
}

/* 2-bit codes in the K-quants' layout (Q2_K, Q3_K's low bits, TQ2_0): value
 * v at bits 2j..2j+1 of qs[32·(v/128) + v%32], j = (v%128)/32. */
void quant_pack_crumbs(const uint8_t L[QK_K], uint8_t qs[64])
{
    memset(qs, 0, 64);
    for (int v = 0; v < QK_K; v++) qs[32 * (v / 128) + v % 32] |= (uint8_t)((L[v] & 3) << (2 * ((v % 128) / 32)));
}

static void pack_q2_K(void *blk, const struct kq_codes *c)
{
    block_q2_K *b = blk;
    b->d = c->d;
    b->dmin = c->dmin;
    for (int j = 0; j < 16; j++) b->scales[j] = (uint8_t)(c->sc[j] | c->m[j] << 4);
    quant_pack_crumbs(c->L, b->qs);
}

/* Writes the better of the two candidates of each super-block. */
static void kq_encode(const struct kq_format *f, const float *x, uint8_t *dst, int64_t n)
{
    size_t bsize = quant_row_size(f->type, QK_K);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, dst += bsize) {
        struct kq_codes c;
        uint8_t cand[sizeof(block_q5_K)];
        float y[QK_K];
        kq_codes_nearest(f, x, &c);
        kq_requantize(f, x, &c);
        f->pack(dst, &c);
        decoder(f->type)(dst, y, QK_K);
        float best = sq_error(x, y, QK_K);
        kq_codes_safe(f, x, &c);
        kq_requantize(f, x, &c);
        f->pack(cand, &c);
        decoder(f->type)(cand, y, QK_K);
        if (sq_error(x, y, QK_K) < best) memcpy(dst, cand, bsize);
    }
}

static const struct kq_format q2_K_format = {QT_Q2_K, 16, 3, 15, pack_q2_K};
static const struct kq_format q4_K_format = {QT_Q4_K, 32, 15, 63, pack_q4_K};
static const struct kq_format q5_K_format = {QT_Q5_K, 32, 31, 63, pack_q5_K};

void quant_encode_q2_K(const float *x, void *dst, int64_t n) { kq_encode(&q2_K_format, x, dst, n); }
void quant_encode_q4_K(const float *x, void *dst, int64_t n) { kq_encode(&q4_K_format, x, dst, n); }
void quant_encode_q5_K(const float *x, void *dst, int64_t n) { kq_encode(&q5_K_format, x, dst, n); }

/* ---- two-level symmetric: Q6_K (16 x 16, int8 scales) and IQ4_XS
 * (8 x 32, 6-bit scales biased by 32) ----
 * Value = d * sc[j] * level, one fp16 d per 256 values. */

struct sym2_format {
    enum quant_type type;
    int sub;                  /* values per sub-block */
    const struct levels *lv;  /* element levels */
    int sc_lo, sc_hi;         /* range of the integer sub-block scale */
    void (*pack)(void *blk, uint16_t d, const int *sc, const uint8_t *L);
};

/* Codes every value for d16 and sc[], packs into blk, returns the error. */
static float sym2_try(const struct sym2_format *f, const float *x, uint16_t d16, const int *sc, void *blk)
{
    uint8_t L[QK_K];
    float d = quant_half_to_float(d16), y[QK_K];
    for (int j = 0; j < QK_K / f->sub; j++) {
        float dl = d * (float)sc[j], id = dl != 0 ? 1.0f / dl : 0.0f;
        for (int k = f->sub * j; k < f->sub * (j + 1); k++) L[k] = (uint8_t)nearest_level(f->lv, x[k] * id);
    }
    f->pack(blk, d16, sc, L);
    decoder(f->type)(blk, y, QK_K);
    return sq_error(x, y, QK_K);
}

static void sym2_encode(const struct sym2_format *f, const float *x, uint8_t *dst, int64_t n)
{
    size_t bsize = quant_row_size(f->type, QK_K);
    int nsub = QK_K / f->sub, sc[16];
    float top = (float)f->lv->v[f->lv->n - 1];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, dst += bsize) {
        float s[16], safe[16], s_ext = 0, safe_max = 0, unused;
        for (int j = 0; j < nsub; j++) {
            struct sym_best b;
            sym_search(x + f->sub * j, f->sub, f->lv, false, &b);
            s[j] = b.d;
            if (fabsf(s[j]) > fabsf(s_ext)) s_ext = s[j];
            safe[j] = abs_max(x + f->sub * j, f->sub, &unused) / top;
            safe_max = fmaxf(safe_max, safe[j]);
        }
        /* Nearest: the largest sub-scale on the most negative code. */
        uint16_t d16 = quant_f32_to_f16(s_ext / (float)f->sc_lo);
        float d = quant_half_to_float(d16);
        for (int j = 0; j < nsub; j++)
            sc[j] = d != 0 ? (int)fmaxf((float)f->sc_lo, fminf((float)f->sc_hi, nearbyintf(s[j] / d))) : 0;
        float best = sym2_try(f, x, d16, sc, dst);
        /* Safe: every sub-scale rounded up, so no value clips. */
        uint8_t cand[sizeof(block_q6_K)];
        d16 = half_up(safe_max / (float)f->sc_hi);
        d = quant_half_to_float(d16);
        for (int j = 0; j < nsub; j++) sc[j] = d != 0 ? (int)fminf((float)f->sc_hi, ceilf(safe[j] / d)) : 0;
        if (sym2_try(f, x, d16, sc, cand) < best) memcpy(dst, cand, bsize);
    }
}

static void pack_q6_K(void *blk, uint16_t d, const int *sc, const uint8_t *L)
{
    block_q6_K *b = blk;
    b->d = d;
    for (int j = 0; j < 16; j++) b->scales[j] = (int8_t)sc[j];
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            b->ql[64 * h + l] = (uint8_t)((q[l] & 15) | (q[l + 64] & 15) << 4);
            b->ql[64 * h + l + 32] = (uint8_t)((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
            b->qh[32 * h + l] =
                (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
    }
}

static void pack_iq4_xs(void *blk, uint16_t d, const int *sc, const uint8_t *L)
{
    block_iq4_xs *b = blk;
    b->d = d;
    b->scales_h = 0;
    memset(b->scales_l, 0, sizeof b->scales_l);
    for (int j = 0; j < 8; j++) {
        int ls = sc[j] + 32;
        b->scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
        b->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
        pack_nibbles(L + 32 * j, b->qs + 16 * j);
    }
}

/* Q3_K: level index L = code + 4, its low 2 bits in qs, its third in hmask
 * (bit 4·(v/128) + (v%128)/32 of hmask[v%32]); 6-bit scales sc + 32. */
static void pack_q3_K(void *blk, uint16_t d, const int *sc, const uint8_t *L)
{
    block_q3_K *b = blk;
    b->d = d;
    memset(b->scales, 0, sizeof b->scales);
    memset(b->hmask, 0, sizeof b->hmask);
    for (int j = 0; j < 16; j++) {
        int ls = sc[j] + 32;
        b->scales[j % 8] |= (uint8_t)((ls & 15) << (4 * (j / 8)));
        b->scales[8 + j % 4] |= (uint8_t)((ls >> 4) << (2 * (j / 4)));
    }
    for (int v = 0; v < QK_K; v++)
        if (L[v] & 4) b->hmask[v % 32] |= (uint8_t)(1 << (4 * (v / 128) + (v % 128) / 32));
    quant_pack_crumbs(L, b->qs);
}

static const struct sym2_format q3_K_format = {QT_Q3_K, 16, &q3_levels, -32, 31, pack_q3_K};
static const struct sym2_format q6_K_format = {QT_Q6_K, 16, &q6_levels, -128, 127, pack_q6_K};
static const struct sym2_format iq4_xs_format = {QT_IQ4_XS, 32, &iq4_levels, -32, 31, pack_iq4_xs};

void quant_encode_q3_K(const float *x, void *dst, int64_t n) { sym2_encode(&q3_K_format, x, dst, n); }
void quant_encode_q6_K(const float *x, void *dst, int64_t n) { sym2_encode(&q6_K_format, x, dst, n); }
void quant_encode_iq4_xs(const float *x, void *dst, int64_t n) { sym2_encode(&iq4_xs_format, x, dst, n); }
