/* test_rollback.c — verify windows and the return into them on the CPU
 * reference (engine/cpu/rollback.c; issue 16 item 5), on tiny-a and tiny-b
 * (GDN, QSA and the PLE layer):
 *   - a verify window's rows are the decode steps' logits bit for bit;
 *   - truncating into it at every position leaves the state a run that
 *     decoded only that prefix (one token an eval) has: the next tokens'
 *     logits are identical,
 *     and no row was evaluated again (rows evaluated / replayed counters);
 *   - a second truncation further back inside the kept rows works too;
 *   - outside the window (below it, after a plain eval, on a copy) it is
 *     refused with NB_ENOTSUP and the sequence is untouched. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "tests/engine/seq_rig.h"

#define P 20   /* prompt */
#define W 6    /* verify window */
#define NEXT 3 /* tokens decoded after the rollback */

static void open_rig(struct rig *r, const char *name)
{
    rig_open(r, name);
    cr_assert(r->T >= P + W + NEXT, "%s: %d tokens", name, r->T);
}

/* n tokens in one eval (verify or plain), every row's logits into out (may be NULL) */
static void eval_rows(gw_seq *s, const int32_t *tok, int n, bool verify, float *out)
{
    char err[256];
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n, .logits_rows = out ? GW_ROWS_ALL : GW_ROWS_NONE, .logits = out,
                             .verify = verify};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
}

/* n one-token evals, row i's logits into out + i·V */
static void decode(const struct rig *r, gw_seq *s, const int32_t *tok, int n, float *out)
{
    for (int i = 0; i < n; i++) eval_rows(s, tok + i, 1, false, out ? out + (int64_t)i * r->V : NULL);
}

static void window_rows_are_decode_steps(const char *name)
{
    struct rig r;
    open_rig(&r, name);
    gw_seq *a = new_seq(&r), *b = new_seq(&r);
    float *la = malloc((size_t)(W * r.V) * sizeof *la), *lb = malloc((size_t)(W * r.V) * sizeof *lb);
    eval_rows(a, r.tok, P, false, NULL);
    eval_rows(b, r.tok, P, false, NULL);
    eval_rows(a, r.tok + P, W, true, la);
    decode(&r, b, r.tok + P, W, lb);
    for (int i = 0; i < W; i++)
        cr_expect_eq(memcmp(la + (int64_t)i * r.V, lb + (int64_t)i * r.V, (size_t)r.V * sizeof *la), 0,
                     "%s: verify row %d differs from the decode step", name, i);
    free(la), free(lb);
    gw_seq_free(a), gw_seq_free(b);
    rig_close(&r);
}

static void rollback_everywhere(const char *name)
{
    struct rig r;
    open_rig(&r, name);
    char err[256];
    float *la = malloc((size_t)(NEXT * r.V) * sizeof *la), *lb = malloc((size_t)(NEXT * r.V) * sizeof *lb);
    const int32_t *next = r.tok + P + W; /* what is decoded after the accepted prefix */
    for (int j = 0; j <= W; j++) {
        gw_seq *a = new_seq(&r), *b = new_seq(&r);
        eval_rows(a, r.tok, P, false, NULL);
        eval_rows(a, r.tok + P, W, true, NULL);
        const uint64_t ev0 = gw_backend_rows_evaluated(r.be), rp0 = gw_backend_rows_replayed(r.be);
        cr_assert_eq(gw_seq_truncate(a, P + j, err, sizeof err), 0, "%s: truncate to %d: %s", name, P + j, err);
        cr_expect_eq(gw_seq_pos(a), P + j);
        /* (to the window's end: nothing to do, the current length) */
        cr_expect_eq(gw_backend_rows_replayed(r.be) - rp0, (uint64_t)(j < W ? j : 0), "%s: %d positions replayed", name, j);
        cr_expect_eq(gw_backend_rows_evaluated(r.be), ev0, "%s: truncation evaluates nothing", name);
        decode(&r, a, next, NEXT, la);
        eval_rows(b, r.tok, P, false, NULL); /* the run that only ever decoded the accepted prefix */
        decode(&r, b, r.tok + P, j, NULL);
        decode(&r, b, next, NEXT, lb);
        cr_expect_eq(memcmp(la, lb, (size_t)(NEXT * r.V) * sizeof *la), 0,
                     "%s: after a rollback to %d of the window the next logits differ", name, j);
        gw_seq_free(a), gw_seq_free(b);
    }
    free(la), free(lb);
    rig_close(&r);
}

/* the window's rows, then a rollback to each of its positions, on both fixtures */
Test(rollback, window_rows_and_every_position)
{
    static const char *const names[] = {"tiny-a", "tiny-b"};
    for (int i = 0; i < 2; i++) {
        window_rows_are_decode_steps(names[i]);
        rollback_everywhere(names[i]);
    }
}

Test(rollback, twice_then_refusals)
{
    struct rig r;
    open_rig(&r, "tiny-a");
    char err[256];
    float *la = malloc((size_t)(NEXT * r.V) * sizeof *la), *lb = malloc((size_t)(NEXT * r.V) * sizeof *lb);
    gw_seq *a = new_seq(&r), *b = new_seq(&r), *c = new_seq(&r);
    eval_rows(a, r.tok, P, false, NULL);
    eval_rows(a, r.tok + P, W, true, NULL);
    cr_assert_eq(gw_seq_copy(c, a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(gw_seq_truncate(c, P + 2, err, sizeof err), NB_ENOTSUP, "a copy does not take the window");
    cr_expect_eq(gw_seq_truncate(a, P - 1, err, sizeof err), NB_ENOTSUP, "below the window");
    cr_expect(strstr(err, "verify window"), "%s", err);
    cr_expect_eq(gw_seq_pos(a), P + W, "a refused truncation leaves the sequence");
    cr_assert_eq(gw_seq_truncate(a, P + 4, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_truncate(a, P + 1, err, sizeof err), 0, "further back inside the kept rows: %s", err);
    cr_expect_eq(gw_seq_truncate(a, P + 3, err, sizeof err), NB_EINVAL, "past the current length");
    decode(&r, a, r.tok + P + W, NEXT, la);
    eval_rows(b, r.tok, P, false, NULL);
    decode(&r, b, r.tok + P, 1, NULL);
    decode(&r, b, r.tok + P + W, NEXT, lb);
    cr_expect_eq(memcmp(la, lb, (size_t)(NEXT * r.V) * sizeof *la), 0, "two rollbacks: the next logits differ");
    /* after a plain eval the window is gone */
    cr_expect_eq(gw_seq_truncate(a, P + 2, err, sizeof err), NB_ENOTSUP, "after plain evals");
    free(la), free(lb);
    gw_seq_free(a), gw_seq_free(b), gw_seq_free(c);
    rig_close(&r);
}
