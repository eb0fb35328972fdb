/* test_moe_int8.c — how far the opt-in int8 CPU expert kernels
 * (GW_KERNELS_INT8, engine/ffn.h) move a model's logits.
 *
 * Every routed expert is computed outside the backend by the remote hook, as
 * the cpu-moe-worker does, with gw_expert_ffn_many under one kernel set; the
 * logits of the whole fixture sequence (a prefill and 4 decode steps) are
 * compared with the ref kernels' (which are the all-local bits:
 * test_moe_remote.c).  Per model and kernel set: the mean and largest
 * KL(ref ‖ k) over the rows, in nats, and the share of rows whose top-1 token
 * is ref's.  Models: the tiny-a fixture at q8_0 and iq4_nl (Q8_0
 * activations), and tiny-a's shapes widened to 256 (synthetic weights) in the
 * released iq2_xs mix (IQ2_XS gate/up: Q8_K activations; Q2_0 down: Q8_0) and
 * the q4_k_m-like mix (Q4_K: Q8_K; Q5_1 down: Q8_1).  fast must stay within
 * float noise of ref, int8 within the bounds below (measured, with margin:
 * docs/RUNNING.md "int8 CPU experts" has the figures), and int8 must differ
 * from ref (it is not silently fast). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "engine/backend.h"
#include "engine/ffn.h"
#include "tests/core/model_fixture.h"
#include "tests/engine/backend_fixture.h"

struct hook {
    const struct model *m;
    enum gw_kernels k;
    struct gw_expert_scratch s;
    uint64_t pairs;
};

static int remote_fn(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                     const int32_t *experts, const float *weights, float *out, char *err, size_t errlen)
{
    struct hook *h = ctx;
    const struct model_moe *w = &h->m->layers[layer].moe;
    const int64_t C = h->m->hp.n_embd;
    struct gw_expert_job *jobs = malloc((size_t)n_pairs * sizeof *jobs);
    if (!jobs) return -1;
    for (int i = 0; i < n_pairs; i++) {
        const int e = experts[i];
        if (rows[i] < 0 || rows[i] >= n_rows) return free(jobs), -1;
        struct gw_expert ex = {w->gate_exps.data + (size_t)e * w->gate_exps.mat_bytes,
                               w->up_exps.data + (size_t)e * w->up_exps.mat_bytes,
                               w->down_exps.data + (size_t)e * w->down_exps.mat_bytes,
                               w->gate_exps.type, w->up_exps.type, w->down_exps.type, C, w->gate_exps.ne[1]};
        jobs[i] = (struct gw_expert_job){ex, x + (int64_t)rows[i] * C, 1, &weights[i], out + (int64_t)i * C};
    }
    int rc = gw_expert_ffn_many(jobs, n_pairs, h->k, &h->s);
    h->pairs += (uint64_t)n_pairs;
    free(jobs);
    (void)err, (void)errlen;
    return rc ? -1 : 0;
}

/* Logits of tiny-a's sequence (prefill of all but 4 tokens, then 4 decode
 * steps) on gguf with every routed expert remote under kernels k. */
static float *run(const char *gguf, enum gw_kernels k, int *rows_out, int64_t *V_out)
{
    char err[256];
    struct model *m;
    gw_seq *s;
    int T;
    int32_t *tok = fixture_ints("tiny-a", "tokens.txt", &T);
    gw_backend *be = fixture_backend(gguf, &m);
    const size_t LE = (size_t)(m->hp.n_layer + m->hp.n_nextn) * (size_t)m->hp.n_expert;
    uint8_t *local = calloc(LE, 1); /* all remote */
    struct hook h = {m, k, {0}, 0};
    struct gw_moe_remote r = {local, remote_fn, &h};
    cr_assert_eq(gw_backend_set_moe_remote(be, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
    const int64_t V = m->hp.n_vocab;
    const int n1 = T - 4;
    float *logits = malloc((size_t)T * (size_t)V * sizeof *logits);
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n1, .logits_rows = GW_ROWS_ALL, .logits = logits};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    for (int t = n1; t < T; t++) {
        a = (struct gw_eval_args){.tokens = tok + t, .n_tokens = 1, .logits_rows = GW_ROWS_LAST,
                                  .logits = logits + (size_t)t * (size_t)V};
        cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    }
    cr_assert_eq(h.pairs, (uint64_t)m->hp.n_expert_used * (uint64_t)m->hp.n_layer * (uint64_t)T,
                 "every routed pair computed by the hook, once");
    *rows_out = T, *V_out = V;
    gw_seq_free(s);
    gw_backend_free(be);
    model_close(m);
    gw_expert_scratch_free(&h.s);
    free(local);
    free(tok);
    return logits;
}

struct divergence {
    double kl_mean, kl_max, top1; /* nats, nats, share of rows */
};

static int argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int)i;
    return best;
}

