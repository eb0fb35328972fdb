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
#include "tests/lib/quant_cases.h"
#include "tests/lib/quant_random.h"
#include "tests/lib/ref_dot.h"
#include "tests/lib/rng.h"

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

/* Q4_K/Q5_K with nmax = 15/31 (sub = 32, scales to smax = 63), Q2_K with
 * nmax = 3 (sub = 16, smax = 15): per sub-block, step <= (hi - lo + dmin)/nmax + d. */
static void bound_kquant(const float *x, float *b, int sub, int nmax, float smax)
{
    float lo[16], hi[16], omax = 0, rmax = 0;
    const int nsub = 256 / sub;
    for (int j = 0; j < nsub; j++) {
        lo[j] = hi[j] = x[sub * j];
        for (int k = sub * j; k < sub * j + sub; k++) {
            lo[j] = fminf(lo[j], x[k]);
            hi[j] = fmaxf(hi[j], x[k]);
        }
        lo[j] = fminf(lo[j], 0);
        omax = fmaxf(omax, -lo[j]);
    }
    float dmin = omax / smax * (1 + U16) + TINY;
    for (int j = 0; j < nsub; j++) rmax = fmaxf(rmax, hi[j] - lo[j] + dmin);
    float d = rmax / (smax * nmax) * (1 + U16) + TINY;
    for (int j = 0; j < nsub; j++)
        for (int k = sub * j; k < sub * j + sub; k++) b[k] = ((hi[j] - lo[j] + dmin) / nmax + d) / 2;
}

/* NVFP4, per 16 values: the scale one UE4M3 step (1/8) above amax/12 is a
 * candidate and clips nothing; half the widest E2M1 gap is 2 of its units
 * (0.1875·amax), plus 2 subnormal steps (2^-10) where amax/12 is tiny. */
