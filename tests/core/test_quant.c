/* test_quant.c — tests of core/quant: decoders, quantizers, dots, wiring.
 *
 * The scalar reference is checked against hand-built blocks (bytes written
 * here, expected values derived in the comments) and against error bounds
 * that follow from each format's number of levels; every SIMD dot is then
 * checked against the scalar dot, and every dot against the decoders.  Only
 * the public API is used: blocks are raw bytes at ggml's offsets. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"

/* ---- random numbers (fixed seeds: failures reproduce) ---- */

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }

static uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(void) { return (float)(rng_u64() >> 40) / 16777216.0f; } /* [0, 1) */

static float rng_normal(void)
{
    float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

enum dist { D_NORMAL, D_UNIFORM, D_OUTLIERS, D_POSITIVE, D_EQUAL, D_ZEROS, D_COUNT };
static const char *dist_name[D_COUNT] = {"normal", "uniform", "outliers", "positive", "all-equal", "zeros"};

static void fill(float *x, int64_t n, enum dist d)
{
    float c = rng_normal() * 3;
    for (int64_t i = 0; i < n; i++) {
        switch (d) {
        case D_NORMAL: x[i] = rng_normal(); break;
        case D_UNIFORM: x[i] = 2 * rng_uniform() - 1; break;
        case D_OUTLIERS: x[i] = rng_normal() * (rng_uniform() < 0.02f ? 40.0f : 0.05f); break;
        case D_POSITIVE: x[i] = 0.5f + rng_uniform(); break; /* K-quant mins clamp at 0 */
        case D_EQUAL: x[i] = c; break;
        default: x[i] = 0; break;
        }
    }
}

/* ---- the formats under test ---- */

static const enum quant_type weight_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q5_0,   QT_Q5_1,
                                               QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

static const struct quant_traits *tr(enum quant_type t)
{
    const struct quant_traits *q = quant_traits_of(t);
    cr_assert(q != NULL && q->to_float && q->from_float, "type %d not wired", (int)t);
    return q;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p != NULL);
    return p;
}

