/* test_expert_ffn.c — the CPU expert FFN (gw_expert_ffn, gw_expert_ffn_many)
 * and the fp32-activation dot kernels under its fast mode (quant_dot_f32).
 *
 * - every fp32 dot kernel, of every ISA this CPU runs, against a double sum
 *   over the reference decoder's values: within 1e-5 of Σ|w·x| (the float
 *   rounding a sum of that many products can make), for 1..9 activation rows
 *   and row lengths with and without a tail;
 * - ref results are the same bits however the work is split: all experts in
 *   one gw_expert_ffn_many call or one gw_expert_ffn each, on 1 or 3
 *   threads, a row alone or inside a batch (what makes placement invisible);
 * - a scratch kept across calls of other shapes (the cpu-moe-worker's) gives
 *   the same bits as a fresh one, grows once to the largest call, and a
 *   refused call leaves it usable;
 * - fast = ref within 1e-5 per output, relative to |ref| + Σ_i |W_down[c,i]·h_i|
 *   (h = silu(gate x) ⊙ up x, in double here), for each supported format and
 *   the full-width q4_k_m mix; the ref itself within that bound of a double
 *   computation;
 * - int8 (activations quantized to 8 bits) = the exact FFN within a bound
 *   computed from the activations' quantization steps (int8_bound), per
 *   format and for the released mixes at full width; its bits do not depend
 *   on the batch or the threads; with float weights it is fast's bits;
 * - bad input: an unknown type is NB_ENOTSUP, an unknown kernel name NB_EINVAL. */
#include <criterion/criterion.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/err.h"
#include "engine/ffn.h"

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
static float rnd(void) /* [-1, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) / 8388608.0f - 1.0f;
}

/* The formats of the released mixes' experts; every other one is in
 * tests/core/test_quant_f32.c. */
static const enum quant_type fast_types[] = {QT_Q4_K,   QT_Q5_K, QT_Q6_K,    QT_Q5_1,   QT_Q8_0, QT_IQ4_NL, QT_BF16,
                                             QT_F32,    QT_F16,  QT_IQ2_XXS, QT_IQ2_XS, QT_Q2_K, QT_Q3_K};
#define N_FAST (sizeof fast_types / sizeof *fast_types)

/* rows × n random weights of type t, and their decoded values (if dec). */
static uint8_t *matrix(enum quant_type t, int64_t rows, int64_t n, float scale, float **dec)
{
    const struct quant_traits *q = quant_traits_of(t);
    size_t rb = quant_row_size(t, n);
    cr_assert(q && q->from_float && rb, "%s rows of %ld", quant_type_name(t), (long)n);
    uint8_t *m = malloc(rb * (size_t)rows);
    float *row = malloc((size_t)n * sizeof *row);
    if (dec) *dec = malloc((size_t)(rows * n) * sizeof **dec);
    cr_assert(m && row && (!dec || *dec));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = rnd() * scale;
        q->from_float(row, m + rb * (size_t)r, n);
        if (dec) q->to_float(m + rb * (size_t)r, *dec + r * n, n);
    }
    free(row);
    return m;
}

static bool have_fast(void) { return quant_isa_supported(QUANT_ISA_AVX2); }