static void bound_nvfp4(const float *x, float *b)
{
    for (int s = 0; s < 64; s += 16)
        for (int k = 0; k < 16; k++) b[s + k] = 0.1875f * amax_of(x + s, 16) + 0x1p-9f;
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
        case QT_Q4_K: bound_kquant(xb, bb, 32, 15, 63); break;
        case QT_Q5_K: bound_kquant(xb, bb, 32, 31, 63); break;
        case QT_Q6_K: bound_sym2(xb, bb, 16, 31, 127, 0.5f); break;
        case QT_IQ4_XS: bound_sym2(xb, bb, 32, 113, 31, 12); break;
        case QT_Q4_1: step = (mx - mn + fabsf(mn) * U16) / 15 * (1 + U16) + TINY; break;
        case QT_Q2_K: bound_kquant(xb, bb, 16, 3, 15); break;
        case QT_Q3_K: bound_sym2(xb, bb, 16, 3, 31, 0.5f); break;
        /* the extreme on the level of smaller magnitude: a step of max|x| */
        case QT_TQ1_0: case QT_TQ2_0: case QT_Q2_0: step = amax * (1 + U16) + TINY; break;
        case QT_Q1_0: step = 2 * amax * (1 + U16) + TINY; break; /* | |x| - mean|x| | <= max|x| */
        case QT_MXFP4: step = amax / 2; break;                   /* a scale <= amax/4, gaps <= 2 units */
        case QT_NVFP4: bound_nvfp4(xb, bb); break;
        default: cr_assert_fail("no bound for %s", quant_type_name(t));
        }
        /* a step for the whole block, unless a bound function filled bb per sub-block */
        const bool stepped = !(t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K || t == QT_IQ4_XS || t == QT_Q2_K ||
                               t == QT_Q3_K || t == QT_NVFP4);
        for (int k = 0; k < blk; k++) {
            if (stepped) bb[k] = step / 2;
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
            for (size_t k = 0; k < N_WEIGHT_TYPES; k++)
                if (!is_grid(weight_types[k])) check_round_trip(weight_types[k], x, 2560, dist_name[d]);
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
        /* ggml's own quantizers, without an importance matrix, sit at or above these
         * (tests/tools/test_ggml_oracle.sh prints both) */
        {QT_Q4_1, 0.08},  {QT_Q3_K, 0.16}, {QT_Q2_K, 0.29}, {QT_MXFP4, 0.12}, {QT_NVFP4, 0.11},
        {QT_Q2_0, 0.40},  {QT_TQ2_0, 0.43}, {QT_TQ1_0, 0.63}, {QT_Q1_0, 0.63},
        {QT_IQ3_S, 0.14}, {QT_IQ3_XXS, 0.19}, {QT_IQ2_S, 0.25}, {QT_IQ2_XS, 0.30}, {QT_IQ2_XXS, 0.34},
        {QT_IQ1_M, 0.43}, {QT_IQ1_S, 0.46},
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
        cr_expect(rel < expect[k].max_rel, "%s: relative rms error %.4f, expected < %.3f", q->name, rel,
                  expect[k].max_rel);
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
    static const enum quant_type types[] = {QT_Q4_K,  QT_Q5_K,  QT_Q6_K,  QT_IQ4_XS, QT_Q4_0, QT_Q5_1,
                                            QT_IQ4_NL, QT_Q4_1, QT_Q2_K, QT_Q3_K,   QT_TQ1_0, QT_TQ2_0,
                                            QT_Q1_0,  QT_Q2_0,  QT_MXFP4, QT_NVFP4};
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

/* Σ decode(x)·decode(y) in double, and the tolerance's magnitude
 * (reference_dot, tests/lib/ref_dot.h). */
static double decoded_dot(enum quant_type t, const uint8_t *x, const uint8_t *y, int64_t n, double *mag)
{
    const struct quant_traits *q = tr(t), *v = tr(q->vec_dot_type);
    float *fx = xmalloc(sizeof(float) * (size_t)n), *fy = xmalloc(sizeof(float) * (size_t)n);
    q->to_float(x, fx, n);
    v->to_float(y, fy, n);
    double sum = reference_dot(fx, fy, n, q->is_quantized, mag);
    free(fx), free(fy);
    return sum;
}

/* Row lengths: one block, odd numbers of blocks, the model's 640 and 2560. */
static int lengths_of(enum quant_type t, int64_t *len)
{
    static const int64_t small[] = {32, 96, 160, 640, 2560, 2592};
    static const int64_t k[] = {256, 768, 1280, 2560, 2816};
    static const int64_t b64[] = {64, 192, 640, 2560, 2624};
    static const int64_t b128[] = {128, 384, 640, 2560, 2688};
    static const int64_t flt[] = {1, 7, 37, 640, 1001, 2560, 4097};
    const int64_t blk = tr(t)->blck_size;
    const int64_t *src = blk == 256 ? k : blk == 32 ? small : blk == 64 ? b64 : blk == 128 ? b128 : flt;
    int count = src == small ? 6 : src == flt ? 7 : 5;
    memcpy(len, src, sizeof(int64_t) * (size_t)count);
    return count;
}

#define MAX_N 4097

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
                /* the grid formats' quantizers search their grids: a few rows, random blocks otherwise */
                if (rep % 2 || (is_grid(t) && rep % 6)) random_row(t, x, n); else tr(t)->from_float(a, x, n);
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
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum quant_type t = weight_types[k];
        for (int rep = 0; rep < (is_grid(t) ? 6 : 16); rep++) {
            fill(a, 2560, rep % 4 ? D_NORMAL : D_OUTLIERS);
            tr(t)->from_float(a, x, 2560);
            fill(a, 2560, rep % 3 ? D_NORMAL : D_UNIFORM);
            activations(t, a, y, 2560);
            double mag, want = decoded_dot(t, x, y, 2560, &mag);
            for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
                if (!quant_isa_supported((enum quant_isa)isa)) continue;
                float got;
                quant_vec_dot_isa(t, (enum quant_isa)isa)(2560, &got, x, y);
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
    cr_assert_null(quant_vec_dot_isa(QT_I8, QUANT_ISA_SCALAR), "i8 has no kernel");
    cr_assert_null(quant_vec_dot_isa(QT_Q4_0, (enum quant_isa)7));
}

/* ---- known answers: hand-built blocks ---- */

/* Decodes one block of t and compares chosen values with hand-computed ones. */
static void expect_values(enum quant_type t, const uint8_t *block, const int *idx, const float *want, int count)
{
    const struct quant_traits *q = tr(t);
    cr_assert_eq(quant_row_size(t, q->blck_size), q->type_size);
    float y[256];
    q->to_float(block, y, q->blck_size);
    for (int k = 0; k < count; k++)
        cr_expect(y[idx[k]] == want[k], "%s value %d: got %g, want %g", q->name, idx[k], y[idx[k]], want[k]);
}

#define EXPECT(t, block, ...)                                                      \
    do {                                                                           \
        static const struct { int i; float v; } e_[] = {__VA_ARGS__};            \
        int idx_[64];                                                              \
        float want_[64];                                                           \
        int n_ = (int)(sizeof e_ / sizeof e_[0]);                                  \
        for (int k_ = 0; k_ < n_; k_++) idx_[k_] = e_[k_].i, want_[k_] = e_[k_].v; \
        expect_values(t, block, idx_, want_, n_);                                  \
    } while (0)

Test(quant_known, q4_0_q8_0_q8_1)
{
    /* Q4_0: d = 0.5 (fp16 0x3800, little-endian), qs[j] = j | (15 - j) << 4.
     * Value j < 16 is the low nibble: (j - 8) * 0.5; value 16 + j the high
     * nibble: (15 - j - 8) * 0.5. */
    uint8_t q4[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | (15 - j) << 4);
    EXPECT(QT_Q4_0, q4, {0, -4}, {1, -3.5f}, {8, 0}, {15, 3.5f}, {16, 3.5f}, {23, 0}, {31, -4});

    /* Q8_0: d = 2^-7 (fp16 exponent 15 - 7 = 8: 0x2000), qs[j] = 8j - 128, so
     * value j = (8j - 128) / 128 = j/16 - 1. */
    uint8_t q8[34] = {0x00, 0x20};
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(8 * j - 128);
    EXPECT(QT_Q8_0, q8, {0, -1}, {1, -0.9375f}, {16, 0}, {31, 0.9375f});

    /* Q8_1: d = 0.5, s = 0 (not read by the decoder), qs[j] = j - 16. */
    uint8_t q81[36] = {0x00, 0x38, 0x00, 0x00};
    for (int j = 0; j < 32; j++) q81[4 + j] = (uint8_t)(j - 16);
    EXPECT(QT_Q8_1, q81, {0, -8}, {16, 0}, {31, 7.5f});

    /* A dot of the Q4_0 block with a Q8_0 block of d = 1 (0x3c00) and all
     * codes 1 is the sum of its values: pairs j and 16 + j add to
     * (j - 8 + 7 - j) / 2 = -0.5, 16 pairs: -8.  Every ISA must agree. */
    uint8_t ones[34] = {0x00, 0x3c};
    memset(ones + 2, 1, 32);
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_supported((enum quant_isa)isa)) continue;
        float s = 0;
        quant_vec_dot_isa(QT_Q4_0, (enum quant_isa)isa)(32, &s, q4, ones);
        cr_expect(s == -8.0f, "%s: %g", quant_isa_name((enum quant_isa)isa), s);
    }
}