/* fp16 of ±[0.05, 2): a finite, ordinary scale for a random block. */
static uint16_t random_scale(void)
{
    float v = 0.05f + 1.95f * rng_uniform();
    return quant_f32_to_f16(rng_u64() & 1 ? -v : v);
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Byte offsets of the fp16 scales in each block (ggml's layouts). */
static void random_block(enum quant_type t, uint8_t *b, size_t size)
{
    for (size_t i = 0; i < size; i++) b[i] = (uint8_t)rng_u64();
    switch (t) {
    case QT_F16: put16(b, quant_f32_to_f16(rng_normal())); break;
    case QT_BF16: put16(b, quant_f32_to_bf16(rng_normal())); break;
    case QT_F32: { float f = rng_normal(); memcpy(b, &f, 4); break; }
    case QT_Q5_1: put16(b, random_scale()); put16(b + 2, random_scale()); break;   /* d, m */
    case QT_Q4_K: case QT_Q5_K: put16(b, random_scale()); put16(b + 2, random_scale()); break; /* d, dmin */
    case QT_Q6_K: put16(b + 208, random_scale()); break;                           /* d is last */
    default: put16(b, random_scale()); break;                                      /* d is first */
    }
}

/* A row of n values in format t made of random valid blocks. */
static void random_row(enum quant_type t, uint8_t *row, int64_t n)
{
    const struct quant_traits *q = tr(t);
    for (int64_t i = 0; i < n / q->blck_size; i++) random_block(t, row + i * q->type_size, q->type_size);
}

/* ---- error bounds, per value, from the number of levels ----
 * Each is half a step of the coarsest grid the quantizer may fall back to
 * (see quant_ref_encode.c), with fp16 rounding of the scales as a relative
 * 2^-10 and the smallest fp16 subnormal 2^-24 as an absolute term. */

#define U16 (1.0f / 1024)
#define TINY (1.0f / 16777216)

static float amax_of(const float *x, int n)
{
    float a = 0;
    for (int i = 0; i < n; i++) a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* Q4_K/Q5_K with nmax = 15/31: per 32 values, step <= (hi - lo + dmin)/nmax + d. */
static void bound_kquant(const float *x, float *b, int nmax)
{
    float lo[8], hi[8], omax = 0, rmax = 0;
    for (int j = 0; j < 8; j++) {
        lo[j] = hi[j] = x[32 * j];
        for (int k = 32 * j; k < 32 * j + 32; k++) {
            lo[j] = fminf(lo[j], x[k]);
            hi[j] = fmaxf(hi[j], x[k]);
        }
        lo[j] = fminf(lo[j], 0);
        omax = fmaxf(omax, -lo[j]);
    }
    float dmin = omax / 63 * (1 + U16) + TINY;
    for (int j = 0; j < 8; j++) rmax = fmaxf(rmax, hi[j] - lo[j] + dmin);
    float d = rmax / (63.0f * nmax) * (1 + U16) + TINY;
    for (int j = 0; j < 8; j++)
        for (int k = 32 * j; k < 32 * j + 32; k++) b[k] = ((hi[j] - lo[j] + dmin) / nmax + d) / 2;
}

/* Two-level symmetric (Q6_K: sub = 16, top level 31, sub-scale codes to 127;
 * IQ4_XS: sub = 32, top 113, codes to 31, half-gap 12 table units). */
static void bound_sym2(const float *x, float *b, int sub, float top, float sc_max, float half_gap)
{
    float a[16], amax = 0;
    for (int j = 0; j < 256 / sub; j++) amax = fmaxf(amax, a[j] = amax_of(x + sub * j, sub) / top);
    float d = amax / sc_max * (1 + U16) + TINY;
    for (int k = 0; k < 256; k++) b[k] = half_gap * (a[k / sub] + d);
}

static void error_bound(enum quant_type t, const float *x, float *b, int64_t n)
{
    int blk = (int)tr(t)->blck_size;
    for (int64_t i = 0; i < n; i += blk) {
        const float *xb = x + i;
        float *bb = b + i, amax = amax_of(xb, blk), mn = xb[0], mx = xb[0], step = 0;
        for (int k = 0; k < blk; k++) {
            mn = fminf(mn, xb[k]);
            mx = fmaxf(mx, xb[k]);
        }
        switch (t) {
        case QT_F32: step = 0; break;
        case QT_F16: step = amax * U16 + TINY; break; /* one ulp: 11-bit significand */
        case QT_BF16: step = amax / 128; break;       /* one ulp: 8-bit significand */
        case QT_Q8_0: case QT_Q8_1: step = amax / 127 * (1 + U16) + TINY; break;
        case QT_Q8_K: step = amax / 127 * 1.000001f; break;    /* fp32 scale */
        case QT_Q4_0: step = amax / 7 * (1 + U16) + TINY; break;
        case QT_Q5_0: step = amax / 15 * (1 + U16) + TINY; break;
        case QT_Q5_1: step = (mx - mn + fabsf(mn) * U16) / 31 * (1 + U16) + TINY; break;
        case QT_IQ4_NL: step = 24 * amax / 113 * (1 + U16) + TINY; break; /* widest gap: 24 units */
        case QT_Q4_K: bound_kquant(xb, bb, 15); break;
        case QT_Q5_K: bound_kquant(xb, bb, 31); break;
        case QT_Q6_K: bound_sym2(xb, bb, 16, 31, 127, 0.5f); break;
        case QT_IQ4_XS: bound_sym2(xb, bb, 32, 113, 31, 12); break;
        default: cr_assert_fail("no bound for %s", quant_type_name(t));
        }
        for (int k = 0; k < blk; k++) {
            if (blk < 256) bb[k] = step / 2;
            bb[k] += 1e-6f * amax; /* fp32 arithmetic in encode and decode */
        }
    }
}

static double rms(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(a[i] - (b ? b[i] : 0)) * (a[i] - (b ? b[i] : 0));
    return sqrt(s / (double)n);
}

/* ---- round trips ---- */

static void check_round_trip(enum quant_type t, const float *x, int64_t n, const char *what)
{
    const struct quant_traits *q = tr(t);
    uint8_t *row = xmalloc(quant_row_size(t, n));
    float *y = xmalloc(sizeof(float) * (size_t)n), *bound = xmalloc(sizeof(float) * (size_t)n);
    q->from_float(x, row, n);
    q->to_float(row, y, n);
    error_bound(t, x, bound, n);
    for (int64_t i = 0; i < n; i++) cr_assert(isfinite(y[i]), "%s %s: value %ld not finite", q->name, what, (long)i);
    double err = rms(x, y, n), lim = rms(bound, NULL, n);
    cr_assert(err <= lim, "%s %s: rms error %g > bound %g", q->name, what, err, lim);
    free(row), free(y), free(bound);
}

Test(quant_round_trip, error_within_level_bound)
{
    static const enum quant_type acts[] = {QT_Q8_1, QT_Q8_K};
    float *x = xmalloc(sizeof(float) * 2560);
    rng_seed(1);
    for (int rep = 0; rep < 4; rep++) {
        for (int d = 0; d < D_COUNT; d++) {
            fill(x, 2560, (enum dist)d);
            for (size_t k = 0; k < N_WEIGHT_TYPES; k++) check_round_trip(weight_types[k], x, 2560, dist_name[d]);
            for (size_t k = 0; k < 2; k++) check_round_trip(acts[k], x, 2560, dist_name[d]);
        }
    }
    free(x);
}

/* The bounds above are not loose: on normal data the error sits well inside
 * them, and well under what one fewer bit would give. */
Test(quant_round_trip, typical_error_of_normal_data)
{
    static const struct { enum quant_type t; double max_rel; } expect[] = {
        {QT_Q8_0, 0.006}, {QT_Q6_K, 0.02}, {QT_Q5_0, 0.05}, {QT_Q5_1, 0.05}, {QT_Q5_K, 0.04},
        {QT_Q4_0, 0.11},  {QT_Q4_K, 0.08}, {QT_IQ4_NL, 0.10}, {QT_IQ4_XS, 0.10},
    };
    int64_t n = 256 * 64;
    float *x = xmalloc(sizeof(float) * (size_t)n), *y = xmalloc(sizeof(float) * (size_t)n);
    uint8_t *row = xmalloc(quant_row_size(QT_F32, n));
    rng_seed(2);
    fill(x, n, D_NORMAL);
    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        const struct quant_traits *q = tr(expect[k].t);
        q->from_float(x, row, n);
        q->to_float(row, y, n);
        double rel = rms(x, y, n) / rms(x, NULL, n);
        cr_expect(rel < expect[k].max_rel, "%s: relative rms error %.4f, expected < %.3f", q->name, rel, expect[k].max_rel);
    }
    free(x), free(y), free(row);
}

/* A single-scale block whose extreme level is used decodes to values that
 * the quantizer must reproduce exactly: the block's own scale is among its
 * candidates and has zero error.  `extreme` sets that level on the block. */
static void force_extreme(enum quant_type t, uint8_t *b)
{
    switch (t) {
    case QT_Q4_0: case QT_IQ4_NL: b[2] &= 0xf0; break;      /* value 0 -> code 0: -8 (Q4_0), -127 (IQ4_NL) */
    case QT_Q5_0: b[2] &= 0xfe; b[6] &= 0xf0; break;        /* qh bit 0 and nibble 0 clear: code 0 = -16 */
    case QT_Q8_0:                                            /* codes in [-127, 127], one at 127 */
        for (int j = 2; j < 34; j++) if (b[j] == 0x80) b[j] = 0x81;
        b[2] = 127;
        break;
    case QT_Q5_1:                                            /* codes 0 and 31 both present, d > 0, |m| <= 32 d */
        b[8] &= 0xf0, b[4] &= 0xfe;                          /* value 0: code 0 */
        b[9] |= 0x0f, b[4] |= 0x02;                          /* value 1: code 31 */
        put16(b, quant_f32_to_f16(0.05f + rng_uniform()));
        put16(b + 2, quant_f32_to_f16((rng_uniform() - 0.5f) * 64 * quant_f16_to_f32((uint16_t)(b[0] | b[1] << 8))));
        break;
    default: break;
    }
}

Test(quant_round_trip, decoded_single_scale_blocks_are_fixed_points)
{
    static const enum quant_type types[] = {QT_Q4_0, QT_Q5_0, QT_Q5_1, QT_Q8_0, QT_IQ4_NL};
    uint8_t b[64], b2[64];
    float y[32], y2[32];
    rng_seed(3);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const struct quant_traits *q = tr(types[k]);
        for (int rep = 0; rep < 2000; rep++) {
            random_block(q->type, b, q->type_size);
            force_extreme(q->type, b);
            q->to_float(b, y, 32);
            q->from_float(y, b2, 32);
            q->to_float(b2, y2, 32);
            for (int j = 0; j < 32; j++)
                cr_assert(y[j] == y2[j], "%s block %d value %d: %g re-encoded as %g", q->name, rep, j, y[j], y2[j]);
        }
    }
}

/* Two-level formats re-derive their sub-block scales from the data, so a
 * decoded block need not come back bit for bit; it must come back within the
 * format's bound, like any other input. */
Test(quant_round_trip, decoded_random_blocks_reencode_within_bound)
{
    static const enum quant_type types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_XS, QT_Q4_0, QT_Q5_1, QT_IQ4_NL};
    float y[256];
    uint8_t b[256];
    rng_seed(4);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const struct quant_traits *q = tr(types[k]);
        for (int rep = 0; rep < 300; rep++) {
            random_row(q->type, b, 256);
            q->to_float(b, y, 256);
            check_round_trip(q->type, y, 256, "decoded random block");
        }
    }
}

