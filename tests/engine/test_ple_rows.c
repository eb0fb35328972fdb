/* test_ple_rows.c — the PLE table's rows supplied by a hook (the table on SSD).
 *
 * The hook answers from the GGUF's own row bytes with the table type's
 * to_float, the way the gpu-worker answers from the pager's staging (ple.bin
 * holds the GGUF rows unchanged).  The logits must equal the no-hook run bit
 * for bit, the hook must be called once per eval and see exactly the rows of
 * the fixture's ple_ids.txt (per token, every head), a hook that answers a
 * different row must change the logits (it is really used), and a failing
 * hook fails the eval. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "tests/core/model_fixture.h"
#include "tests/engine/backend_fixture.h"

enum hook_mode { HOOK_NONE, HOOK_EXACT, HOOK_SHIFTED, HOOK_FAIL, HOOK_HOST };

struct ple_ctx {
    const struct model *m;
    enum hook_mode mode;
    int64_t *seen; /* every row asked for, in call order */
    int n_seen, cap_seen, calls;
    struct gw_ple_host host; /* HOOK_HOST: the table detached from the model, served by gw_ple_host_rows */
};

static int ple_fn(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen)
{
    struct ple_ctx *p = ctx;
    const struct model_tensor *t = &p->m->ple_table;
    p->calls++;
    if (p->mode == HOOK_FAIL) return nb_errf(err, errlen, NB_EIO, "ple rows: the test says no");
    for (int i = 0; i < n_rows; i++) {
        cr_assert(p->n_seen < p->cap_seen, "more PLE rows asked for than the fixture has");
        p->seen[p->n_seen++] = rows[i];
        int64_t r = p->mode == HOOK_SHIFTED && i == 0 ? (rows[i] + 1) % t->ne[1] : rows[i];
        t->qt->to_float(t->data + (size_t)r * t->row_bytes, out + (int64_t)i * t->ne[0], t->ne[0]);
    }
    return 0;
}

/* Logits of the fixture sequence (prefill in two chunks, then one token at a
 * time) with the given hook mode; returns the eval status of the first
 * failing eval in *fail_rc (0 when all succeeded). */
static float *run(const char *gguf, const char *name, struct ple_ctx *pc, int *T_out, int64_t *V_out, int *fail_rc)
{
    char err[256];
    struct model *m;
    gw_backend *be = fixture_backend(gguf, &m);
    int T;
    int32_t *tok = fixture_ints(name, "tokens.txt", &T);
    gw_seq *s;
    pc->m = m;
    pc->cap_seen = T * m->hp.ple_n_heads;
    pc->seen = calloc((size_t)pc->cap_seen, sizeof *pc->seen);
    if (pc->mode == HOOK_HOST) { /* as a cuda gpu-worker does before its backend exists: the model keeps no table */
        gw_ple_host_detach(m, &pc->host);
        cr_assert_null(m->ple_table.data);
        struct gw_ple_rows r = {gw_ple_host_rows, &pc->host};
        cr_assert_eq(gw_backend_set_ple_rows(be, &r, err, sizeof err), 0, "%s", err);
    } else if (pc->mode != HOOK_NONE) {
        struct gw_ple_rows r = {ple_fn, pc};
        cr_assert_eq(gw_backend_set_ple_rows(be, &r, err, sizeof err), 0, "%s", err);
    }
    cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
    const int64_t V = m->hp.n_vocab;
    float *logits = malloc((size_t)T * V * sizeof *logits);
    const int n1 = T / 3, n2 = T - 2 - n1;
    int at = 0;
    *fail_rc = 0;
    for (int chunk = 0; at < T && *fail_rc == 0; chunk++) {
        int n = chunk == 0 ? n1 : chunk == 1 ? n2 : 1;
        struct gw_eval_args a = {.tokens = tok + at, .n_tokens = n, .logits_rows = GW_ROWS_ALL,
                                 .logits = logits + (size_t)at * V};
        *fail_rc = gw_eval(s, &a, err, sizeof err);
        at += n;
    }
    *T_out = T;
    *V_out = V;
    gw_seq_free(s);
    gw_backend_free(be);
    model_close(m);
    free(tok);
    return logits;
}

/* The fixture's logits without a hook and with `hook` (its mode set): each
 * row bit for bit the no-hook run's; returns the hook-side T. */
