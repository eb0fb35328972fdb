/* test_cpu_backend.c — the CPU reference backend against transformers.
 *
 * For every fixture (tiny-a, tiny-b, tiny-b-vl: float64 transformers runs,
 * docs/CONVERSION.md §7): the full-sequence logits, a prefill of k tokens
 * followed by one-token decode steps for several k, and the greedy
 * continuation.  Bound: max|Δ| ≤ 2e-4 · max|ref| over all positions, and the
 * argmax equal wherever the reference's top-2 gap exceeds 1e-3.  The wide
 * residual after each layer (layer_out.f32) is compared as a diagnostic: the
 * first layer that drifts is named.  Quantized conversions are checked
 * against their own dequantized f32 copy (the reference must use every
 * format exactly as its decoder defines it).  Models with GDN key and value
 * heads of different sizes are checked against transformers on the sweep
 * fixtures that have them and, for more size pairs, for self-consistency
 * (one batch = prefill + decode = chunked prefill).  MTP and
 * sequence operations: test_cpu_mtp.c. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "engine/cpu/cpu.h"
#include "tests/core/model_fixture.h"
#include "tests/engine/backend_fixture.h"
#include "tests/core/tmpfiles.h"

#define REL_BOUND 2e-4
#define GAP_BAND 1e-3

struct fx {
    const char *name;
    struct model *m;
    gw_backend *be;
    int32_t *tok;
    int T;
    int64_t V;
    float *ref, *gap;
    double ref_max;
};

static void fx_open_path(struct fx *f, const char *name, const char *gguf)
{
    char err[256];
    memset(f, 0, sizeof *f);
    f->name = name;
    cr_assert_eq(model_open(gguf, &f->m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_backend_create(f->m, NULL, &f->be, err, sizeof err), 0, "%s", err);
    f->tok = fixture_ints(name, "tokens.txt", &f->T);
    f->V = f->m->hp.n_vocab;
    size_t n, ng;
    f->ref = fixture_f32(name, "logits.f32", &n);
    f->gap = fixture_f32(name, "top2_gap.f32", &ng);
    cr_assert_eq(n, (size_t)f->T * (size_t)f->V, "logits.f32 is %zu floats for %d × %lld", n, f->T, (long long)f->V);
    cr_assert_eq(ng, (size_t)f->T);
    for (size_t i = 0; i < n; i++) f->ref_max = fmax(f->ref_max, fabs(f->ref[i]));
}

static void fx_open(struct fx *f, const char *name) { fx_open_path(f, name, fixture_gguf(name)); }

static void fx_close(struct fx *f)
{
    gw_backend_free(f->be);
    model_close(f->m);
    free(f->tok), free(f->ref), free(f->gap);
}

static gw_seq *new_seq(const struct fx *f)
{
    char err[256];
    gw_seq *s;
    cr_assert_eq(gw_seq_create(f->be, &s, err, sizeof err), 0, "%s", err);
    return s;
}

static void eval(gw_seq *s, const int32_t *tok, int n, enum gw_rows rows, float *logits)
{
    char err[256];
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n, .logits_rows = rows, .logits = logits};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
}

static int argmax(const float *v, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int)i;
    return best;
}

/* Agreement of logits rows with reference rows. */
struct agreement {
    double max_d;
    int worst;      /* position of max_d */
    int gated, bad; /* positions with top-2 gap > band, and argmax disagreements among them */
};

static void compare_rows(const float *got, const float *ref, const float *gap, int pos0, int n, int64_t V,
                         struct agreement *ag)
{
    for (int r = 0; r < n; r++) {
        const float *g = got + (int64_t)r * V, *e = ref + (int64_t)r * V;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)g[v] - e[v]);
            if (d > ag->max_d) ag->max_d = d, ag->worst = pos0 + r;
        }
        if (gap[r] > GAP_BAND) {
            ag->gated++;
            ag->bad += argmax(g, V) != argmax(e, V);
        }
    }
}