/* ---- dots ---- */

/* A row of activations for weight type t: fp32 for the float formats, else
 * quantized to t's vec_dot_type (so codes stay in [-127, 127]). */
static void activations(enum quant_type t, const float *a, uint8_t *out, int64_t n)
{
    const struct quant_traits *q = tr(t), *v = tr(q->vec_dot_type);
    v->from_float(a, out, n);
}

/* Σ decode(x)·decode(y) in double, and Σ |terms| for the tolerance.  For
 * formats with mins the two parts of a value can be larger than the value,
 * so the magnitude also counts max|x|·Σ|y|, which bounds them. */
static double decoded_dot(enum quant_type t, const uint8_t *x, const uint8_t *y, int64_t n, double *mag)
{
    const struct quant_traits *q = tr(t), *v = tr(q->vec_dot_type);
    float *fx = xmalloc(sizeof(float) * (size_t)n), *fy = xmalloc(sizeof(float) * (size_t)n);
    q->to_float(x, fx, n);
    v->to_float(y, fy, n);
    double sum = 0, abs_xy = 0, abs_y = 0, max_x = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)fx[i] * fy[i];
        abs_xy += fabs((double)fx[i] * fy[i]);
        abs_y += fabs(fy[i]);
        max_x = fmax(max_x, fabs(fx[i]));
    }
    *mag = abs_xy + (q->is_quantized ? max_x * abs_y : 0);
    free(fx), free(fy);
    return sum;
}

