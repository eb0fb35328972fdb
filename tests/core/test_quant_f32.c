/* test_quant_f32.c — the fp32-activation dots (quant.h's quant_dot_f32,
 * core/quant/quant_f32_*.{c,h}) of every weight format, for each SIMD ISA
 * this CPU runs (an ISA it lacks is skipped with a message).
 *
 * - every weight format has a kernel of each ISA;
 * - the decoded weights are the reference decoder's bits: a dot against
 *   one-hot activation rows is w[i]·1 plus exact zeros, so it returns the
 *   kernel's decoded value i, which must equal to_float's (as floats);
 * - on random valid blocks (tests/lib/quant_random.h), several row lengths
 *   and 1..F32_ROWS+1 activation rows with a stride wider than the row, the
 *   result is the reference (to_float, then a double sum) within
 *   |got − ref| <= 1e-5 · Σ|w·x| + 1e-30 (test_expert_ffn.c's bound): a
 *   float sum of n products over 2·VW lanes rounds each lane's partial at
 *   most k = n/(2·VW) + 5 times, so the worst case is k·2^-24 of Σ|w·x|
 *   (1.1e-5 at n = 2816 on AVX2, 0.6e-5 on AVX-512) and the typical one,
 *   with roundings of random sign, about √k·2^-24 (under 1e-6);
 * - the bound is tight enough to catch a wrong decoder: a block with one
 *   byte changed (so that it decodes differently) gives a result outside it
 *   for some activation row. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "tests/lib/quant_random.h"
#include "tests/lib/ref_dot.h"
#include "tests/lib/rng.h"

#define ROWS_MAX 5 /* F32_ROWS (4) + 1: the kernels' tiling and one more row */

static const enum quant_type types[] = {
    QT_F32,    QT_F16,    QT_BF16,  QT_Q4_0,    QT_Q5_0,   QT_Q4_1,  QT_Q5_1,  QT_Q8_0,  QT_IQ4_NL, QT_MXFP4,
    QT_Q2_K,   QT_Q3_K,   QT_Q4_K,  QT_Q5_K,    QT_Q6_K,   QT_IQ4_XS, QT_TQ1_0, QT_TQ2_0, QT_Q1_0,  QT_Q2_0,
    QT_NVFP4,  QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S, QT_IQ1_M,
};
#define N_TYPES (sizeof types / sizeof types[0])

static const enum quant_isa isas[] = {QUANT_ISA_AVX2, QUANT_ISA_AVX512};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p != NULL);
    return p;
}

/* n values of type t: random valid blocks, and their reference decoding. */
static uint8_t *random_weights(enum quant_type t, int64_t n, float **dec)
{
    const struct quant_traits *q = quant_traits_of(t);
    cr_assert(q && q->to_float, "%s not readable", quant_type_name(t));
    uint8_t *w = xmalloc(quant_row_size(t, n));
    for (int64_t b = 0; b < n / q->blck_size; b++) random_block(t, w + (size_t)b * q->type_size, q->type_size);
    *dec = xmalloc((size_t)n * sizeof **dec);
    q->to_float(w, *dec, n);
    return w;
}

static bool skip_isa(enum quant_isa isa)
{
    if (quant_isa_supported(isa)) return false;
    cr_log_warn("this CPU cannot run %s: its fp32 dots are not tested here", quant_isa_name(isa));
    return true;
}

Test(quant_f32, every_weight_format_has_a_kernel_per_isa)
{
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (skip_isa(isas[k])) continue;
        for (size_t i = 0; i < N_TYPES; i++)
            cr_expect_not_null(quant_dot_f32_isa(types[i], isas[k]), "%s has no %s fp32 dot", quant_type_name(types[i]),
                               quant_isa_name(isas[k]));
    }
    cr_assert_null(quant_dot_f32_isa(QT_Q4_K, QUANT_ISA_SCALAR), "the scalar path is the caller's to_float");
}

Test(quant_f32, decoded_weights_are_the_reference_bits)
{
    rng_seed(7);
    const int64_t n = 512;
    float *x = xmalloc(sizeof(float) * ROWS_MAX * n);
    for (size_t i = 0; i < N_TYPES; i++) {
        const enum quant_type t = types[i];
        float *ref;
        uint8_t *w = random_weights(t, n, &ref);
        for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
            if (!quant_isa_supported(isas[k])) continue;
            quant_dot_f32_fn dot = quant_dot_f32_isa(t, isas[k]);
            cr_assert_not_null(dot);
            for (int64_t v0 = 0; v0 < n; v0 += ROWS_MAX) { /* row r is one-hot at v0 + r */
                const int nt = n - v0 < ROWS_MAX ? (int)(n - v0) : ROWS_MAX;
                float got[ROWS_MAX];
                memset(x, 0, sizeof(float) * ROWS_MAX * n);
                for (int r = 0; r < nt; r++) x[r * n + v0 + r] = 1.0f;
                dot(n, w, x, n, nt, got);
                for (int r = 0; r < nt; r++)
                    cr_assert(got[r] == ref[v0 + r], "%s %s: value %ld decodes to %.9g, the reference to %.9g",
                              quant_type_name(t), quant_isa_name(isas[k]), (long)(v0 + r), (double)got[r],
                              (double)ref[v0 + r]);
            }
        }
        free(w);
        free(ref);
    }
    free(x);
}