Test(dot_f32, every_kernel_matches_a_double_sum)
{
    if (!have_fast()) cr_skip_test("this CPU has no AVX2: quant_dot_f32 is NULL and fast falls back to ref");
    rng_seed(1);
    for (size_t k = 0; k < N_FAST; k++) {
        enum quant_type t = fast_types[k];
        cr_assert_not_null(quant_dot_f32(t), "no fp32 kernel for %s", quant_type_name(t));
        int64_t blck = quant_traits_of(t)->blck_size;
        const int64_t lens[] = {256, 2560, blck == 1 ? 37 : 512 + 32 * (blck == 32)};
        for (size_t li = 0; li < 3; li++) {
            const int64_t n = lens[li];
            float *w, *x = malloc((size_t)(9 * n) * sizeof *x);
            uint8_t *raw = matrix(t, 1, n, 0.5f, &w);
            for (int64_t i = 0; i < 9 * n; i++) x[i] = rnd();
            for (int isa = QUANT_ISA_AVX2; isa < QUANT_ISA_COUNT; isa++) {
                quant_dot_f32_fn dot = quant_dot_f32_isa(t, (enum quant_isa)isa);
                if (!quant_isa_supported((enum quant_isa)isa)) continue;
                cr_assert_not_null(dot, "%s: no %s kernel", quant_type_name(t), quant_isa_name((enum quant_isa)isa));
                for (int nt = 1; nt <= 9; nt++) {
                    float got[9];
                    dot(n, raw, x, n, nt, got);
                    for (int r = 0; r < nt; r++) {
                        double exact = 0, mag = 0;
                        for (int64_t i = 0; i < n; i++)
                            exact += (double)w[i] * x[r * n + i], mag += fabs((double)w[i] * x[r * n + i]);
                        cr_assert_leq(fabs(got[r] - exact), 1e-5 * mag + 1e-30,
                                      "%s %s n %ld rows %d row %d: %.9g, exact %.9g (Σ|w·x| %.3g)", quant_type_name(t),
                                      quant_isa_name((enum quant_isa)isa), (long)n, nt, r, (double)got[r], exact, mag);
                    }
                }
            }
            free(raw);
            free(w);
            free(x);
        }
    }
}

/* One expert of C × I with the given types, weights decoded too. */
struct expert {
    struct gw_expert w;
    float *g, *u, *d; /* decoded: I × C, I × C, C × I */
};

static void expert_make(struct expert *e, int64_t C, int64_t I, enum quant_type tg, enum quant_type tu,
                        enum quant_type td)
{
    e->w = (struct gw_expert){NULL, NULL, NULL, tg, tu, td, C, I};
    e->w.gate = matrix(tg, I, C, 2.0f / sqrtf((float)C), &e->g);
    e->w.up = matrix(tu, I, C, 2.0f / sqrtf((float)C), &e->u);
    e->w.down = matrix(td, C, I, 2.0f / sqrtf((float)I), &e->d);
}

static void expert_free(struct expert *e)
{
    free((void *)e->w.gate);
    free((void *)e->w.up);
    free((void *)e->w.down);
    free(e->g);
    free(e->u);
    free(e->d);
}

/* For row x: exact[c] (double) and mag[c] = Σ_i |W_down[c,i] · h_i| · |scale|. */
static void expert_exact(const struct expert *e, const float *x, float scale, double *exact, double *mag)
{
    const int64_t C = e->w.n_embd, I = e->w.n_ff;
    double *h = malloc((size_t)I * sizeof *h);
    cr_assert_not_null(h);
    for (int64_t i = 0; i < I; i++) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < C; c++) g += (double)e->g[i * C + c] * x[c], u += (double)e->u[i * C + c] * x[c];
        h[i] = g / (1.0 + exp(-g)) * u;
    }
    for (int64_t c = 0; c < C; c++) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; i++) s += e->d[c * I + i] * h[i], m += fabs(e->d[c * I + i] * h[i]);
        exact[c] = s * scale, mag[c] = m * fabs(scale);
    }
    free(h);
}

/* fast and ref on n rows; both checked against the double computation and
 * against each other. */
static void check_fast(struct expert *e, int n)
{
    const int64_t C = e->w.n_embd;
    float *x = malloc((size_t)(n * C) * sizeof *x), *ref = malloc((size_t)(n * C) * sizeof *ref);
    float *fast = malloc((size_t)(n * C) * sizeof *fast), scale[8];
    double *exact = malloc((size_t)C * sizeof *exact), *mag = malloc((size_t)C * sizeof *mag);
    cr_assert(x && ref && fast && exact && mag && n <= 8);
    for (int64_t i = 0; i < n * C; i++) x[i] = rnd();
    for (int t = 0; t < n; t++) scale[t] = 0.25f + 0.1f * (float)t;
    struct gw_expert_job jr = {e->w, x, n, scale, ref}, jf = {e->w, x, n, scale, fast};
    cr_assert_eq(gw_expert_ffn_many(&jr, 1, GW_KERNELS_REF, NULL), 0);
    cr_assert_eq(gw_expert_ffn_many(&jf, 1, GW_KERNELS_FAST, NULL), 0);
    for (int t = 0; t < n; t++) {
        expert_exact(e, x + t * C, scale[t], exact, mag);
        for (int64_t c = 0; c < C; c++) {
            double r = ref[t * C + c], f = fast[t * C + c], bound = 1e-5 * (fabs(r) + mag[c]);
            cr_assert_leq(fabs(f - r), bound, "%s/%s/%s row %d out %ld: fast %.9g ref %.9g (Σ|W·h| %.3g)",
                          quant_type_name(e->w.gate_type), quant_type_name(e->w.up_type),
                          quant_type_name(e->w.down_type), t, (long)c, f, r, mag[c]);
            cr_assert_leq(fabs(r - exact[c]), 1e-5 * (fabs(exact[c]) + mag[c]), "ref row %d out %ld: %.9g, exact %.9g",
                          t, (long)c, r, exact[c]);
        }
    }
    free(x);
    free(ref);
    free(fast);
    free(exact);
    free(mag);
}