Test(quant_known, q5_0_q5_1)
{
    /* Q5_0: d = 0.25 (0x3400); qh = 0x55 0x55 0xaa 0xaa: bit k of the
     * little-endian word is the fifth bit of value k, set for even k < 16
     * and odd k >= 16; qs[j] = j | (15 - j) << 4.  Value = (code - 16) / 4:
     *   0: 0 | 16 -> 0        1: 1 -> -3.75     2: 2 | 16 -> 0.5   15: 15 -> -0.25
     *  16: 15 -> -0.25       17: 14 | 16 -> 3.5   31: 0 | 16 -> 0 */
    uint8_t q5[22] = {0x00, 0x34, 0x55, 0x55, 0xaa, 0xaa};
    for (int j = 0; j < 16; j++) q5[6 + j] = (uint8_t)(j | (15 - j) << 4);
    EXPECT(QT_Q5_0, q5, {0, 0}, {1, -3.75f}, {2, 0.5f}, {15, -0.25f}, {16, -0.25f}, {17, 3.5f}, {31, 0});

    /* Q5_1: d = 1 (0x3c00), m = -8 (sign, exponent 15 + 3: 0xc800), qh =
     * 0xffff0000 (fifth bit on values 16..31), qs[j] = j | j << 4.  Value
     * j = j - 8, value 16 + j = j + 16 - 8. */
    uint8_t q51[24] = {0x00, 0x3c, 0x00, 0xc8, 0x00, 0x00, 0xff, 0xff};
    for (int j = 0; j < 16; j++) q51[8 + j] = (uint8_t)(j | j << 4);
    EXPECT(QT_Q5_1, q51, {0, -8}, {15, 7}, {16, 8}, {31, 23});
}