/* The worst |got − ref| / Σ|w·x| over the rows, and whether every row is
 * within the bound. */
static bool within_bound(quant_dot_f32_fn dot, const uint8_t *w, const float *dec, int64_t n, const float *x,
                         int64_t xs, int nt, double *worst)
{
    float got[ROWS_MAX];
    bool ok = true;
    dot(n, w, x, xs, nt, got);
    *worst = 0;
    for (int r = 0; r < nt; r++) {
        double mag, ref = reference_dot(dec, x + r * xs, n, false, &mag);
        double err = fabs((double)got[r] - ref);
        if (mag > 0 && err / mag > *worst) *worst = err / mag;
        ok = ok && err <= 1e-5 * mag + 1e-30;
    }
    return ok;
}

Test(quant_f32, matches_the_reference_dot)
{
    rng_seed(11);
    for (size_t i = 0; i < N_TYPES; i++) {
        const enum quant_type t = types[i];
        const int64_t blck = quant_traits_of(t)->blck_size;
        /* one block, a piece and a tail, a layer's width and a tail */
        const int64_t lens[] = {blck == 1 ? 37 : blck, 256 + (blck <= 64 ? 64 : blck), 2560 + (blck == 1 ? 5 : blck)};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li], xs = n + 16;
            float *dec, *x = xmalloc(sizeof(float) * (size_t)(ROWS_MAX * xs));
            uint8_t *w = random_weights(t, n, &dec);
            for (int64_t v = 0; v < ROWS_MAX * xs; v++) x[v] = rng_normal();
            for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
                if (!quant_isa_supported(isas[k])) continue;
                quant_dot_f32_fn dot = quant_dot_f32_isa(t, isas[k]);
                for (int nt = 1; nt <= ROWS_MAX; nt++) {
                    double worst;
                    cr_assert(within_bound(dot, w, dec, n, x, xs, nt, &worst),
                              "%s %s n %ld rows %d: error %.3g of Σ|w·x|, bound 1e-5", quant_type_name(t),
                              quant_isa_name(isas[k]), (long)n, nt, worst);
                }
            }
            free(w);
            free(dec);
            free(x);
        }
    }
}

Test(quant_f32, a_changed_block_is_caught)
{
    rng_seed(13);
    for (size_t i = 0; i < N_TYPES; i++) {
        const enum quant_type t = types[i];
        const struct quant_traits *q = quant_traits_of(t);
        const int64_t n = q->blck_size == 1 ? 64 : q->blck_size;
        float *dec, *bad = xmalloc(sizeof(float) * (size_t)n), *x = xmalloc(sizeof(float) * (size_t)(ROWS_MAX * n));
        uint8_t *w = random_weights(t, n, &dec);
        /* change random bytes until some value moves by 5 % of the largest: a
         * wrong code, index, sign or scale, not a last bit of a float */
        const size_t bytes = quant_row_size(t, n);
        float amax = 0;
        for (int64_t v = 0; v < n; v++) amax = fmaxf(amax, fabsf(dec[v]));
        for (size_t tries = 0;; tries++) {
            cr_assert(tries < 1000, "%s: no change of a byte changes the block", quant_type_name(t));
            w[rng_u64() % bytes] ^= (uint8_t)(1 + rng_u64() % 255);
            q->to_float(w, bad, n);
            float moved = 0;
            for (int64_t v = 0; v < n; v++) moved = fmaxf(moved, fabsf(bad[v] - dec[v]));
            if (moved >= 0.05f * amax && isfinite(moved)) break;
        }
        for (int64_t v = 0; v < ROWS_MAX * n; v++) x[v] = rng_normal();
        for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
            if (!quant_isa_supported(isas[k])) continue;
            double worst;
            /* the changed block against the original's decoding: must be out of bound */
            cr_assert_not(within_bound(quant_dot_f32_isa(t, isas[k]), w, dec, n, x, n, ROWS_MAX, &worst),
                          "%s %s: a changed block passed as the original (error %.3g)", quant_type_name(t),
                          quant_isa_name(isas[k]), worst);
            /* and against its own decoding: in bound */
            cr_assert(within_bound(quant_dot_f32_isa(t, isas[k]), w, bad, n, x, n, ROWS_MAX, &worst),
                      "%s %s: the changed block off its own decoding (error %.3g)", quant_type_name(t),
                      quant_isa_name(isas[k]), worst);
        }
        free(w);
        free(dec);
        free(bad);
        free(x);
    }
}