Test(expert_ffn, fast_is_ref_within_float_tolerance_per_format)
{
    rng_seed(2);
    for (size_t k = 0; k < N_FAST; k++) {
        struct expert e;
        expert_make(&e, 512, 256, fast_types[k], fast_types[k], fast_types[k]);
        check_fast(&e, 1);
        check_fast(&e, 5);
        expert_free(&e);
    }
}

Test(expert_ffn, fast_is_ref_within_float_tolerance_full_width_q4_k_m)
{
    rng_seed(3);
    const enum quant_type downs[] = {QT_Q5_1, QT_Q8_0};
    for (int k = 0; k < 2; k++) {
        struct expert e;
        expert_make(&e, 2560, 640, QT_Q4_K, QT_Q4_K, downs[k]);
        check_fast(&e, 1);
        check_fast(&e, 3);
        expert_free(&e);
    }
}

/* ---- int8 (GW_KERNELS_INT8) ---- */

/* The decoded activations of x quantized to type t's vec_dot_type (x̂) and
 * each value's half step s_b/2 (|x - x̂| ≤ s_b/2: tests/core/test_quant_int8.c). */
static void q8_view(enum quant_type t, const float *x, int64_t n, float *xh, double *half)
{
    const struct quant_traits *a = quant_traits_of(quant_traits_of(t)->vec_dot_type);
    if (!a->is_quantized) { /* float weights dot with the fp32 x itself */
        for (int64_t i = 0; i < n; i++) xh[i] = x[i], half[i] = 0;
        return;
    }
    uint8_t *q = malloc(quant_row_size(a->type, n));
    cr_assert_not_null(q);
    a->from_float(x, q, n);
    a->to_float(q, xh, n);
    for (int64_t b = 0; b < n / a->blck_size; b++) {
        const uint8_t *blk = q + (size_t)b * a->type_size;
        float d;
        if (a->type == QT_Q8_K) memcpy(&d, blk, 4);
        else d = quant_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int64_t i = 0; i < a->blck_size; i++) half[b * a->blck_size + i] = 0.5 * fabs((double)d);
    }
    free(q);
}

/* The int8 FFN's error bound for row x, first order with the second-order
 * terms kept (all in double; C ≤ 2560, I ≤ 640):
 *   Δg_i = Σ_c |Wg[i,c]|·s(c)/2 over gate's x̂ (Δu_i the same with up's),
 *   Δh_i = 1.1·Δg_i·(|u_i| + Δu_i) + (|silu(g_i)| + 1.1·Δg_i)·Δu_i
 *          (|silu'| ≤ 1.0999 everywhere),
 *   h̃ the computed h, |h̃_i| ≤ |h_i| + Δh_i, quantized with step ≤ max_b|h̃|/127
 *   (1 + 2^-10 for the fp16 scale): Δĥ_i = Δh_i + max_{j∈b(i)}(|h_j| + Δh_j)/254 · (1 + 2^-10),
 *   Δout_c = |scale|·Σ_i |Wd[c,i]|·Δĥ_i,
 * with x̂ from the same quantizer the kernels use.  h is computed from the
 * exact g, u (not the quantized ones). */
