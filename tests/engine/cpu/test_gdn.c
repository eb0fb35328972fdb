/* test_gdn.c — the two forms of the gated delta rule (engine/cpu/gdn.c)
 * agree: the token-by-token recurrence and transformers' chunked prefill,
 * with each other and with the rule written out naively in double, on
 * random inputs, from a non-zero state, for lengths on and off the chunk
 * size, when a prefill is split into several calls, and for key and value
 * heads of different sizes (dk ≠ dv); and a whole GDN layer (cpu_gdn_forward)
 * of synthetic dk × dv models against its formulas computed in double. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "engine/cpu/cpu.h"
#include "tests/core/model_fixture.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform())); }

struct gdn_case {
    struct cpu_gdn_dims d;
    int T;
    float *q, *k, *v, *g, *beta, *state0;
};

/* Random inputs shaped like the layer's: unit q, k (q scaled by 1/√dk),
 * decays in (e^-3, 1], β in (0, 1). */
static struct gdn_case make_case(int Hk, int Hv, int Dk, int Dv, int T)
{
    struct gdn_case c = {{Hk, Hv, Dk, Dv}, T, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nk = (size_t)T * Hk * Dk, nv = (size_t)T * Hv * Dv, ns = (size_t)Hv * Dk * Dv;
    c.q = malloc(nk * sizeof(float)), c.k = malloc(nk * sizeof(float)), c.v = malloc(nv * sizeof(float));
    c.g = malloc((size_t)T * Hv * sizeof(float)), c.beta = malloc((size_t)T * Hv * sizeof(float));
    c.state0 = malloc(ns * sizeof(float));
    for (size_t i = 0; i < nk; i += (size_t)Dk) {
        double sq = 0, sk = 0;
        for (int j = 0; j < Dk; j++) {
            c.q[i + j] = normal(), c.k[i + j] = normal();
            sq += c.q[i + j] * c.q[i + j], sk += c.k[i + j] * c.k[i + j];
        }
        for (int j = 0; j < Dk; j++) {
            c.q[i + j] = (float)(c.q[i + j] / sqrt(sq) / sqrt(Dk));
            c.k[i + j] = (float)(c.k[i + j] / sqrt(sk));
        }
    }
    for (size_t i = 0; i < nv; i++) c.v[i] = normal();
    for (int i = 0; i < T * Hv; i++) c.g[i] = (float)(-3.0 * uniform() * uniform()), c.beta[i] = (float)uniform();
    for (size_t i = 0; i < ns; i++) c.state0[i] = 0.1f * normal();
    return c;
}

static void free_case(struct gdn_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->g), free(c->beta), free(c->state0);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* The delta rule straight from its definition, in double, one token at a
 * time (S ← e^g S; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq, S dk × dv per value
 * head, value head h on key head h mod Hk), written without the library's
 * index helpers so that a dk/dv mix-up in them shows. */
static void naive_delta_rule(const struct gdn_case *c, double *S, double *out)
{
    const int Hk = c->d.n_k_heads, Hv = c->d.n_v_heads, Dk = c->d.k_head_dim, Dv = c->d.v_head_dim;
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < Hv; h++) {
            double *Sh = S + (size_t)h * Dk * Dv;
            const float *q = c->q + ((size_t)t * Hk + h % Hk) * Dk, *k = c->k + ((size_t)t * Hk + h % Hk) * Dk;
            const float *v = c->v + ((size_t)t * Hv + h) * Dv;
            const double decay = exp(c->g[t * Hv + h]), b = c->beta[t * Hv + h];
            for (int i = 0; i < Dk * Dv; i++) Sh[i] *= decay;
            for (int j = 0; j < Dv; j++) {
                double kS = 0;
                for (int i = 0; i < Dk; i++) kS += k[i] * Sh[i * Dv + j];
                const double delta = b * (v[j] - kS);
                for (int i = 0; i < Dk; i++) Sh[i * Dv + j] += k[i] * delta;
            }
            for (int j = 0; j < Dv; j++) {
                double o = 0;
                for (int i = 0; i < Dk; i++) o += q[i] * Sh[i * Dv + j];
                out[((size_t)t * Hv + h) * Dv + j] = o;
            }
        }
}

