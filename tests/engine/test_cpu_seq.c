/* test_cpu_seq.c — sequence operations and the MTP draft block on the CPU
 * backend: copy, truncate, reset, argument errors; MTP shapes, determinism,
 * batch = row by row, chained drafting = step-by-step drafting, re-drafting
 * from an earlier position.  (transformers has no MTP, so the MTP tests
 * check consistency, not values.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "tests/engine/seq_rig.h"

/* Evaluates tokens; logits of the last row and the wide states of all rows (either may be NULL). */
static void eval(gw_seq *s, const int32_t *tok, int n, float *last_logits, float *wide_all)
{
    char err[256];
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n, .logits_rows = last_logits ? GW_ROWS_LAST : GW_ROWS_NONE,
                             .logits = last_logits, .wide_rows = wide_all ? GW_ROWS_ALL : GW_ROWS_NONE, .wide = wide_all};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* ---------- sequence operations ---------- */

Test(cpu_seq, copy_continues_identically)
{
    struct rig r;
    rig_open(&r, "tiny-a");
    gw_seq *a = new_seq(&r), *b = new_seq(&r);
    float *la = malloc((size_t)r.V * sizeof *la), *lb = malloc((size_t)r.V * sizeof *lb);
    eval(b, r.tok + 100, 5, NULL, NULL); /* b holds other state that the copy must replace */
    eval(a, r.tok, 50, NULL, NULL);
    char err[256];
    cr_assert_eq(gw_seq_copy(b, a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_pos(b), 50);
    for (int p = 50; p < 80; p++) {
        eval(a, r.tok + p, 1, la, NULL);
        eval(b, r.tok + p, 1, lb, NULL);
        cr_assert_eq(memcmp(la, lb, (size_t)r.V * sizeof *la), 0, "position %d", p);
    }
    gw_seq_free(a), gw_seq_free(b);
    free(la), free(lb);
    rig_close(&r);
}

Test(cpu_seq, truncate_and_reset)
{
    struct rig r;
    rig_open(&r, "tiny-a");
    gw_seq *s = new_seq(&r), *fresh = new_seq(&r);
    float *l1 = malloc((size_t)r.V * sizeof *l1), *l2 = malloc((size_t)r.V * sizeof *l2);
    char err[256] = "";
    eval(s, r.tok, 40, NULL, NULL);
    cr_expect_eq(gw_seq_truncate(s, 40, err, sizeof err), 0, "to the current length: a no-op");
    cr_expect_eq(gw_seq_truncate(s, 41, err, sizeof err), NB_EINVAL);
    /* GDN state cannot be rolled back yet: refused, and the sequence is untouched */
    cr_expect_eq(gw_seq_truncate(s, 20, err, sizeof err), NB_ENOTSUP);
    cr_expect(strstr(err, "layer 0"), "%s", err);
    cr_expect_eq(gw_seq_pos(s), 40);
    cr_expect_eq(gw_seq_truncate(s, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq(gw_seq_pos(s), 0);
    eval(s, r.tok + 3, 30, l1, NULL);
    eval(fresh, r.tok + 3, 30, l2, NULL);
    cr_expect_eq(memcmp(l1, l2, (size_t)r.V * sizeof *l1), 0, "truncate(0) leaves no trace");
    gw_seq_reset(s);
    eval(s, r.tok + 3, 30, l1, NULL);
    cr_expect_eq(memcmp(l1, l2, (size_t)r.V * sizeof *l1), 0, "reset leaves no trace");
    gw_seq_free(s), gw_seq_free(fresh);
    free(l1), free(l2);
    rig_close(&r);
}

Test(cpu_seq, bad_arguments_leave_the_sequence_alone)
{
    struct rig r;
    rig_open(&r, "tiny-a");
    gw_seq *s = new_seq(&r);
    char err[256] = "";
    eval(s, r.tok, 10, NULL, NULL);
    int32_t bad[2] = {3, (int32_t)r.V};
    struct gw_eval_args a = {.tokens = bad, .n_tokens = 2};
    cr_expect_eq(gw_eval(s, &a, err, sizeof err), NB_EINVAL);
    cr_expect(strstr(err, "row 1"), "%s", err);
    struct gw_eval_args b = {.tokens = r.tok, .n_tokens = 1, .logits_rows = GW_ROWS_LAST};
    cr_expect_eq(gw_eval(s, &b, err, sizeof err), NB_EINVAL, "logits wanted, no buffer");
    cr_expect_eq(gw_seq_pos(s), 10);
    float w[1];
    struct gw_mtp_args m = {r.tok, w, 1, 0, NULL, NULL, NULL, NULL};
    cr_expect_eq(gw_mtp_eval(s, &m, err, sizeof err), NB_ENOTSUP, "tiny-a has no MTP block");
    gw_seq_free(s);
    rig_close(&r);
}

/* ---------- MTP (tiny-b has an MTP block) ---------- */

#define CTX 40 /* trunk tokens before drafting */

/* A sequence with the trunk run over CTX tokens and the MTP caught up on
 * rows (wide_t, token_{t+1}) at positions t+1, t = 0..CTX-2.  Returns the
 * trunk's wide states (CTX rows) and the catch-up outputs. */
static gw_seq *mtp_ready(const struct rig *r, float *wide, float *logits, float *wide_out)
{
    char err[256];
    gw_seq *s = new_seq(r);
    eval(s, r->tok, CTX, NULL, wide);
    struct gw_mtp_args a = {r->tok + 1, wide, CTX - 1, 1, logits, wide_out, NULL, NULL};
    cr_assert_eq(gw_mtp_eval(s, &a, err, sizeof err), 0, "%s", err);
    return s;
}

Test(cpu_mtp, shapes_and_determinism)
{
    struct rig r;
    rig_open(&r, "tiny-b");
    cr_assert_eq(r.m->hp.n_nextn, 1);
    size_t nw = (size_t)CTX * (size_t)r.wide, nl = (size_t)(CTX - 1) * (size_t)r.V;
    float *wide = malloc(nw * sizeof *wide), *l1 = malloc(nl * sizeof *l1), *l2 = malloc(nl * sizeof *l2);
    float *o1 = calloc(nw, sizeof *o1), *o2 = calloc(nw, sizeof *o2);
    gw_seq *a = mtp_ready(&r, wide, l1, o1), *b = mtp_ready(&r, wide, l2, o2);
    for (size_t i = 0; i < nl; i++) cr_assert(isfinite(l1[i]), "logit %zu", i);
    for (size_t i = 0; i < (size_t)(CTX - 1) * (size_t)r.wide; i++) cr_assert(isfinite(o1[i]), "wide %zu", i);
    cr_expect_gt(max_abs_diff(o1, wide, (size_t)(CTX - 1) * (size_t)r.wide), 1e-3, "the block changes the state");
    for (size_t i = (size_t)(CTX - 1) * (size_t)r.wide; i < nw; i++) cr_assert_eq(o1[i], 0.0f, "no row past n_rows written");
    cr_expect_eq(memcmp(l1, l2, nl * sizeof *l1), 0, "same inputs, same logits");
    cr_expect_eq(memcmp(o1, o2, nw * sizeof *o1), 0, "same inputs, same wide state");
    gw_seq_free(a), gw_seq_free(b);
    free(wide), free(l1), free(l2), free(o1), free(o2);
    rig_close(&r);
}

Test(cpu_mtp, batch_equals_row_by_row)
{
    struct rig r;
    rig_open(&r, "tiny-b");
    char err[256];
    size_t nw = (size_t)CTX * (size_t)r.wide, nl = (size_t)(CTX - 1) * (size_t)r.V;
    float *wide = malloc(nw * sizeof *wide), *lb = malloc(nl * sizeof *lb), *ob = malloc(nw * sizeof *ob);
    float *lr = malloc(nl * sizeof *lr), *orow = malloc(nw * sizeof *orow);
    gw_seq *batch = mtp_ready(&r, wide, lb, ob), *rows = new_seq(&r);
    eval(rows, r.tok, CTX, NULL, NULL);
    for (int t = 0; t < CTX - 1; t++) {
        struct gw_mtp_args a = {r.tok + t + 1, wide + (size_t)t * r.wide, 1, t + 1, lr + (size_t)t * r.V,
                                orow + (size_t)t * r.wide, NULL, NULL};
        cr_assert_eq(gw_mtp_eval(rows, &a, err, sizeof err), 0, "%s", err);
    }
    double dl = max_abs_diff(lb, lr, nl), dw = max_abs_diff(ob, orow, (size_t)(CTX - 1) * (size_t)r.wide);
    cr_expect_leq(dl, 1e-5, "logits differ by %g", dl);
    cr_expect_leq(dw, 1e-5, "wide states differ by %g", dw);
    gw_seq_free(batch), gw_seq_free(rows);
    free(wide), free(lb), free(ob), free(lr), free(orow);
    rig_close(&r);
}

static int argmax(const float *v, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int)i;
    return best;
}

Test(cpu_mtp, chained_drafting_equals_step_by_step)
{
    struct rig r;
    rig_open(&r, "tiny-b");
    char err[256];
    enum { N = 6 };
    size_t nw = (size_t)CTX * (size_t)r.wide;
    float *wide = malloc(nw * sizeof *wide), *lc = malloc((size_t)N * r.V * sizeof *lc);
    float *ls = malloc((size_t)N * r.V * sizeof *ls), *state = malloc((size_t)r.wide * sizeof *state);
    gw_seq *chain = mtp_ready(&r, wide, NULL, NULL), *steps = mtp_ready(&r, wide, NULL, NULL);
    /* draft after the last trunk position: its wide state and the token the trunk would emit */
    const float *h_last = wide + (size_t)(CTX - 1) * r.wide;
    int32_t t0 = r.tok[CTX], drafted[N], by_hand[N];
    cr_assert_eq(gw_mtp_draft(chain, t0, h_last, CTX, N, drafted, lc, err, sizeof err), 0, "%s", err);
    memcpy(state, h_last, (size_t)r.wide * sizeof *state);
    int32_t tok = t0;
    for (int i = 0; i < N; i++) {
        struct gw_mtp_args a = {&tok, state, 1, CTX + i, ls + (size_t)i * r.V, state, NULL, NULL};
        cr_assert_eq(gw_mtp_eval(steps, &a, err, sizeof err), 0, "%s", err);
        tok = by_hand[i] = argmax(ls + (size_t)i * r.V, r.V);
    }
    for (int i = 0; i < N; i++) cr_expect_eq(drafted[i], by_hand[i], "draft token %d", i);
    cr_expect_eq(memcmp(lc, ls, (size_t)N * r.V * sizeof *lc), 0);
    /* re-drafting from the same position drops the previous draft's entries first */
    int32_t again[N];
    float *la = malloc((size_t)N * r.V * sizeof *la);
    cr_assert_eq(gw_mtp_draft(chain, t0, h_last, CTX, N, again, la, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(again, drafted, sizeof again), 0);
    cr_expect_eq(memcmp(la, lc, (size_t)N * r.V * sizeof *la), 0);
    /* ... and a draft from an earlier position differs (it sees less context) */
    cr_assert_eq(gw_mtp_draft(chain, t0, h_last, CTX - 5, N, again, la, err, sizeof err), 0, "%s", err);
    cr_expect_gt(max_abs_diff(la, lc, (size_t)r.V), 1e-6);
    gw_seq_free(chain), gw_seq_free(steps);
    free(wide), free(lc), free(ls), free(state), free(la);
    rig_close(&r);
}

/* The published layout: the MTP block in a file of its own (nebula-convert
 * --mtp-out, as Unsloth ships MTP/mtp-*.gguf), bound with model_open_mtp,
 * drafts exactly as the same block inside the model file does; the main file
 * alone (it declares the block without its tensors) loads without MTP. */
Test(cpu_mtp, separate_file_equals_in_file, .timeout = 120)
{
    struct rig in, sep = {0};
    rig_open(&in, "tiny-b");
    const char *mtp = "build/fixtures/tiny-b-f32-mtp-only.gguf";
    const char *main_path = fixture_converted("tiny-b-f32-mtp-separate", "tests/fixtures/tiny-b",
                                              "--type f32 --mtp-out build/fixtures/tiny-b-f32-mtp-only.gguf");
    char err[512];
    struct model *alone;
    cr_assert_eq(model_open(main_path, &alone, err, sizeof err), 0, "%s", err);
    cr_expect_eq(alone->hp.n_nextn, 0, "the main file holds no MTP block");
    cr_expect(alone->nextn_declared_absent);
    model_close(alone);
    cr_assert_eq(model_open_mtp(main_path, mtp, &sep.m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(sep.m->hp.n_nextn, 1);
    cr_assert_eq(gw_backend_create(sep.m, NULL, &sep.be, err, sizeof err), 0, "%s", err);
    sep.tok = fixture_ints("tiny-b", "tokens.txt", &sep.T);
    sep.V = sep.m->hp.n_vocab, sep.wide = model_wide(&sep.m->hp);
    size_t nw = (size_t)CTX * (size_t)in.wide, nl = (size_t)(CTX - 1) * (size_t)in.V;
    float *w1 = malloc(nw * sizeof *w1), *w2 = malloc(nw * sizeof *w2), *l1 = malloc(nl * sizeof *l1);
    float *l2 = malloc(nl * sizeof *l2), *o1 = calloc(nw, sizeof *o1), *o2 = calloc(nw, sizeof *o2);
    gw_seq *a = mtp_ready(&in, w1, l1, o1), *b = mtp_ready(&sep, w2, l2, o2);
    cr_expect_eq(memcmp(w1, w2, nw * sizeof *w1), 0, "same trunk");
    cr_expect_eq(memcmp(l1, l2, nl * sizeof *l1), 0, "same MTP logits");
    cr_expect_eq(memcmp(o1, o2, nw * sizeof *o1), 0, "same MTP wide state");
    gw_seq_free(a), gw_seq_free(b);
    free(w1), free(w2), free(l1), free(l2), free(o1), free(o2);
    rig_close(&sep);
    rig_close(&in);
}