static void int8_bound(const struct expert *e, const float *x, float scale, double *bound)
{
    const int64_t C = e->w.n_embd, I = e->w.n_ff;
    float *xg = malloc((size_t)C * sizeof *xg), *xu = malloc((size_t)C * sizeof *xu);
    double *hg = malloc((size_t)C * sizeof *hg), *hu = malloc((size_t)C * sizeof *hu);
    double *h = malloc((size_t)I * sizeof *h), *dh = malloc((size_t)I * sizeof *dh), *dq = malloc((size_t)I * sizeof *dq);
    cr_assert(xg && xu && hg && hu && h && dh && dq);
    q8_view(e->w.gate_type, x, C, xg, hg);
    q8_view(e->w.up_type, x, C, xu, hu);
    for (int64_t i = 0; i < I; i++) {
        double g = 0, u = 0, Dg = 0, Du = 0;
        for (int64_t c = 0; c < C; c++) {
            g += (double)e->g[i * C + c] * x[c], u += (double)e->u[i * C + c] * x[c];
            Dg += fabs((double)e->g[i * C + c]) * hg[c], Du += fabs((double)e->u[i * C + c]) * hu[c];
        }
        const double silu = g / (1.0 + exp(-g));
        h[i] = silu * u;
        dh[i] = 1.1 * Dg * (fabs(u) + Du) + (fabs(silu) + 1.1 * Dg) * Du;
    }
    const struct quant_traits *ha = quant_traits_of(quant_traits_of(e->w.down_type)->vec_dot_type);
    const int64_t blk = ha->is_quantized ? ha->blck_size : 1; /* float down weights: h not quantized */
    for (int64_t b = 0; b < I; b += blk) {
        double mx = 0;
        for (int64_t i = b; i < b + blk; i++) mx = fmax(mx, fabs(h[i]) + dh[i]);
        for (int64_t i = b; i < b + blk; i++) dq[i] = dh[i] + (ha->is_quantized ? mx / 254.0 * (1 + 0x1p-10) : 0);
    }
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t i = 0; i < I; i++) s += fabs((double)e->d[c * I + i]) * dq[i];
        bound[c] = s * fabs(scale);
    }
    free(xg), free(xu), free(hg), free(hu), free(h), free(dh), free(dq);
}

/* int8 on n rows against the exact FFN, within int8_bound plus the fast
 * kernels' float tolerance; and it is really int8: it differs from fast
 * unless every matrix has float weights (then the bits are fast's).  Returns
 * the largest error over the bound. */
static double check_int8(struct expert *e, int n)
{
    const int64_t C = e->w.n_embd;
    float *x = malloc((size_t)(n * C) * sizeof *x), *fast = malloc((size_t)(n * C) * sizeof *fast);
    float *q8 = malloc((size_t)(n * C) * sizeof *q8), scale[8];
    double *exact = malloc((size_t)C * sizeof *exact), *mag = malloc((size_t)C * sizeof *mag);
    double *bound = malloc((size_t)C * sizeof *bound), worst = 0, differ = 0;
    cr_assert(x && fast && q8 && exact && mag && bound && n <= 8);
    for (int64_t i = 0; i < n * C; i++) x[i] = rnd();
    for (int t = 0; t < n; t++) scale[t] = 0.25f + 0.1f * (float)t;
    struct gw_expert_job jf = {e->w, x, n, scale, fast}, jq = {e->w, x, n, scale, q8};
    cr_assert_eq(gw_expert_ffn_many(&jf, 1, GW_KERNELS_FAST, NULL), 0);
    cr_assert_eq(gw_expert_ffn_many(&jq, 1, GW_KERNELS_INT8, NULL), 0);
    const bool floats = !quant_traits_of(e->w.gate_type)->is_quantized && !quant_traits_of(e->w.up_type)->is_quantized &&
                        !quant_traits_of(e->w.down_type)->is_quantized;
    for (int t = 0; t < n; t++) {
        expert_exact(e, x + t * C, scale[t], exact, mag);
        int8_bound(e, x + t * C, scale[t], bound);
        for (int64_t c = 0; c < C; c++) {
            const double q = q8[t * C + c], lim = bound[c] + 1e-5 * (fabs(exact[c]) + mag[c]);
            cr_assert_leq(fabs(q - exact[c]), lim, "%s/%s/%s row %d out %ld: int8 %.9g exact %.9g bound %.3g",
                          quant_type_name(e->w.gate_type), quant_type_name(e->w.up_type),
                          quant_type_name(e->w.down_type), t, (long)c, q, exact[c], lim);
            worst = fmax(worst, fabs(q - exact[c]) / lim);
            differ = fmax(differ, fabs(q - fast[t * C + c]));
            if (floats) cr_assert_eq(q8[t * C + c], fast[t * C + c], "float weights: int8 must be fast's bits");
        }
    }
    if (!floats) cr_assert_gt(differ, 0, "%s: int8 gave fast's bits: no activation was quantized", quant_type_name(e->w.gate_type));
    free(x), free(fast), free(q8), free(exact), free(mag), free(bound);
    return worst;
}