/* KL(softmax(p) ‖ softmax(q)) per row in double, and top-1 agreement. */
static struct divergence diverge(const float *p, const float *q, int rows, int64_t V)
{
    struct divergence d = {0, 0, 0};
    int agree = 0;
    for (int r = 0; r < rows; r++) {
        const float *a = p + (size_t)r * (size_t)V, *b = q + (size_t)r * (size_t)V;
        double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
        for (int64_t i = 1; i < V; i++) ma = fmax(ma, a[i]), mb = fmax(mb, b[i]);
        for (int64_t i = 0; i < V; i++) za += exp(a[i] - ma), zb += exp(b[i] - mb);
        for (int64_t i = 0; i < V; i++) {
            const double lpa = a[i] - ma - log(za), lpb = b[i] - mb - log(zb);
            kl += exp(lpa) * (lpa - lpb);
        }
        kl = fmax(kl, 0); /* rounding can make an exact 0 a hair negative */
        d.kl_mean += kl / rows, d.kl_max = fmax(d.kl_max, kl);
        agree += argmax(a, V) == argmax(b, V);
    }
    d.top1 = (double)agree / rows;
    return d;
}

/* ref, fast and int8 on one model: fast within float noise, int8 within
 * (kl_mean_max, top1_min) and not ref's bits. */
static void check_model(const char *what, const char *gguf, double kl_mean_max, double top1_min)
{
    int T, T2;
    int64_t V;
    float *ref = run(gguf, GW_KERNELS_REF, &T, &V);
    float *fast = run(gguf, GW_KERNELS_FAST, &T2, &V);
    float *q8 = run(gguf, GW_KERNELS_INT8, &T2, &V);
    struct divergence f = diverge(ref, fast, T, V), q = diverge(ref, q8, T, V);
    /* The line docs/RUNNING.md quotes (criterion --verbose shows it). */
    cr_log_info("%s: %d rows; fast vs ref: KL mean %.3g max %.3g nats, top-1 %.3f; int8 vs ref: KL mean %.3g max %.3g "
                "nats, top-1 %.3f",
                what, T, f.kl_mean, f.kl_max, f.top1, q.kl_mean, q.kl_max, q.top1);
    cr_assert_leq(f.kl_max, 1e-8, "%s: fast moved the logits by KL %g", what, f.kl_max);
    cr_assert_eq(f.top1, 1.0, "%s: fast changed a top-1 token", what);
    cr_assert_gt(q.kl_max, 0, "%s: int8 gave ref's logits: were any activations quantized?", what);
    cr_assert_leq(q.kl_mean, kl_mean_max, "%s: int8 KL mean %g nats over %g", what, q.kl_mean, kl_mean_max);
    cr_assert_geq(q.top1, top1_min, "%s: int8 top-1 agreement %.3f under %.3f", what, q.top1, top1_min);
    free(ref), free(fast), free(q8);
}

/* tiny-a's shapes widened to 256 (hidden and expert widths: the K and IQ
 * formats' 256-value blocks fit), synthetic weights, converted with opts. */
static const char *wide_model(const char *stem, const char *opts)
{
    static const char *const keys[] = {"hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size"};
    static const int vals[] = {256, 256, 256};
    return fixture_gguf_edited("tiny-a", stem, 3, keys, vals, opts);
}

Test(moe_int8, tiny_a_q8_0) { check_model("tiny-a q8_0", fixture_gguf_typed("tiny-a", "q8_0"), 1e-3, 0.95); }
Test(moe_int8, tiny_a_iq4_nl) { check_model("tiny-a iq4_nl", fixture_gguf_typed("tiny-a", "iq4_nl"), 1e-3, 0.95); }
Test(moe_int8, wide_iq2_xs_mix)
{
    check_model("tiny-a x256 synthetic, iq2_xs mix (IQ2_XS/IQ2_XS/Q2_0)",
                wide_model("tiny-a-w256-synthetic-iq2_xs", "--type iq2_xs"), 1e-3, 0.95);
}
Test(moe_int8, wide_q4_k_mix)
{
    check_model("tiny-a x256 synthetic, mix (Q4_K/Q4_K/Q5_1)", wide_model("tiny-a-w256-synthetic-mix", "--type mix"),
                1e-3, 0.95);
}