static void expect_agreement(const struct fx *f, const struct agreement *ag, const char *what)
{
    cr_log_info("%s %s: max|Δ|/max|ref| = %.3g (max|Δ| %.3g, max|ref| %.3g, worst position %d), argmax %d/%d", f->name,
                what, ag->max_d / f->ref_max, ag->max_d, f->ref_max, ag->worst, ag->gated - ag->bad, ag->gated);
    cr_expect_leq(ag->max_d, REL_BOUND * f->ref_max, "%s %s: max|Δ| %g at position %d exceeds %g", f->name, what,
                  ag->max_d, ag->worst, REL_BOUND * f->ref_max);
    cr_expect_eq(ag->bad, 0, "%s %s: argmax differs at %d of %d positions with a top-2 gap > %g", f->name, what,
                 ag->bad, ag->gated, GAP_BAND);
}

/* ---------- the fixture is what the test claims to cover ---------- */

static void expect_fixture_coverage(const struct fx *f, int min_tokens)
{
    cr_assert_geq(f->T, min_tokens, "%s has only %d tokens", f->name, f->T);
    int after_eos = 0;
    for (int p = 1; p < f->T; p++) after_eos += f->tok[p - 1] == f->m->hp.ple_eos;
    cr_assert_gt(after_eos, 0, "%s: no position right after an EOS", f->name);
    size_t n;
    unsigned char *sel = fixture_read(f->name, "qsa_select.u8", &n);
    int sparse = 0;
    for (size_t row = 0; row < n / (size_t)f->T; row++) {
        int p = (int)(row % (size_t)f->T);
        for (int j = 0; j <= p; j++) sparse += !sel[row * (size_t)f->T + (size_t)j];
    }
    cr_assert_gt(sparse, 0, "%s: QSA never drops a token", f->name);
    free(sel);
}

/* ---------- full sequence, with the per-layer diagnostic ---------- */

struct layer_diag {
    const float *layer_out; /* L × T × nC */
    int T;
    int64_t wide;
    double max_d[64], max_ref[64];
};

static void tap_layer(void *ctx, int layer, int T, const float *X)
{
    struct layer_diag *d = ctx;
    const float *ref = d->layer_out + (size_t)layer * (size_t)d->T * (size_t)d->wide;
    for (int64_t i = 0; i < (int64_t)T * d->wide; i++) {
        d->max_d[layer] = fmax(d->max_d[layer], fabs((double)X[i] - ref[i]));
        d->max_ref[layer] = fmax(d->max_ref[layer], fabs(ref[i]));
    }
}

/* rows: the reference rows held to (all, or those before the first QSA tie:
 * fixture_first_tie_row).  The per-layer diagnostic runs where the fixture
 * has layer_out.f32 (the sweep's leave it out to stay small). */
static void full_sequence_rows(const char *name, int min_tokens, int rows)
{
    struct fx f;
    fx_open(&f, name);
    expect_fixture_coverage(&f, min_tokens);
    if (rows > f.T) rows = f.T;
    size_t n;
    struct layer_diag diag = {.T = f.T, .wide = model_wide(&f.m->hp)};
    char diag_path[256];
    snprintf(diag_path, sizeof diag_path, "tests/fixtures/%s/layer_out.f32", name);
    const bool has_diag = access(diag_path, R_OK) == 0;
    if (has_diag) {
        diag.layer_out = fixture_f32(name, "layer_out.f32", &n);
        cr_assert_eq(n, (size_t)f.m->hp.n_layer * (size_t)f.T * (size_t)diag.wide);
    }
    float *logits = malloc((size_t)f.T * (size_t)f.V * sizeof *logits);
    gw_seq *s = new_seq(&f);
    char err[256];
    struct gw_eval_args a = {.tokens = f.tok, .n_tokens = f.T, .logits_rows = GW_ROWS_ALL, .logits = logits,
                             .tap = has_diag ? tap_layer : NULL, .tap_ctx = &diag};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    int first_bad = -1;
    for (int l = 0; has_diag && l < f.m->hp.n_layer; l++) {
        cr_log_info("%s layer %d: wide residual max|Δ| %.3g (max|ref| %.3g)", name, l, diag.max_d[l], diag.max_ref[l]);
        if (first_bad < 0 && diag.max_d[l] > REL_BOUND * diag.max_ref[l]) first_bad = l;
    }
    struct agreement ag = {0};
    compare_rows(logits, f.ref, f.gap, 0, rows, f.V, &ag);
    expect_agreement(&f, &ag, rows < f.T ? "full sequence before the first QSA tie" : "full sequence");
    cr_expect_eq(first_bad, -1, "%s: the wide residual first drifts after layer %d", name, first_bad);
    gw_seq_free(s);
    free(logits);
    free((void *)diag.layer_out);
    fx_close(&f);
}