Test(expert_ffn, int8_is_exact_within_the_activation_rounding_per_format)
{
    rng_seed(6);
    double worst = 0;
    for (size_t k = 0; k < N_FAST; k++) {
        struct expert e;
        expert_make(&e, 512, 256, fast_types[k], fast_types[k], fast_types[k]);
        worst = fmax(worst, check_int8(&e, 1));
        worst = fmax(worst, check_int8(&e, 5));
        expert_free(&e);
    }
    cr_log_info("int8 per format: largest error / bound %.3f", worst);
}

/* The published mixes' experts at the released widths (C 2560, I 640): q4_k_m
 * (down Q5_1 and Q8_0: h quantized inside the phase-1 items, Q8_1 and Q8_0),
 * iq2_xs (IQ2_XS and Q2_0: Q8_K and Q8_0), iq2_xxs (IQ4_NL down); and a K-quant
 * down (Q8_K h: the separate pass) at I 512. */
Test(expert_ffn, int8_is_exact_within_the_activation_rounding_released_mixes)
{
    rng_seed(7);
    const struct { enum quant_type g, u, d; int64_t I; } mixes[] = {
        {QT_Q4_K, QT_Q4_K, QT_Q5_1, 640},       {QT_Q4_K, QT_Q4_K, QT_Q8_0, 640},
        {QT_IQ2_XS, QT_IQ2_XS, QT_Q2_0, 640},   {QT_IQ2_XXS, QT_IQ2_XXS, QT_IQ4_NL, 640},
        {QT_Q4_K, QT_Q5_1, QT_Q6_K, 512},
    };
    double worst = 0;
    for (size_t k = 0; k < sizeof mixes / sizeof *mixes; k++) {
        struct expert e;
        expert_make(&e, 2560, mixes[k].I, mixes[k].g, mixes[k].u, mixes[k].d);
        worst = fmax(worst, check_int8(&e, 3));
        expert_free(&e);
    }
    cr_log_info("int8 released mixes: largest error / bound %.3f", worst);
}

/* Several jobs of mixed formats in one call, on 1 and 3 threads, with a
 * scratch kept across calls: the same bits as each job alone (int8's
 * quantization is per job and row, never across them). */
Test(expert_ffn, int8_bits_do_not_depend_on_the_batch_or_threads)
{
    rng_seed(8);
    enum { E = 3 };
    const enum quant_type types[E][3] = {{QT_IQ2_XS, QT_IQ2_XS, QT_Q8_0}, {QT_Q4_K, QT_Q5_1, QT_Q6_K}, {QT_F32, QT_Q8_0, QT_BF16}};
    struct expert e[E];
    const int64_t C = 512, I = 256;
    const int n[E] = {1, 4, 2};
    float x[4 * 512], sc[4] = {0.5f, 1, 1.5f, 2}, alone[E][4 * 512], batch[E][4 * 512];
    for (int64_t i = 0; i < 4 * C; i++) x[i] = rnd();
    struct gw_expert_job jobs[E];
    struct gw_expert_scratch s = {0};
    for (int j = 0; j < E; j++) {
        expert_make(&e[j], C, I, types[j][0], types[j][1], types[j][2]);
        struct gw_expert_job one = {e[j].w, x, n[j], sc, alone[j]};
        cr_assert_eq(gw_expert_ffn_many(&one, 1, GW_KERNELS_INT8, NULL), 0);
        jobs[j] = (struct gw_expert_job){e[j].w, x, n[j], sc, batch[j]};
    }
    for (int threads = 1; threads <= 3; threads += 2) {
        omp_set_num_threads(threads);
        memset(batch, 0, sizeof batch);
        cr_assert_eq(gw_expert_ffn_many(jobs, E, GW_KERNELS_INT8, &s), 0);
        for (int j = 0; j < E; j++)
            cr_assert_arr_eq(batch[j], alone[j], (size_t)n[j] * (size_t)C * sizeof(float), "job %d, %d threads", j, threads);
    }
    gw_expert_scratch_free(&s);
    for (int j = 0; j < E; j++) expert_free(&e[j]);
}