static double max_abs_diff_d(const float *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Runs both forms (the chunked one in pieces of `split` tokens per call) and
 * compares outputs and final states with each other and with the naive rule. */
static void check_forms(int Hk, int Hv, int Dk, int Dv, int T, int chunk, int split)
{
    struct gdn_case c = make_case(Hk, Hv, Dk, Dv, T);
    size_t nv = (size_t)T * Hv * Dv, ns = (size_t)Hv * Dk * Dv;
    float *o_rec = malloc(nv * sizeof(float)), *o_chk = malloc(nv * sizeof(float));
    float *s_rec = malloc(ns * sizeof(float)), *s_chk = malloc(ns * sizeof(float));
    double *o_ref = malloc(nv * sizeof(double)), *s_ref = malloc(ns * sizeof(double));
    memcpy(s_rec, c.state0, ns * sizeof(float));
    memcpy(s_chk, c.state0, ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) s_ref[i] = c.state0[i];
    cpu_gdn_core_recurrent(&c.d, T, c.q, c.k, c.v, c.g, c.beta, s_rec, o_rec);
    for (int t0 = 0; t0 < T; t0 += split) {
        int n = T - t0 < split ? T - t0 : split;
        size_t ko = (size_t)t0 * Hk * Dk, vo = (size_t)t0 * Hv * Dv, ho = (size_t)t0 * Hv;
        cpu_gdn_core_chunked(&c.d, n, chunk, c.q + ko, c.k + ko, c.v + vo, c.g + ho, c.beta + ho, s_chk, o_chk + vo);
    }
    naive_delta_rule(&c, s_ref, o_ref);
    double d_out = max_abs_diff(o_rec, o_chk, nv), d_state = max_abs_diff(s_rec, s_chk, ns);
    cr_expect_leq(d_out, 1e-5, "dk %d dv %d T %d chunk %d split %d: outputs differ by %g", Dk, Dv, T, chunk, split, d_out);
    cr_expect_leq(d_state, 1e-5, "dk %d dv %d T %d chunk %d split %d: states differ by %g", Dk, Dv, T, chunk, split, d_state);
    double r_out = max_abs_diff_d(o_rec, o_ref, nv), r_state = max_abs_diff_d(s_rec, s_ref, ns);
    cr_expect_leq(r_out, 1e-5, "dk %d dv %d T %d: recurrent output off the naive rule by %g", Dk, Dv, T, r_out);
    cr_expect_leq(r_state, 1e-5, "dk %d dv %d T %d: recurrent state off the naive rule by %g", Dk, Dv, T, r_state);
    /* the state must have moved: a test of two no-ops would pass too */
    cr_expect_gt(max_abs_diff(s_rec, c.state0, ns), 1e-2);
    free(o_rec), free(o_chk), free(s_rec), free(s_chk), free(o_ref), free(s_ref);
    free_case(&c);
}

Test(gdn, chunked_equals_recurrent_on_and_off_the_chunk_size)
{
    const int lengths[] = {1, 2, 7, 63, 64, 65, 100, 128, 130, 200};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        check_forms(2, 6, 16, 16, lengths[i], CPU_GDN_CHUNK, 1 << 20);
}

Test(gdn, chunked_equals_recurrent_with_small_chunks_and_equal_heads)
{
    check_forms(3, 3, 8, 8, 77, 16, 1 << 20);
    check_forms(1, 4, 32, 32, 50, 5, 1 << 20);
}

Test(gdn, prefill_split_across_calls_carries_the_state)
{
    check_forms(2, 6, 16, 16, 150, CPU_GDN_CHUNK, 37); /* splits off the chunk grid */
    check_forms(2, 4, 8, 8, 99, CPU_GDN_CHUNK, 64);
}

/* dk ≠ dv: wider values (24 over 16, not a multiple), a multiple (24 over 8),
 * narrower values (16 under 24; 12 under 16, neither dividing the other; 8
 * under 16), on and off the chunk grid and split across calls. */
Test(gdn, key_and_value_head_sizes_differ)
{
    const int dims[][2] = {{16, 24}, {8, 24}, {24, 16}, {16, 12}, {16, 8}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        check_forms(2, 6, dims[i][0], dims[i][1], 70, CPU_GDN_CHUNK, 1 << 20);
        check_forms(2, 4, dims[i][0], dims[i][1], 99, 16, 37);
        check_forms(2, 6, dims[i][0], dims[i][1], 1, CPU_GDN_CHUNK, 1);
    }
}

/* Value head h reads key head h mod Hk: with Hk = 2, heads 0 and 2 see the
 * same keys, so equal values and gates give equal outputs, and head 1 differs. */
Test(gdn, value_heads_are_tiled_over_key_heads)
{
    struct gdn_case c = make_case(2, 4, 8, 8, 20);
    for (int t = 0; t < 20; t++) {
        memcpy(c.v + ((size_t)t * 4 + 2) * 8, c.v + (size_t)t * 4 * 8, 8 * sizeof(float));
        memcpy(c.v + ((size_t)t * 4 + 1) * 8, c.v + (size_t)t * 4 * 8, 8 * sizeof(float));
        c.g[t * 4 + 2] = c.g[t * 4 + 1] = c.g[t * 4];
        c.beta[t * 4 + 2] = c.beta[t * 4 + 1] = c.beta[t * 4];
    }
    float *state = calloc(4 * 64, sizeof(float)), *out = malloc(20 * 4 * 8 * sizeof(float));
    cpu_gdn_core_chunked(&c.d, 20, CPU_GDN_CHUNK, c.q, c.k, c.v, c.g, c.beta, state, out);
    double same = 0, other = 0;
    for (int t = 0; t < 20; t++)
        for (int j = 0; j < 8; j++) {
            same = fmax(same, fabs(out[(t * 4 + 2) * 8 + j] - out[(t * 4) * 8 + j]));
            other = fmax(other, fabs(out[(t * 4 + 1) * 8 + j] - out[(t * 4) * 8 + j]));
        }
    cr_expect_eq(same, 0.0);
    cr_expect_gt(other, 1e-3);
    free(state), free(out);
    free_case(&c);
}

/* ---------- the whole layer against its formulas ---------- */

/* GDN of one layer (MODEL.md, GDN) computed in double straight from the
 * f32 weights, token by token, keeping every pre-conv row: projections, the
 * causal conv (zeros before the first token) + SiLU, per-head L2 norms (q also
 * × dk^-½), β = σ(b), g = a·softplus(α + dt_bias), the delta rule per value
 * head on key head h mod Hk, then RMS(o)·w·σ(z) over each value head and the
 * output projection. */
struct naive_layer {
    const struct model_hparams *hp;
    const struct model_gdn *w;
    double *pre;   /* every token's pre-conv q|k|v row */
    double *S;     /* Hv × dk × dv */
    int n;         /* tokens seen */
};

static const float *f32_of(const struct model_tensor *t)
{
    cr_assert_eq(t->type, QT_F32, "%s is not f32", t->name);
    return (const float *)t->data;
}

/* out[r] = Σ_i W[r][i] x[i] for a [n_in, n_out] matrix */
static void naive_matvec(const struct model_tensor *t, const double *x, double *out)
{
    const float *W = f32_of(t);
    for (int64_t r = 0; r < t->ne[1]; r++) {
        double s = 0;
        for (int64_t i = 0; i < t->ne[0]; i++) s += (double)W[r * t->ne[0] + i] * x[i];
        out[r] = s;
    }
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

static void naive_gdn_token(struct naive_layer *nl, const float *xf, double *y)
{
    const struct model_hparams *hp = nl->hp;
    const struct model_gdn *w = nl->w;
    const int Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, Dk = hp->ssm_k_head_dim, Dv = hp->ssm_v_head_dim;
    const int K = hp->ssm_conv_kernel;
    const int64_t C = hp->n_embd, ch = 2 * Hk * Dk + Hv * Dv;
    double x[C], mixed[ch], z[Hv * Dv], b[Hv], a[Hv], o[Hv * Dv];
    for (int64_t i = 0; i < C; i++) x[i] = xf[i];
    double *pre = nl->pre + (size_t)nl->n * ch;
    naive_matvec(&w->qkv, x, pre);
    naive_matvec(&w->gate, x, z);
    naive_matvec(&w->beta, x, b);
    naive_matvec(&w->alpha, x, a);
    const float *cw = f32_of(&w->conv);
    for (int64_t c = 0; c < ch; c++) {
        double s = 0;
        for (int j = 0; j < K; j++) {
            int back = K - 1 - j;
            if (nl->n - back >= 0) s += (double)cw[c * K + j] * nl->pre[(size_t)(nl->n - back) * ch + c];
        }
        mixed[c] = s * sigm(s);
    }
    double *q = mixed, *k = mixed + Hk * Dk, *v = mixed + 2 * Hk * Dk;
    for (int h = 0; h < Hk; h++) {
        double sq = 0, sk = 0;
        for (int i = 0; i < Dk; i++) sq += q[h * Dk + i] * q[h * Dk + i], sk += k[h * Dk + i] * k[h * Dk + i];
        for (int i = 0; i < Dk; i++) {
            q[h * Dk + i] *= 1 / sqrt(sq + 1e-6) / sqrt((double)Dk);
            k[h * Dk + i] *= 1 / sqrt(sk + 1e-6);
        }
    }
    const float *A = f32_of(&w->a), *dt = f32_of(&w->dt_bias), *nw = f32_of(&w->norm);
    for (int h = 0; h < Hv; h++) {
        const double beta = sigm(b[h]), g = A[h] * log1p(exp(a[h] + dt[h]));
        const double *qh = q + (h % Hk) * Dk, *kh = k + (h % Hk) * Dk, *vh = v + h * Dv;
        double *S = nl->S + (size_t)h * Dk * Dv;
        for (int i = 0; i < Dk * Dv; i++) S[i] *= exp(g);
        for (int j = 0; j < Dv; j++) {
            double kS = 0;
            for (int i = 0; i < Dk; i++) kS += kh[i] * S[i * Dv + j];
            for (int i = 0; i < Dk; i++) S[i * Dv + j] += kh[i] * beta * (vh[j] - kS);
        }
        double ss = 0;
        for (int j = 0; j < Dv; j++) {
            double s = 0;
            for (int i = 0; i < Dk; i++) s += qh[i] * S[i * Dv + j];
            o[h * Dv + j] = s;
            ss += s * s;
        }
        const double inv = 1 / sqrt(ss / Dv + hp->rms_eps);
        for (int j = 0; j < Dv; j++) o[h * Dv + j] *= inv * nw[j] * sigm(z[h * Dv + j]);
    }
    naive_matvec(&w->out, o, y);
    nl->n++;
}

/* cpu_gdn_forward on layer 0 of a synthetic dk × dv model, in calls of 7
 * tokens (chunked), 1 (recurrent), 13 and 1 again, against the naive layer
 * carried across the same tokens. */
static void layer_matches_formulas(int dk, int dv)
{
    char err[256];
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf_gdn_dims("tiny-a", dk, dv), &m, err, sizeof err), 0, "%s", err);
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[0];
    cr_assert_eq(l->kind, MODEL_LAYER_GDN);
    cr_assert(hp->ssm_k_head_dim == dk && hp->ssm_v_head_dim == dv);
    const int64_t C = hp->n_embd;
    const int calls[] = {7, 1, 13, 1}, T = 22;
    struct cpu_layer_consts lc = {.gdn_conv = cpu_dequant_all(&l->gdn.conv), .gdn_dt_bias = cpu_dequant_all(&l->gdn.dt_bias),
                                  .gdn_a = cpu_dequant_all(&l->gdn.a), .gdn_norm = cpu_dequant_all(&l->gdn.norm)};
    struct cpu_layer_state st = {.conv = calloc((size_t)model_gdn_conv_state_floats(hp), sizeof(float)),
                                 .ssm = calloc((size_t)model_gdn_ssm_state_floats(hp), sizeof(float))};
    struct naive_layer nl = {hp, &l->gdn, calloc((size_t)(T * model_gdn_conv_dim(hp)), sizeof(double)),
                             calloc((size_t)model_gdn_ssm_state_floats(hp), sizeof(double)), 0};
    float *x = malloc((size_t)(T * C) * sizeof *x), *y = malloc((size_t)(T * C) * sizeof *y);
    double *want = malloc((size_t)C * sizeof *want);
    for (int64_t i = 0; i < T * C; i++) x[i] = normal();
    double max_d = 0, max_ref = 0;
    for (int ci = 0, t0 = 0; ci < 4; t0 += calls[ci++]) {
        cr_assert_eq(cpu_gdn_forward(hp, &l->gdn, &lc, &st, x + t0 * C, calls[ci], false, y + t0 * C), 0);
        for (int t = t0; t < t0 + calls[ci]; t++) {
            naive_gdn_token(&nl, x + t * C, want);
            for (int64_t i = 0; i < C; i++) {
                max_d = fmax(max_d, fabs(y[t * C + i] - want[i]));
                max_ref = fmax(max_ref, fabs(want[i]));
            }
        }
    }
    cr_log_info("dk %d dv %d: GDN layer max|Δ| %.3g of max|y| %.3g", dk, dv, max_d, max_ref);
    cr_expect_gt(max_ref, 1e-2, "the layer's output is all but zero");
    cr_expect_leq(max_d, 1e-5 * max_ref, "dk %d dv %d: GDN layer off its formulas by %g (max|y| %g)", dk, dv, max_d, max_ref);
    double max_s = 0;
    for (int64_t i = 0; i < model_gdn_ssm_state_floats(hp); i++) max_s = fmax(max_s, fabs(st.ssm[i] - nl.S[i]));
    cr_expect_leq(max_s, 1e-5, "dk %d dv %d: recurrent state off by %g", dk, dv, max_s);
    free(lc.gdn_conv), free(lc.gdn_dt_bias), free(lc.gdn_a), free(lc.gdn_norm);
    free(st.conv), free(st.ssm), free(nl.pre), free(nl.S);
    free(x), free(y), free(want);
    model_close(m);
}

Test(gdn_layer, equal_head_sizes) { layer_matches_formulas(16, 16); }
Test(gdn_layer, values_wider_than_keys) { layer_matches_formulas(16, 24); }
Test(gdn_layer, values_narrower_than_keys) { layer_matches_formulas(24, 16); }
Test(gdn_layer, values_narrower_and_not_dividing) { layer_matches_formulas(16, 12); }