static void full_sequence(const char *name) { full_sequence_rows(name, 128, INT32_MAX); }

Test(cpu_fixture, full_sequence_tiny_a) { full_sequence("tiny-a"); }
Test(cpu_fixture, full_sequence_tiny_b) { full_sequence("tiny-b"); }
Test(cpu_fixture, full_sequence_tiny_b_vl) { full_sequence("tiny-b-vl"); }

/* ---------- prefill k, then decode one token at a time ---------- */

static void prefill_then_decode(const char *name)
{
    struct fx f;
    fx_open(&f, name);
    int cr = 0;
    for (int i = 0; i < f.m->hp.n_layer; i++)
        if (f.m->layers[i].compress_ratio > cr) cr = f.m->layers[i].compress_ratio;
    cr_assert_gt(cr, 1);
    /* 1; a multiple of the indexer block; a non-multiple; all but the last */
    const int ks[] = {1, 8 * cr, 8 * cr + cr / 2 + 1, f.T - 1};
    float *logits = malloc((size_t)f.T * (size_t)f.V * sizeof *logits);
    for (int i = 0; i < 4; i++) {
        int k = ks[i];
        gw_seq *s = new_seq(&f);
        eval(s, f.tok, k, GW_ROWS_ALL, logits);
        for (int p = k; p < f.T; p++) eval(s, f.tok + p, 1, GW_ROWS_LAST, logits + (int64_t)p * f.V);
        cr_expect_eq(gw_seq_pos(s), f.T);
        struct agreement ag = {0};
        compare_rows(logits, f.ref, f.gap, 0, f.T, f.V, &ag);
        char what[64];
        snprintf(what, sizeof what, "prefill %d + decode %d", k, f.T - k);
        expect_agreement(&f, &ag, what);
        gw_seq_free(s);
    }
    free(logits);
    fx_close(&f);
}

Test(cpu_fixture, prefill_then_decode_tiny_a, .timeout = 120) { prefill_then_decode("tiny-a"); }
Test(cpu_fixture, prefill_then_decode_tiny_b, .timeout = 120) { prefill_then_decode("tiny-b"); }

/* Two prefill chunks (not one batch) must give the same rows as one batch. */
Test(cpu_fixture, chunked_prefill_tiny_a)
{
    struct fx f;
    fx_open(&f, "tiny-a");
    float *logits = malloc((size_t)f.T * (size_t)f.V * sizeof *logits);
    gw_seq *s = new_seq(&f);
    const int cuts[] = {0, 70, 71, 135, f.T};
    for (int i = 0; i + 1 < 5; i++)
        eval(s, f.tok + cuts[i], cuts[i + 1] - cuts[i], GW_ROWS_ALL, logits + (int64_t)cuts[i] * f.V);
    struct agreement ag = {0};
    compare_rows(logits, f.ref, f.gap, 0, f.T, f.V, &ag);
    expect_agreement(&f, &ag, "prefill in 4 chunks");
    gw_seq_free(s);
    free(logits);
    fx_close(&f);
}

/* ---------- greedy continuation ---------- */

static void greedy(const char *name)
{
    struct fx f;
    fx_open(&f, name);
    int n_new, prefix = fixture_prefix_len(name);
    int32_t *want = fixture_ints(name, "greedy.txt", &n_new);
    size_t n;
    float *want_logits = fixture_f32(name, "greedy_logits.f32", &n);
    cr_assert_geq(n_new, 24);
    cr_assert_eq(n, (size_t)n_new * (size_t)f.V);
    float *logits = malloc((size_t)n_new * (size_t)f.V * sizeof *logits);
    float *gaps = malloc((size_t)n_new * sizeof *gaps);
    for (int i = 0; i < n_new; i++) gaps[i] = 1; /* every greedy step must pick the same token */
    gw_seq *s = new_seq(&f);
    eval(s, f.tok, prefix, GW_ROWS_LAST, logits);
    int32_t got[256];
    for (int i = 0; i < n_new; i++) {
        got[i] = argmax(logits + (int64_t)i * f.V, f.V);
        if (i + 1 < n_new) eval(s, &got[i], 1, GW_ROWS_LAST, logits + (int64_t)(i + 1) * f.V);
    }
    for (int i = 0; i < n_new; i++) cr_expect_eq(got[i], want[i], "%s greedy token %d: %d, want %d", name, i, got[i], want[i]);
    struct agreement ag = {0};
    compare_rows(logits, want_logits, gaps, prefix, n_new, f.V, &ag);
    expect_agreement(&f, &ag, "greedy decode logits");
    gw_seq_free(s);
    free(logits), free(gaps), free(want), free(want_logits);
    fx_close(&f);
}