/* Row lengths: one block, odd numbers of blocks, the model's 640 and 2560. */
static int lengths_of(enum quant_type t, int64_t *len)
{
    static const int64_t small[] = {32, 96, 160, 640, 2560, 2592};
    static const int64_t k[] = {256, 768, 1280, 2560, 2816};
    static const int64_t flt[] = {1, 7, 37, 640, 1001, 2560, 4097};
    const int64_t *src = tr(t)->blck_size == 256 ? k : tr(t)->blck_size == 32 ? small : flt;
    int count = src == k ? 5 : src == small ? 6 : 7;
    memcpy(len, src, sizeof(int64_t) * (size_t)count);
    return count;
}

#define MAX_N 4097
#define DOT_TOL 1e-5

/* Weight rows both random-valid and quantized from data, activations from
 * normal data; `isa` against the scalar reference. */
static void check_isa_against_scalar(enum quant_isa isa)
{
    uint8_t *x = xmalloc(4 * MAX_N), *y = xmalloc(4 * MAX_N);
    float *a = xmalloc(sizeof(float) * MAX_N);
    rng_seed(10 + isa);
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum quant_type t = weight_types[k];
        quant_vec_dot_fn simd = quant_vec_dot_isa(t, isa), ref = quant_vec_dot_isa(t, QUANT_ISA_SCALAR);
        cr_assert(simd != NULL && ref != NULL, "%s: no %s kernel", quant_type_name(t), quant_isa_name(isa));
        int64_t len[8];
        int nlen = lengths_of(t, len);
        for (int l = 0; l < nlen; l++) {
            for (int rep = 0; rep < 24; rep++) {
                int64_t n = len[l];
                fill(a, n, rep % 3 ? D_NORMAL : D_OUTLIERS);
                if (rep % 2) random_row(t, x, n); else tr(t)->from_float(a, x, n);
                fill(a, n, D_NORMAL);
                activations(t, a, y, n);
                float got, want;
                double mag;
                simd(n, &got, x, y);
                ref(n, &want, x, y);
                decoded_dot(t, x, y, n, &mag);
                cr_assert(fabs((double)got - want) <= DOT_TOL * mag + 1e-30,
                          "%s %s n=%ld rep %d: %.9g vs scalar %.9g (magnitude %g)", quant_type_name(t),
                          quant_isa_name(isa), (long)n, rep, got, want, mag);
            }
        }
    }
    free(x), free(y), free(a);
}

