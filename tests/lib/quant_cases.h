/* quant_cases.h — the inputs and formats the core/quant tests share
 * (tests/core/test_quant.c, test_quant_int8.c): value distributions, every
 * weight format, random valid rows, activations in a format's vec_dot_type,
 * and the dot tolerance.  Criterion tests only (the helpers assert). */
#ifndef NB_TESTS_QUANT_CASES_H
#define NB_TESTS_QUANT_CASES_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/quant/quant.h"
#include "tests/lib/quant_random.h"
#include "tests/lib/rng.h"

/* ---- inputs (tests/lib/rng.h: fixed seeds, failures reproduce) ---- */

enum dist { D_NORMAL, D_UNIFORM, D_OUTLIERS, D_POSITIVE, D_EQUAL, D_ZEROS, D_COUNT };
static const char *const dist_name[D_COUNT] __attribute__((unused)) = {"normal", "uniform", "outliers", "positive", "all-equal", "zeros"};

static inline void fill(float *x, int64_t n, enum dist d)
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

static const enum quant_type weight_types[] = {
    QT_F32,  QT_F16,  QT_BF16,   QT_Q4_0,   QT_Q5_0,  QT_Q5_1, QT_Q8_0, QT_Q4_K, QT_Q5_K,  QT_Q6_K,  QT_IQ4_NL, QT_IQ4_XS,
    QT_Q4_1, QT_Q2_K, QT_Q3_K,   QT_TQ1_0,  QT_TQ2_0, QT_Q1_0, QT_Q2_0, QT_MXFP4, QT_NVFP4,
    QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S, QT_IQ1_M,
};

/* The grid formats: a group's point may sit far from its values (the grid
 * is sparse), so there is no per-value error bound to check, only the
 * typical error below. */
static inline bool is_grid(enum quant_type t)
{
    return t == QT_IQ2_XXS || t == QT_IQ2_XS || t == QT_IQ2_S || t == QT_IQ3_XXS || t == QT_IQ3_S || t == QT_IQ1_S ||
           t == QT_IQ1_M;
}
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

static inline const struct quant_traits *tr(enum quant_type t)
{
    const struct quant_traits *q = quant_traits_of(t);
    cr_assert(q != NULL && q->to_float && q->from_float, "type %d not wired", (int)t);
    return q;
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p != NULL);
    return p;
}

/* A row of n values in format t made of random valid blocks. */
static inline void random_row(enum quant_type t, uint8_t *row, int64_t n)
{
    const struct quant_traits *q = tr(t);
    for (int64_t i = 0; i < n / q->blck_size; i++) random_block(t, row + i * q->type_size, q->type_size);
}

/* A row of activations for weight type t: fp32 for the float formats, else
 * quantized to t's vec_dot_type (so codes stay in [-127, 127]). */
static inline void activations(enum quant_type t, const float *a, uint8_t *out, int64_t n)
{
    const struct quant_traits *q = tr(t), *v = tr(q->vec_dot_type);
    v->from_float(a, out, n);
}

/* A dot's tolerance, relative to Σ|w·y| (tests/lib/ref_dot.h). */
#define DOT_TOL 1e-5

#endif