Test(expert_ffn, ref_bits_do_not_depend_on_the_split)
{
    rng_seed(4);
    enum { E = 3, N = 4 };
    const int64_t C = 512, I = 128;
    struct expert e[E];
    expert_make(&e[0], C, I, QT_Q4_K, QT_Q4_K, QT_Q5_1);
    expert_make(&e[1], C, I, QT_Q6_K, QT_Q5_K, QT_Q8_0);
    expert_make(&e[2], C, I, QT_IQ4_NL, QT_BF16, QT_F32);
    float *x = malloc((size_t)(N * C) * sizeof *x), scale[N] = {0.5f, -0.25f, 1.0f, 0.125f};
    float *all = malloc((size_t)(E * N * C) * sizeof *all), *one = malloc((size_t)(N * C) * sizeof *one);
    cr_assert(x && all && one);
    for (int64_t i = 0; i < N * C; i++) x[i] = rnd();
    struct gw_expert_job jobs[E];
    for (int j = 0; j < E; j++) jobs[j] = (struct gw_expert_job){e[j].w, x, N, scale, all + j * N * C};
    omp_set_num_threads(3);
    cr_assert_eq(gw_expert_ffn_many(jobs, E, GW_KERNELS_REF, NULL), 0);
    for (int threads = 1; threads <= 3; threads += 2) {
        omp_set_num_threads(threads);
        for (int j = 0; j < E; j++) {
            cr_assert_eq(gw_expert_ffn(&e[j].w, x, N, scale, one), 0);
            cr_assert(!memcmp(one, all + j * N * C, (size_t)(N * C) * sizeof *one),
                      "expert %d, %d thread(s): one call differs from the batch", j, threads);
            for (int t = 0; t < N; t++) { /* a row alone: the same bits as inside the batch */
                cr_assert_eq(gw_expert_ffn(&e[j].w, x + t * C, 1, scale + t, one), 0);
                cr_assert(!memcmp(one, all + (j * N + t) * C, (size_t)C * sizeof *one),
                          "expert %d row %d alone differs from the batch", j, t);
            }
        }
    }
    for (int j = 0; j < E; j++) expert_free(&e[j]);
    free(x);
    free(all);
    free(one);
}

