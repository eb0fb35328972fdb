/* test_quant_int8.c — the pieces of the int8 CPU experts (engine/ffn.h,
 * GW_KERNELS_INT8) that live in core/quant: the activation quantizers
 * (Q8_0, Q8_1, Q8_K) of every ISA write the same bytes, and a weight row's
 * vec_dot on its quantized activations is the exact fp32 dot within half a
 * quantization step per activation (the stated bound).  That vec_dot equals
 * Σ decode(w)·decode(x̂) within fp32 rounding, per format and ISA, is
 * test_quant.c's dot_equals_sum_of_decoded_products. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "tests/lib/quant_cases.h"

/* The activation formats' step: block b's decoded scale s_b (Q8_0 / Q8_1: the
 * fp16 d at offset 0; Q8_K: the fp32 d), one entry per value. */
static void act_steps(enum quant_type a, const uint8_t *y, int64_t n, float *step)
{
    const struct quant_traits *v = tr(a);
    for (int64_t b = 0; b < n / v->blck_size; b++) {
        const uint8_t *blk = y + (size_t)b * v->type_size;
        float d;
        if (a == QT_Q8_K) memcpy(&d, blk, 4);
        else d = quant_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int64_t i = 0; i < v->blck_size; i++) step[b * v->blck_size + i] = fabsf(d);
    }
}

/* The int8 expert kernels' error (engine/ffn.h, GW_KERNELS_INT8): vec_dot of
 * a weight row with the activations quantized once to its vec_dot_type,
 * against the exact dot with the fp32 activations (Σ decode(w)·x in double).
 * The bound: each activation is rounded to its block's grid of step s_b, so
 * |x_i - x̂_i| ≤ s_b/2 (checked per value: Q8_0/Q8_1 round x/d for the
 * fp16-rounded d they store, Q8_K keeps d = 1/iscale in fp32; the codes'
 * clamp at ±127 moves the block's extreme by at most 2^-11·|d|·127 < s_b/2),
 * hence |vec_dot − Σ w_i x_i| ≤ Σ_i |w_i|·s_b(i)/2 + DOT_TOL·Σ|w_i x̂_i|, for
 * every weight format with an 8-bit vec_dot_type and every ISA this CPU runs.
 * The tight check (vec_dot = Σ decode(w)·decode(x̂) within fp32 rounding) is
 * dot_equals_sum_of_decoded_products above. */
Test(quant_dot, int8_dot_is_the_fp32_dot_within_half_a_step_per_value)
{
    const int64_t n = 2560;
    uint8_t *x = xmalloc(4 * n), *y = xmalloc(4 * n);
    float *a = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n), *ya = xmalloc(sizeof(float) * n),
          *step = xmalloc(sizeof(float) * n);
    rng_seed(21);
    int checked = 0;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        enum quant_type t = weight_types[k];
        const struct quant_traits *q = tr(t), *v = tr(q->vec_dot_type);
        if (!v->is_quantized) continue; /* float formats dot with fp32: no activation rounding */
        for (int rep = 0; rep < (is_grid(t) ? 4 : 12); rep++) {
            fill(a, n, rep % 4 ? D_NORMAL : D_OUTLIERS);
            if (rep % 2) random_row(t, x, n); else q->from_float(a, x, n);
            q->to_float(x, w, n);
            fill(a, n, (enum dist)(rep % 3)); /* normal, uniform, outliers */
            activations(t, a, y, n);
            v->to_float(y, ya, n);
            act_steps(v->type, y, n, step);
            double exact = 0, bound = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                cr_assert(fabsf(ya[i] - a[i]) <= step[i] * 0.5f * (1 + 0x1p-10f) + 1e-30f,
                          "%s: activation %ld rounded by %g, step %g", quant_type_name(v->type), (long)i,
                          fabsf(ya[i] - a[i]), step[i]);
                exact += (double)w[i] * a[i];
                bound += fabs((double)w[i]) * step[i] * 0.5;
                mag += fabs((double)w[i] * ya[i]);
            }
            for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
                if (!quant_isa_supported((enum quant_isa)isa)) continue;
                float got;
                quant_vec_dot_isa(t, (enum quant_isa)isa)(n, &got, x, y);
                cr_assert(fabs(got - exact) <= bound * (1 + 1e-6) + DOT_TOL * mag + 1e-30,
                          "%s %s rep %d: int8 dot %.9g, exact %.9g, bound %g", quant_type_name(t),
                          quant_isa_name((enum quant_isa)isa), rep, got, exact, bound + DOT_TOL * mag);
                checked++;
            }
        }
    }
    cr_assert_gt(checked, 100);
    free(x), free(y), free(a), free(w), free(ya), free(step);
}

/* The AVX-512 activation quantizers write the scalar ones' bytes, for every
 * distribution, for exact rounding ties (x·(1/d) = k + ½: Q8_0/Q8_1 round
 * them away from zero, Q8_K to even), a largest magnitude held by both signs
 * (Q8_K takes the first), all-zero blocks, and NaN and infinite values; and
 * quant_init made them the traits' quantizers. */
Test(quant_act, avx512_quantizers_write_the_scalar_bytes)
{
    if (!quant_isa_supported(QUANT_ISA_AVX512)) cr_skip_test("this CPU lacks AVX-512 VNNI: AVX-512 quantizers not run");
    const enum quant_type acts[] = {QT_Q8_0, QT_Q8_1, QT_Q8_K};
    const int64_t n = 2560;
    float *x = xmalloc(sizeof(float) * n);
    uint8_t *a = xmalloc(4 * n), *b = xmalloc(4 * n);
    rng_seed(30);
    for (size_t k = 0; k < sizeof acts / sizeof *acts; k++) {
        quant_from_float_fn ref = quant_from_float_isa(acts[k], QUANT_ISA_SCALAR),
                            simd = quant_from_float_isa(acts[k], QUANT_ISA_AVX512);
        cr_assert(ref && simd, "%s: quantizers", quant_type_name(acts[k]));
        cr_assert(tr(acts[k])->from_float == simd, "%s: quant_init did not pick the AVX-512 quantizer", quant_type_name(acts[k]));
        const size_t bytes = quant_row_size(acts[k], n);
        for (int rep = 0; rep < 60; rep++) {
            const int kind = rep % 10;
            if (kind < D_COUNT) fill(x, n, (enum dist)kind);
            else if (kind == 6) /* ties: the block's extreme 127, so d = 1 and x·(1/d) = x = k + 0.5 */
                for (int64_t i = 0; i < n; i++) x[i] = i % 32 == 0 ? 127.0f : (float)((int)(rng_uniform() * 250) - 125) + 0.5f;
            else if (kind == 7) /* ±the same largest magnitude, the negative one first in half the blocks */
                for (int64_t i = 0; i < n; i++) x[i] = i % 256 == 5 ? -9.0f : i % 256 == 200 ? 9.0f : rng_normal();
            else if (kind == 8) { /* a NaN and an infinity in some blocks */
                fill(x, n, D_NORMAL);
                x[3] = NAN, x[700] = INFINITY, x[1500] = -INFINITY, x[2000] = NAN;
            } else fill(x, n, D_ZEROS);
            memset(a, 0x55, bytes), memset(b, 0xaa, bytes);
            ref(x, a, n);
            simd(x, b, n);
            for (size_t i = 0; i < bytes; i++)
                cr_assert_eq(a[i], b[i], "%s rep %d (kind %d): byte %zu of %zu: scalar %02x, avx512 %02x",
                             quant_type_name(acts[k]), rep, kind, i, bytes, a[i], b[i]);
        }
    }
    free(x), free(a), free(b);
}