Test(cpu_fixture, greedy_tiny_a) { greedy("tiny-a"); }
Test(cpu_fixture, greedy_tiny_b) { greedy("tiny-b"); }

/* ---------- the n-gram hash ---------- */

static void ple_rows(const char *name)
{
    struct fx f;
    fx_open(&f, name);
    const struct model_hparams *hp = &f.m->hp;
    int n;
    int32_t *want = fixture_ints(name, "ple_ids.txt", &n);
    cr_assert_eq(n, f.T * hp->ple_n_heads);
    for (int p = 0; p < f.T; p++) {
        int64_t rows[MODEL_PLE_MAX_HEADS];
        cpu_ple_rows(hp, f.tok, p, rows);
        for (int h = 0; h < hp->ple_n_heads; h++)
            cr_expect_eq(rows[h], want[p * hp->ple_n_heads + h], "%s position %d head %d", name, p, h);
    }
    free(want);
    fx_close(&f);
}

Test(cpu_fixture, ple_rows_tiny_a) { ple_rows("tiny-a"); }
Test(cpu_fixture, ple_rows_tiny_b) { ple_rows("tiny-b"); }

/* ---------- quantized files: exactly their decoders' values ---------- */

static bool to_f32(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (t->type == QT_F32) return true;
    t->data = fx_dequant(gguf_find_tensor(g, t->name));
    t->owned = true;
    t->type = QT_F32;
    return true;
}

/* The model at qpath (of fixture name) against its copy with every tensor
 * dequantized to f32: the same logits within float tolerance. */
static void same_as_dequantized(const char *name, const char *qpath, const char *what)
{
    const char *fpath = tmp_path("dequantized.gguf");
    struct fx_edits ed = {.edit_tensor = to_f32};
    fx_gguf_copy(qpath, fpath, &ed);
    struct fx q, d;
    fx_open_path(&q, name, qpath);
    fx_open_path(&d, name, fpath);
    int n_other = 0; /* tensors not in f32 */
    for (int64_t i = 0; i < gguf_tensor_count(q.m->gguf); i++) n_other += gguf_tensor_at(q.m->gguf, i)->type != QT_F32;
    cr_assert_gt(n_other, 0, "%s %s has only f32 tensors", name, what);
    float *lq = malloc((size_t)q.T * (size_t)q.V * sizeof *lq), *ld = malloc((size_t)q.T * (size_t)q.V * sizeof *ld);
    gw_seq *sq = new_seq(&q), *sd = new_seq(&d);
    eval(sq, q.tok, q.T, GW_ROWS_ALL, lq);
    eval(sd, d.tok, d.T, GW_ROWS_ALL, ld);
    double max_d = 0, max_ref = 0;
    for (size_t i = 0; i < (size_t)q.T * (size_t)q.V; i++) {
        max_d = fmax(max_d, fabs((double)lq[i] - ld[i]));
        max_ref = fmax(max_ref, fabs(ld[i]));
    }
    cr_log_info("%s %s (%d tensors not f32) vs its dequantized copy: max|Δ| %.3g of %.3g", name, what, n_other, max_d,
                max_ref);
    cr_expect_leq(max_d, 1e-6 * max_ref, "%s %s", name, what);
    gw_seq_free(sq), gw_seq_free(sd);
    free(lq), free(ld);
    fx_close(&q), fx_close(&d);
}

