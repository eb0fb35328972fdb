/* test_argmax.c — gw_eval_args.argmax through backend.c for a backend that
 * gives logits only (the CPU reference): each asked row's argmax equals the
 * argmax of the logits the same eval returns, with and without a logits
 * buffer, for the last row and for all rows; asking it for no rows is an
 * error.  (The CUDA backend's own device argmax: tests/cuda/check_backend.c.) */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "tests/core/model_fixture.h"

static int32_t ref_argmax(const float *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

Test(argmax, cpu_rows_match_the_logits)
{
    char err[256] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf("tiny-a"), &m, err, sizeof err), 0, "%s", err);
    int T;
    int32_t *tok = fixture_ints("tiny-a", "tokens.txt", &T);
    const int64_t V = m->hp.n_vocab;
    gw_backend *be;
    cr_assert_eq(gw_backend_create(m, NULL, &be, err, sizeof err), 0, "%s", err);
    gw_seq *s1, *s2;
    cr_assert_eq(gw_seq_create(be, &s1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_create(be, &s2, err, sizeof err), 0, "%s", err);
    float *lg = malloc((size_t)T * V * sizeof *lg);
    int32_t *am = malloc((size_t)T * sizeof *am), *am2 = malloc((size_t)T * sizeof *am2);
    /* all rows, with logits: both filled, consistent */
    struct gw_eval_args a = {.tokens = tok, .n_tokens = T, .logits_rows = GW_ROWS_ALL, .logits = lg, .argmax = am};
    cr_assert_eq(gw_eval(s1, &a, err, sizeof err), 0, "%s", err);
    for (int r = 0; r < T; r++) cr_assert_eq(am[r], ref_argmax(lg + (int64_t)r * V, V), "row %d", r);
    /* all rows without a logits buffer: the same ids */
    struct gw_eval_args b = {.tokens = tok, .n_tokens = T, .logits_rows = GW_ROWS_ALL, .argmax = am2};
    cr_assert_eq(gw_eval(s2, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(memcmp(am, am2, (size_t)T * sizeof *am), 0);
    /* one more token, last row only, no logits */
    int32_t next = -1;
    struct gw_eval_args c = {.tokens = &am[T - 1], .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .argmax = &next};
    cr_assert_eq(gw_eval(s2, &c, err, sizeof err), 0, "%s", err);
    struct gw_eval_args d = {.tokens = &am[T - 1], .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = lg};
    cr_assert_eq(gw_eval(s1, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(next, ref_argmax(lg, V));
    cr_assert_eq(gw_seq_pos(s2), T + 1);
    /* argmax for no rows: refused, nothing evaluated */
    struct gw_eval_args e = {.tokens = tok, .n_tokens = 1, .argmax = &next};
    cr_assert_eq(gw_eval(s2, &e, err, sizeof err), NB_EINVAL);
    cr_assert(strstr(err, "argmax"), "%s", err);
    cr_assert_eq(gw_seq_pos(s2), T + 1);
    gw_seq_free(s1), gw_seq_free(s2);
    gw_backend_free(be);
    free(lg), free(am), free(am2), free(tok);
    model_close(m);
}