Test(quant_known, iq4_nl)
{
    /* d = 0.5, qs[j] = j | (15 - j) << 4: value j is T[j] / 2 and value
     * 16 + j is T[15 - j] / 2, T = -127 -104 -83 -65 -49 -35 -22 -10 1 13 25
     * 38 53 69 89 113 (ggml's kvalues_iq4nl). */
    uint8_t b[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    EXPECT(QT_IQ4_NL, b, {0, -63.5f}, {1, -52}, {7, -5}, {8, 0.5f}, {15, 56.5f}, {16, 56.5f}, {24, -5}, {31, -63.5f});
}

/* Scales sc = 1 2 3 4 33 40 63 17 and mins m = 0 5 10 63 32 1 48 20, packed
 * as ggml does:
 *   bytes 0..3: sc[0..3] | (sc[4..7] >> 4) << 6 = 1|2<<6, 2|2<<6, 3|3<<6, 4|1<<6
 *   bytes 4..7: m[0..3]  | (m[4..7] >> 4) << 6  = 0|2<<6, 5|0<<6, 10|3<<6, 63|1<<6
 *   bytes 8..11: sc[j] & 15 | (m[j] & 15) << 4 for j = 4..7 = 0x01 0x18 0x0f 0x41 */
static const uint8_t kscales[12] = {0x81, 0x82, 0xc3, 0x44, 0x80, 0x05, 0xca, 0x7f, 0x01, 0x18, 0x0f, 0x41};

Test(quant_known, q4_K)
{
    /* d = 0.5 (0x3800), dmin = 0.25 (0x3400); value = 0.5*sc*q - 0.25*m.
     * qs chunk c (32 bytes): low nibbles values 64c..+31, high 64c+32..+63.
     *   qs[0]  = 0xf3: value 0 q 3 (sub 0), value 32 q 15 (sub 1)
     *   qs[37] = 0x7a: value 69 q 10 (sub 2), value 101 q 7 (sub 3)
     *   qs[127]= 0x9c: value 223 q 12 (sub 6), value 255 q 9 (sub 7)
     *   0: 0.5*1*3 = 1.5       32: 0.5*2*15 - 0.25*5 = 13.75    33: -1.25
     *  69: 15 - 2.5 = 12.5    101: 0.5*4*7 - 0.25*63 = -1.75   128: -0.25*32 = -8
     * 160: -0.25             223: 0.5*63*12 - 12 = 366        255: 0.5*17*9 - 5 = 71.5 */
    uint8_t b[144] = {0x00, 0x38, 0x00, 0x34};
    memcpy(b + 4, kscales, 12);
    b[16 + 0] = 0xf3, b[16 + 37] = 0x7a, b[16 + 127] = 0x9c;
    EXPECT(QT_Q4_K, b, {0, 1.5f}, {1, 0}, {32, 13.75f}, {33, -1.25f}, {69, 12.5f}, {101, -1.75f}, {128, -8},
           {160, -0.25f}, {223, 366}, {255, 71.5f});
}

Test(quant_known, q5_K)
{
    /* The Q4_K block above plus fifth bits (qh at 16, qs at 48): bit 2c of
     * qh[l] is value 64c + l, bit 2c+1 value 64c + 32 + l.
     *   qh[0] = 0x03: values 0 and 32;  qh[5] = 0x04: value 69;  qh[31] = 0x80: value 255
     *   0: 0.5*1*19 = 9.5   32: 0.5*2*31 - 1.25 = 29.75   69: 0.5*3*26 - 2.5 = 36.5
     * 101: -1.75 (bit 3 of qh[5] clear)   255: 0.5*17*25 - 5 = 207.5   1: 0 */
    uint8_t b[176] = {0x00, 0x38, 0x00, 0x34};
    memcpy(b + 4, kscales, 12);
    b[16 + 0] = 0x03, b[16 + 5] = 0x04, b[16 + 31] = 0x80;
    b[48 + 0] = 0xf3, b[48 + 37] = 0x7a, b[48 + 127] = 0x9c;
    EXPECT(QT_Q5_K, b, {0, 9.5f}, {1, 0}, {32, 29.75f}, {69, 36.5f}, {101, -1.75f}, {223, 366}, {255, 207.5f});
}

Test(quant_known, q6_K)
{
    /* ql at 0 (128), qh at 128 (64), scales at 192 (16, int8), d at 208.
     * d = 0.5, scales[j] = j+1 for even j, -(j+1) for odd j; value =
     * 0.5 * scales[v/16] * (code - 32).  In half h, for l < 32:
     *   code(l)    = ql[l] & 15    | (qh[l] & 3) << 4
     *   code(l+32) = ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4
     *   code(l+64) = ql[l] >> 4    | (qh[l] >> 4 & 3) << 4
     *   code(l+96) = ql[l+32] >> 4 | (qh[l] >> 6 & 3) << 4
     * ql[0] = 0x21, ql[32] = 0x43, qh[0] = 0xe4 (3,2,1,0 from the top):
     *   0: code 1 -> 0.5*1*-31 = -15.5       32: 3|16 = 19 -> 0.5*3*-13 = -19.5
     *  64: 2|32 = 34 -> 0.5*5*2 = 5          96: 4|48 = 52 -> 0.5*7*20 = 70
     *   1: code 0 -> -16                     16: 0.5*-2*-32 = 32
     * half 1: ql[64+31] = 0xf0, qh[32+31] = 0xc0:
     * 159: code 0 -> 0.5*-10*-32 = 160      223: 15 -> 0.5*-14*-17 = 119
     * 255: ql[127] >> 4 = 0 | 3 << 4 = 48 -> 0.5*-16*16 = -128 */
    uint8_t b[210] = {0};
    b[0] = 0x21, b[32] = 0x43, b[128] = 0xe4;
    b[64 + 31] = 0xf0, b[128 + 32 + 31] = 0xc0;
    for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)(j % 2 ? -(j + 1) : j + 1);
    b[208] = 0x00, b[209] = 0x38;
    EXPECT(QT_Q6_K, b, {0, -15.5f}, {1, -16}, {16, 32}, {32, -19.5f}, {64, 5}, {96, 70}, {159, 160}, {223, 119},
           {255, -128});
}