static void quantized(const char *name, const char *type)
{
    char what[64];
    snprintf(what, sizeof what, "--type %s", type);
    same_as_dequantized(name, fixture_gguf_typed(name, type), what);
}

/* Every tensor whose rows are whole blocks of `type` re-encoded in it by
 * core/quant (1-D tensors too when `all`): any type the loader can decode
 * is accepted for any tensor, and the CPU backend runs it. */
struct retype {
    enum quant_type type;
    bool all;
};

static bool retype_tensor(struct fx_tensor *t, const gguf_file *g, void *vctx)
{
    const struct retype *r = vctx;
    const struct quant_traits *q = quant_traits_of(r->type);
    if (t->ne[0] % q->blck_size || (t->n_dims == 1 && !r->all)) return true;
    float *f = fx_dequant(gguf_find_tensor(g, t->name));
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t rb = quant_row_size(r->type, t->ne[0]);
    uint8_t *out = malloc(rb * (size_t)rows);
    for (int64_t i = 0; i < rows; i++) q->from_float(f + i * t->ne[0], out + (size_t)i * rb, t->ne[0]);
    free(f);
    t->data = out, t->owned = true, t->type = r->type;
    return true;
}

static void retyped(const char *name, enum quant_type type, bool all)
{
    struct retype r = {type, all};
    struct fx_edits ed = {.edit_tensor = retype_tensor, .ctx = &r};
    char what[64];
    snprintf(what, sizeof what, "retyped to %s%s", quant_type_name(type), all ? " (1-D tensors too)" : "");
    const char *qpath = tmp_path("retyped.gguf");
    fx_gguf_copy(fixture_gguf(name), qpath, &ed);
    same_as_dequantized(name, qpath, what);
}

TestSuite(cpu_quant, .init = tmp_setup, .fini = tmp_teardown);
Test(cpu_quant, q8_0_tiny_a) { quantized("tiny-a", "q8_0"); }
Test(cpu_quant, mix_tiny_a) { quantized("tiny-a", "mix"); }
Test(cpu_quant, mix_tiny_b) { quantized("tiny-b", "mix"); }
Test(cpu_quant, bf16_tiny_b) { quantized("tiny-b", "bf16"); }
Test(cpu_quant, f16_every_tensor_tiny_b) { retyped("tiny-b", QT_F16, true); }

/* Every block format core/quant writes, in every tensor its rows fit. */
static const enum quant_type retype_formats[] = {
    QT_Q4_0, QT_Q4_1, QT_Q5_0,  QT_Q5_1,  QT_Q8_0,  QT_Q2_K, QT_Q3_K, QT_Q4_K,    QT_Q5_K,   QT_Q6_K,  QT_IQ4_NL,
    QT_IQ4_XS, QT_TQ1_0, QT_TQ2_0, QT_MXFP4, QT_NVFP4, QT_Q1_0, QT_Q2_0, QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S,
    QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S, QT_IQ1_M,
};

ParameterizedTestParameters(cpu_quant, every_format_tiny_a)
{
    return cr_make_param_array(enum quant_type, (void *)retype_formats, sizeof retype_formats / sizeof retype_formats[0]);
}

ParameterizedTest(enum quant_type *t, cpu_quant, every_format_tiny_a, .timeout = 120) { retyped("tiny-a", *t, false); }

/* ---------- the sweep: random legal configurations (make_sweep.py) ----------
 *
 * Every fixture under tests/fixtures/sweep: the full sequence, prefill +
 * decode splits, the greedy continuation and the n-gram rows, as above.  A
 * fixture that keeps QSA boundary ties (case-qsa-b6r2-ties) is held to the
 * rows before its first tie only — transformers' torch.topk breaks the tie
 * in an unspecified order (docs/PARITY.md) — and it must list at least one
 * such row, or it no longer shows what it is for. */

static void sweep_params_free(struct criterion_test_params *p) { cr_free(p->params); }

ParameterizedTestParameters(cpu_sweep, full_sequence)
{
    size_t n;
    struct sweep_fixture *p = sweep_fixtures(&n);
    return cr_make_param_array(struct sweep_fixture, p, n, sweep_params_free);
}