Test(quant_dot, avx2_matches_scalar)
{
    if (!quant_isa_supported(QUANT_ISA_AVX2)) cr_skip_test("this CPU lacks AVX2/FMA/F16C: AVX2 kernels not run");
    check_isa_against_scalar(QUANT_ISA_AVX2);
}

Test(quant_dot, avx512_matches_scalar)
{
    if (!quant_isa_supported(QUANT_ISA_AVX512)) cr_skip_test("this CPU lacks AVX-512 VNNI: AVX-512 kernels not run");
    check_isa_against_scalar(QUANT_ISA_AVX512);
}

/* vec_dot(x, quantize(y)) is Σ decode(x)·decode(quantize(y)) up to fp32
 * rounding, for every ISA this CPU runs, the scalar one included. */
Test(quant_dot, dot_equals_sum_of_decoded_products)
{
    uint8_t *x = xmalloc(4 * 2560), *y = xmalloc(4 * 2560);
    float *a = xmalloc(sizeof(float) * 2560);
    rng_seed(20);
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_supported((enum quant_isa)isa)) continue;
        for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
            enum quant_type t = weight_types[k];
            quant_vec_dot_fn dot = quant_vec_dot_isa(t, (enum quant_isa)isa);
            for (int rep = 0; rep < 16; rep++) {
                fill(a, 2560, rep % 4 ? D_NORMAL : D_OUTLIERS);
                tr(t)->from_float(a, x, 2560);
                fill(a, 2560, rep % 3 ? D_NORMAL : D_UNIFORM);
                activations(t, a, y, 2560);
                double mag, want = decoded_dot(t, x, y, 2560, &mag);
                float got;
                dot(2560, &got, x, y);
                cr_assert(fabs(got - want) <= DOT_TOL * mag, "%s %s: dot %.9g, decoded %.9g", quant_type_name(t),
                          quant_isa_name((enum quant_isa)isa), got, want);
            }
        }
    }
    free(x), free(y), free(a);
}

/* The kernel picked by quant_init is the best ISA's, and each table entry is
 * the same function quant_vec_dot_isa hands out. */
Test(quant_dot, init_picks_best_supported_isa)
{
    enum quant_isa best = quant_isa_supported(QUANT_ISA_AVX512) ? QUANT_ISA_AVX512
                          : quant_isa_supported(QUANT_ISA_AVX2) ? QUANT_ISA_AVX2
                                                                : QUANT_ISA_SCALAR;
    cr_assert_eq(quant_init(), best);
    cr_assert_eq(quant_isa_active(), best);
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++)
        cr_assert(tr(weight_types[k])->vec_dot == quant_vec_dot_isa(weight_types[k], best), "%s",
                  quant_type_name(weight_types[k]));
    cr_assert_null(quant_vec_dot_isa(QT_Q2_K, QUANT_ISA_SCALAR), "q2_K has no kernel");
    cr_assert_null(quant_vec_dot_isa(QT_Q4_0, (enum quant_isa)7));
}