Test(quant_known, iq4_xs)
{
    /* d (0), scales_h (2, u16), scales_l (4, 4 bytes), qs (8, 16 per
     * sub-block: low nibbles values 0..15, high 16..31).  6-bit scales
     * ls = 32 33 0 63 40 31 1 48, i.e. ls - 32 = 0 1 -32 31 8 -1 -31 16:
     *   scales_l: nibble j%2 of byte j/2 = ls & 15: 0x10 0xf0 0xf8 0x01
     *   scales_h: bits 2j..2j+1 = ls >> 4 = 2 2 0 3 2 1 0 3: 0xc6ca
     * d = 0.5; value = 0.5 * (ls - 32) * T[code]:
     *   qs[0] = 0xf0 (sub 0, scale 0): values 0 and 16 are 0
     *   qs[16] = 0x8f (sub 1): 32: 0.5*113 = 56.5        48: 0.5*1 = 0.5
     *   qs[32] = 0x07 (sub 2): 64: 0.5*-32*-10 = 160     80: 0.5*-32*-127 = 2032
     *   qs[51] = 0x3c (sub 3): 99: 0.5*31*53 = 821.5     115: 0.5*31*-65 = -1007.5
     *   qs[127] = 0x5a (sub 7): 239: 0.5*16*25 = 200    255: 0.5*16*-35 = -280
     *   sub 5, code 0: 160: 0.5*-1*-127 = 63.5 */
    uint8_t b[136] = {0x00, 0x38, 0xca, 0xc6, 0x10, 0xf0, 0xf8, 0x01};
    b[8 + 0] = 0xf0, b[8 + 16] = 0x8f, b[8 + 32] = 0x07, b[8 + 51] = 0x3c, b[8 + 127] = 0x5a;
    EXPECT(QT_IQ4_XS, b, {0, 0}, {16, 0}, {32, 56.5f}, {48, 0.5f}, {64, 160}, {80, 2032}, {99, 821.5f},
           {115, -1007.5f}, {160, 63.5f}, {239, 200}, {255, -280});
}