Test(expert_ffn, kept_scratch_changes_no_bit)
{
    rng_seed(6);
    enum { E = 3, N = 3 };
    const int64_t C = 512, I = 128;
    struct expert e[E];
    expert_make(&e[0], C, I, QT_Q4_K, QT_Q4_K, QT_Q5_1);
    expert_make(&e[1], C, I, QT_Q6_K, QT_Q5_K, QT_Q8_0);
    expert_make(&e[2], C, I, QT_Q8_0, QT_Q4_K, QT_Q8_0);
    float *x = malloc((size_t)(N * C) * sizeof *x), scale[N] = {0.5f, -0.25f, 1.0f};
    float *want = malloc((size_t)(E * N * C) * sizeof *want), *got = malloc((size_t)(E * N * C) * sizeof *got);
    cr_assert(x && want && got);
    for (int64_t i = 0; i < N * C; i++) x[i] = rnd();
    omp_set_num_threads(2);
    struct gw_expert_scratch s = {0};
    /* Shapes in the order a worker meets them: small, large, small again, for both kernel sets. */
    const int shapes[][2] = {{1, 1}, {E, N}, {2, 1}, {E, N}, {1, N}};
    for (int k = GW_KERNELS_REF; k <= GW_KERNELS_FAST; k++)
        for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
            const int n_jobs = shapes[c][0], n = shapes[c][1];
            struct gw_expert_job jw[E], jg[E];
            for (int j = 0; j < n_jobs; j++) {
                jw[j] = (struct gw_expert_job){e[j].w, x, n, scale, want + j * N * C};
                jg[j] = jw[j], jg[j].out = got + j * N * C;
            }
            cr_assert_eq(gw_expert_ffn_many(jw, n_jobs, (enum gw_kernels)k, NULL), 0);
            cr_assert_eq(gw_expert_ffn_many(jg, n_jobs, (enum gw_kernels)k, &s), 0);
            for (int j = 0; j < n_jobs; j++)
                cr_assert(!memcmp(want + j * N * C, got + j * N * C, (size_t)(n * C) * sizeof *got),
                          "%s kernels, call %zu (%d jobs × %d rows): job %d differs with the kept scratch",
                          gw_kernels_name((enum gw_kernels)k), c, n_jobs, n, j);
        }
    const size_t grown = s.bytes;
    cr_assert_gt(grown, 0);
    struct gw_expert bad = e[0].w;
    bad.up_type = 33; /* a type number ggml retired (Q4_0_8_8): refused, the scratch stays */
    struct gw_expert_job jb[2] = {{e[1].w, x, 1, scale, got}, {bad, x, 1, scale, got + C}};
    cr_assert_eq(gw_expert_ffn_many(jb, 2, GW_KERNELS_REF, &s), NB_ENOTSUP);
    struct gw_expert_job jl = {e[2].w, x, N, scale, got};
    cr_assert_eq(gw_expert_ffn_many(&jl, 1, GW_KERNELS_REF, &s), 0);
    cr_assert_eq(s.bytes, grown, "a call no larger than the largest one so far grew the scratch");
    cr_assert_eq(gw_expert_ffn(&e[2].w, x, N, scale, want), 0);
    cr_assert(!memcmp(want, got, (size_t)(N * C) * sizeof *got), "after a refused call the scratch gives other bits");
    gw_expert_scratch_free(&s);
    cr_assert(s.buf == NULL && s.bytes == 0);
    for (int j = 0; j < E; j++) expert_free(&e[j]);
    free(x);
    free(want);
    free(got);
}

Test(expert_ffn, bad_input)
{
    rng_seed(5);
    struct expert e;
    expert_make(&e, 256, 64, QT_Q8_0, QT_Q8_0, QT_Q8_0);
    float x[256] = {0}, out[256], s = 1;
    struct gw_expert bad = e.w;
    bad.down_type = 33; /* a type number ggml retired (Q4_0_8_8) */
    cr_assert_eq(gw_expert_ffn(&bad, x, 1, &s, out), NB_ENOTSUP);
    struct gw_expert_job jobs[2] = {{e.w, x, 1, &s, out}, {bad, x, 1, &s, out}};
    cr_assert_eq(gw_expert_ffn_many(jobs, 2, GW_KERNELS_FAST, NULL), NB_ENOTSUP);
    cr_assert_eq(gw_expert_ffn_many(jobs, 0, GW_KERNELS_REF, NULL), 0);
    enum gw_kernels k = GW_KERNELS_REF;
    cr_assert_eq(gw_kernels_parse("fast", &k), 0);
    cr_assert_eq(k, GW_KERNELS_FAST);
    cr_assert_eq(gw_kernels_parse("ref", &k), 0);
    cr_assert_eq(k, GW_KERNELS_REF);
    cr_assert_eq(gw_kernels_parse("int8", &k), 0);
    cr_assert_eq(k, GW_KERNELS_INT8);
    cr_assert_str_eq(gw_kernels_name(GW_KERNELS_INT8), "int8");
    cr_assert_eq(gw_expert_ffn_many(jobs, 2, GW_KERNELS_INT8, NULL), NB_ENOTSUP);
    cr_assert_eq(gw_kernels_parse("fastest", &k), NB_EINVAL);
    cr_assert_eq(gw_kernels_parse(NULL, &k), NB_EINVAL);
    expert_free(&e);
}