static int same_as_no_hook(const char *name, const char *type, struct ple_ctx *hook)
{
    const char *gguf = fixture_gguf_typed(name, type);
    struct ple_ctx ref_ctx = {.mode = HOOK_NONE};
    int T, T1, frc;
    int64_t V;
    float *ref = run(gguf, name, &ref_ctx, &T, &V, &frc);
    cr_assert_eq(frc, 0);
    float *got = run(gguf, name, hook, &T1, &V, &frc);
    cr_assert_eq(frc, 0);
    cr_assert_eq(T1, T);
    for (int64_t i = 0; i < (int64_t)T * V; i++)
        cr_assert(memcmp(&ref[i], &got[i], sizeof *ref) == 0, "%s %s: row %lld differs (%.9g vs %.9g)", name, type,
                  (long long)(i / V), ref[i], got[i]);
    free(ref), free(got), free(ref_ctx.seen);
    return T;
}

static void check_exact(const char *name, const char *type)
{
    struct ple_ctx hook = {.mode = HOOK_EXACT};
    const int T = same_as_no_hook(name, type, &hook);
    cr_assert_eq(hook.calls, T - 2 - T / 3 > 0 ? 4 : 3, "%s: one hook call per eval (got %d)", name, hook.calls);
    int n_ids;
    int32_t *ids = fixture_ints(name, "ple_ids.txt", &n_ids);
    cr_assert_eq(hook.n_seen, n_ids, "%s: the hook saw %d rows, ple_ids.txt has %d", name, hook.n_seen, n_ids);
    for (int i = 0; i < n_ids; i++) cr_assert_eq(hook.seen[i], ids[i], "%s: PLE row %d", name, i);
    free(ids), free(hook.seen);
}

Test(ple_rows, tiny_a_q8_0_bit_identical_and_rows_of_the_fixture) { check_exact("tiny-a", "q8_0"); }

/* The table in host memory (gw_ple_host, ple_tier "ram" on cuda): the logits
 * of a model without its table, its rows from gw_ple_host_rows, are the
 * model's own bit for bit; a row past the table is refused. */
static void check_host(const char *name, const char *type)
{
    struct ple_ctx host = {.mode = HOOK_HOST};
    same_as_no_hook(name, type, &host);
    float row[4096];
    char err[256];
    const int64_t past = host.host.rows;
    cr_assert(host.host.width <= 4096);
    cr_assert_eq(gw_ple_host_rows(&host.host, 1, &past, row, err, sizeof err), NB_EINVAL, "row %lld accepted", (long long)past);
    free(host.seen);
}

Test(ple_rows, host_table_tiny_a_q8_0) { check_host("tiny-a", "q8_0"); }
Test(ple_rows, host_table_tiny_b_mix) { check_host("tiny-b", "mix"); }
Test(ple_rows, tiny_b_mix_bit_identical_and_rows_of_the_fixture) { check_exact("tiny-b", "mix"); }

Test(ple_rows, hook_rows_are_used)
{
    const char *gguf = fixture_gguf_typed("tiny-a", "q8_0");
    struct ple_ctx ref_ctx = {.mode = HOOK_NONE}, hook = {.mode = HOOK_SHIFTED};
    int T, frc;
    int64_t V;
    float *ref = run(gguf, "tiny-a", &ref_ctx, &T, &V, &frc);
    float *got = run(gguf, "tiny-a", &hook, &T, &V, &frc);
    cr_assert_eq(frc, 0);
    cr_assert(memcmp(ref, got, (size_t)V * sizeof *ref) != 0, "a different first row left row 0's logits unchanged");
    free(ref), free(got), free(ref_ctx.seen), free(hook.seen);
}

Test(ple_rows, failing_hook_fails_the_eval)
{
    struct ple_ctx hook = {.mode = HOOK_FAIL};
    int T, frc;
    int64_t V;
    float *got = run(fixture_gguf_typed("tiny-a", "q8_0"), "tiny-a", &hook, &T, &V, &frc);
    cr_assert_eq(frc, NB_EIO, "eval with a failing PLE hook returned %d", frc);
    cr_assert_eq(hook.calls, 1);
    free(got), free(hook.seen);
}

Test(ple_rows, hook_needs_a_function)
{
    char err[256];
    struct model *m;
    gw_backend *be;
    be = fixture_backend(fixture_gguf("tiny-a"), &m);
    struct gw_ple_rows r = {NULL, NULL};
    cr_assert_eq(gw_backend_set_ple_rows(be, &r, err, sizeof err), NB_EINVAL);
    cr_assert_eq(gw_backend_set_ple_rows(be, NULL, err, sizeof err), 0);
    gw_backend_free(be);
    model_close(m);
}