Test(quant_known, q8_K_f16_bf16_rows)
{
    /* Q8_K: fp32 d = 0.25 first, then 256 codes, then 16 int16 bsums. */
    uint8_t b[292] = {0};
    float d = 0.25f;
    memcpy(b, &d, 4);
    b[4] = (uint8_t)-127, b[4 + 255] = 100;
    EXPECT(QT_Q8_K, b, {0, -31.75f}, {1, 0}, {255, 25});
    /* f16 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24; bf16 0x3f80 = 1, 0x4049 = 3.140625 */
    uint8_t h[] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00}, bf[] = {0x80, 0x3f, 0x49, 0x40};
    float y[3];
    tr(QT_F16)->to_float(h, y, 3);
    cr_expect(y[0] == 1 && y[1] == -2 && y[2] == 0x1p-24f);
    tr(QT_BF16)->to_float(bf, y, 2);
    cr_expect(y[0] == 1 && y[1] == 3.140625f);
}

/* ---- fp16 / bf16 conversions ---- */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

Test(quant_convert, f32_to_f16_rounds_to_nearest_even)
{
    static const struct { float in; uint16_t out; } cases[] = {
        {1.0f, 0x3c00},           {-2.0f, 0xc000},          {65504.0f, 0x7bff},      /* largest half */
        {65519.0f, 0x7bff},       {65520.0f, 0x7c00},                                /* tie -> even = inf */
        {1.0f + 0x1p-11f, 0x3c00},                                                   /* tie -> even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3c02},                                               /* tie -> even (up) */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},                                        /* just above the tie */
        {0x1p-14f, 0x0400},       {0x1p-24f, 0x0001},                                /* smallest normal, subnormal */
        {0x1p-25f, 0x0000},       {3 * 0x1p-25f, 0x0002},                            /* subnormal ties -> even */
        {0x1p-25f + 0x1p-35f, 0x0001}, {1023 * 0x1p-24f, 0x03ff},
        {-0.0f, 0x8000},          {INFINITY, 0x7c00},        {-INFINITY, 0xfc00},    {1e10f, 0x7c00},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        cr_expect_eq(quant_f32_to_f16(cases[k].in), cases[k].out, "%a -> %#x, want %#x", cases[k].in,
                     quant_f32_to_f16(cases[k].in), cases[k].out);
    uint16_t n = quant_f32_to_f16(NAN);
    cr_expect((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0, "nan -> %#x", n);
}

Test(quant_convert, f16_to_f32_is_exact_for_every_half)
{
    cr_expect(quant_f16_to_f32(0x0001) == 0x1p-24f);
    cr_expect(quant_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
    cr_expect(quant_f16_to_f32(0x7bff) == 65504.0f);
    cr_expect(quant_f16_to_f32(0xfc00) == -INFINITY);
    cr_expect(signbit(quant_f16_to_f32(0x8000)) && quant_f16_to_f32(0x8000) == 0);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            cr_assert(isnan(f), "%#x should be nan", h);
            continue;
        }
        cr_assert_eq(quant_f32_to_f16(f), h, "%#x -> %a -> %#x", h, f, quant_f32_to_f16(f));
    }
}

Test(quant_convert, bf16_rounds_to_nearest_even)
{
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, /* tie -> even (down) */
        {0x3f818000, 0x3f82},                       /* tie -> even (up) */
        {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80},
        {0x00008000, 0x0000}, {0x00018000, 0x0002}, /* subnormals round the same way */
        {0x7f7fffff, 0x7f80},                       /* largest float rounds to inf */
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80}, {0x80000000, 0x8000},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        cr_expect_eq(quant_f32_to_bf16(float_of(cases[k].in)), cases[k].out, "%#x -> %#x, want %#x", cases[k].in,
                     quant_f32_to_bf16(float_of(cases[k].in)), cases[k].out);
    uint16_t n = quant_f32_to_bf16(float_of(0x7f800001)); /* a nan whose payload would round away */
    cr_expect((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0, "nan -> %#x", n);
    cr_expect(bits_of(quant_bf16_to_f32(0x4049)) == 0x40490000);
}