ParameterizedTest(struct sweep_fixture *p, cpu_sweep, full_sequence, .timeout = 120)
{
    int tie = fixture_first_tie_row(p->name);
    if (strstr(p->name, "-ties")) cr_assert_lt(tie, INT32_MAX, "%s lists no QSA boundary tie", p->name);
    full_sequence_rows(p->name, 64, tie);
}

ParameterizedTestParameters(cpu_sweep, prefill_decode_greedy)
{
    size_t n;
    struct sweep_fixture *p = sweep_fixtures(&n);
    return cr_make_param_array(struct sweep_fixture, p, n, sweep_params_free);
}

/* Splits, greedy and n-gram rows need every row of the reference: a fixture
 * with QSA ties has only its full-sequence rows before the tie (above). */
ParameterizedTest(struct sweep_fixture *p, cpu_sweep, prefill_decode_greedy, .timeout = 240)
{
    if (fixture_first_tie_row(p->name) < INT32_MAX) {
        cr_log_info("%s: rows after a QSA boundary tie have no reference (full_sequence checks the rows before)",
                    p->name);
        return;
    }
    prefill_then_decode(p->name);
    greedy(p->name);
    ple_rows(p->name);
}

/* ---------- dk ≠ dv: no transformers reference here, so self-consistency ----------
 * Synthetic models of tiny-a's shapes with GDN key and value heads of
 * different sizes (fixture_gguf_gdn_dims; the GDN layer itself is checked
 * against its formulas in tests/engine/cpu/test_gdn.c): the whole
 * prompt in one batch, prefill k + one-token decode (the recurrent form from
 * a chunked state), and a prefill in uneven chunks must give the same logits. */
#define SELF_BOUND 1e-5

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d; /* NaN counts as the largest error */
        mr = fmax(mr, fabs(b[i]));
    }
    return md / mr;
}

static void gdn_dims_self_consistent(int dk, int dv)
{
    char err[256];
    struct model *m;
    gw_backend *be;
    be = fixture_backend(fixture_gguf_gdn_dims("tiny-a", dk, dv), &m);
    int T;
    int32_t *tok = fixture_ints("tiny-a", "tokens.txt", &T);
    const int64_t V = m->hp.n_vocab;
    const size_t n = (size_t)T * (size_t)V;
    float *full = malloc(n * sizeof *full), *got = malloc(n * sizeof *got);
    gw_seq *s;
    cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
    eval(s, tok, T, GW_ROWS_ALL, full);
    gw_seq_free(s);
    const int ks[] = {1, 37, 64, T - 1};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
        eval(s, tok, ks[i], GW_ROWS_ALL, got);
        for (int p = ks[i]; p < T; p++) eval(s, tok + p, 1, GW_ROWS_LAST, got + (int64_t)p * V);
        double d = max_rel_diff(got, full, n);
        cr_log_info("dk %d dv %d: prefill %d + decode %d vs one batch: max|Δ|/max|ref| %.3g", dk, dv, ks[i], T - ks[i], d);
        cr_expect_leq(d, SELF_BOUND, "dk %d dv %d: prefill %d + decode: %g", dk, dv, ks[i], d);
        gw_seq_free(s);
    }
    const int cuts[] = {0, 70, 71, 135, T};
    cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
    for (int i = 0; i + 1 < 5; i++) eval(s, tok + cuts[i], cuts[i + 1] - cuts[i], GW_ROWS_ALL, got + (int64_t)cuts[i] * V);
    double d = max_rel_diff(got, full, n);
    cr_log_info("dk %d dv %d: prefill in 4 chunks vs one batch: max|Δ|/max|ref| %.3g", dk, dv, d);
    cr_expect_leq(d, SELF_BOUND, "dk %d dv %d: chunked prefill: %g", dk, dv, d);
    gw_seq_free(s);
    free(full), free(got), free(tok);
    gw_backend_free(be);
    model_close(m);
}

Test(cpu_gdn_dims, values_wider_than_keys, .timeout = 120) { gdn_dims_self_consistent(16, 24); }
Test(cpu_gdn_dims, values_narrower_than_keys, .timeout = 120) { gdn_dims_self_consistent(24, 16); }
Test(cpu_gdn_dims, values_narrower_and_not_dividing, .timeout = 120) { gdn_dims_self_consistent(16, 12); }
