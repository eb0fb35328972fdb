/* test_moe_remote.c — routed experts computed outside the backend.
 *
 * The remote hook gets the (row, expert, weight) pairs of non-local experts
 * and answers with gw_expert_ffn, the way the cpu-moe-worker will.  For any
 * placement — all local, all remote, half, per-layer, the MTP block's experts
 * remote — the logits and the MTP drafts must equal the all-local run bit for
 * bit, and every routed pair must be computed exactly once: the backend's
 * experts-computed count plus the remote trunk pairs is k × layers × tokens. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "engine/backend.h"
#include "engine/ffn.h"
#include "tests/core/model_fixture.h"
#include "tests/engine/backend_fixture.h"

struct remote_ctx {
    const struct model *m;
    uint64_t pairs, calls, trunk_pairs;
    const uint8_t *local;
    int bad; /* a pair whose expert was local */
};

static int remote_fn(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                     const int32_t *experts, const float *weights, float *out, char *err, size_t errlen)
{
    struct remote_ctx *r = ctx;
    const struct model_moe *w = &r->m->layers[layer].moe;
    const int64_t C = r->m->hp.n_embd;
    r->calls++;
    for (int i = 0; i < n_pairs; i++) {
        int e = experts[i];
        if (r->local[(size_t)layer * r->m->hp.n_expert + e] || rows[i] < 0 || rows[i] >= n_rows) r->bad++;
        struct gw_expert ex = {w->gate_exps.data + (size_t)e * w->gate_exps.mat_bytes,
                               w->up_exps.data + (size_t)e * w->up_exps.mat_bytes,
                               w->down_exps.data + (size_t)e * w->down_exps.mat_bytes,
                               w->gate_exps.type, w->up_exps.type, w->down_exps.type, C, w->gate_exps.ne[1]};
        if (gw_expert_ffn(&ex, x + (int64_t)rows[i] * C, 1, &weights[i], out + (int64_t)i * C)) return -1;
        r->pairs++;
        r->trunk_pairs += layer < r->m->hp.n_layer;
    }
    (void)err, (void)errlen;
    return 0;
}

/* Logits of the whole fixture sequence (prefill in two chunks + 4 decode
 * steps) under a placement; local == NULL means no remote hook. */
static float *run(const char *name, const uint8_t *local, struct remote_ctx *rc, int *rows_out, int64_t *V_out)
{
    char err[256];
    struct model *m;
    gw_backend *be;
    gw_seq *s;
    int T;
    int32_t *tok = fixture_ints(name, "tokens.txt", &T);
    be = fixture_backend(fixture_gguf(name), &m);
    if (local) {
        *rc = (struct remote_ctx){m, 0, 0, 0, local, 0};
        struct gw_moe_remote r = {local, remote_fn, rc};
        cr_assert_eq(gw_backend_set_moe_remote(be, &r, err, sizeof err), 0, "%s", err);
    }
    cr_assert_eq(gw_seq_create(be, &s, err, sizeof err), 0, "%s", err);
    int64_t V = m->hp.n_vocab;
    int n1 = T / 3, n2 = T - 4 - n1;
    float *logits = malloc((size_t)T * V * sizeof *logits);
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n1, .logits_rows = GW_ROWS_ALL, .logits = logits};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    a = (struct gw_eval_args){.tokens = tok + n1, .n_tokens = n2, .logits_rows = GW_ROWS_ALL, .logits = logits + (size_t)n1 * V};
    cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    for (int t = n1 + n2; t < T; t++) {
        a = (struct gw_eval_args){.tokens = tok + t, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = logits + (size_t)t * V};
        cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
    }
    const uint64_t per_token = (uint64_t)m->hp.n_expert_used * (uint64_t)m->hp.n_layer;
    cr_assert_eq(gw_backend_experts_computed(be) + (local ? rc->trunk_pairs : 0), per_token * (uint64_t)T,
                 "%s: %llu computed here + %llu remote != k x layers x %d tokens", name,
                 (unsigned long long)gw_backend_experts_computed(be), (unsigned long long)(local ? rc->trunk_pairs : 0), T);
    /* MTP draft from the last position, when the model has the block. */
    if (m->hp.n_nextn) {
        int64_t wide = model_wide(&m->hp);
        float *w = malloc((size_t)wide * sizeof *w);
        int32_t drafted[4];
        a = (struct gw_eval_args){.tokens = tok, .n_tokens = 1, .wide_rows = GW_ROWS_LAST, .wide = w};
        gw_seq_reset(s);
        cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
        float *dl = malloc((size_t)4 * V * sizeof *dl);
        cr_assert_eq(gw_mtp_draft(s, tok[1], w, 1, 4, drafted, dl, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gw_backend_experts_computed(be) + (local ? rc->trunk_pairs : 0), per_token * (uint64_t)(T + 1),
                     "MTP experts are not trunk work: only the one trunk token adds");
        logits = realloc(logits, (size_t)(T + 4) * V * sizeof *logits);
        memcpy(logits + (size_t)T * V, dl, (size_t)4 * V * sizeof *dl);
        T += 4;
        free(dl);
        free(w);
    }
    *rows_out = T;
    *V_out = V;
    gw_seq_free(s);
    gw_backend_free(be);
    model_close(m);
    free(tok);
    return logits;
}

static void check_placement(const char *name, int pattern)
{
    char err[256];
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf(name), &m, err, sizeof err), 0, "%s", err);
    int L = m->hp.n_layer + m->hp.n_nextn, E = m->hp.n_expert;
    model_close(m);
    uint8_t *local = malloc((size_t)L * E);
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++)
            local[l * E + e] = pattern == 0 ? 1 : pattern == 1 ? 0 : pattern == 2 ? (e * 7 + l) % 2 : l % 2;
    int T0, T1;
    int64_t V;
    struct remote_ctx rc;
    float *ref = run(name, NULL, NULL, &T0, &V);
    float *got = run(name, local, &rc, &T1, &V);
    cr_assert_eq(T0, T1);
    cr_assert_eq(rc.bad, 0, "%d pairs of local experts were sent remote", rc.bad);
    if (pattern == 0) cr_assert_eq(rc.calls, 0, "all-local placement called the remote hook");
    else cr_assert_gt(rc.pairs, 0, "the placement sent no pair remote");
    for (int64_t i = 0; i < (int64_t)T0 * V; i++)
        cr_assert(memcmp(&ref[i], &got[i], sizeof *ref) == 0, "%s pattern %d: row %lld differs (%.9g vs %.9g)", name,
                  pattern, (long long)(i / V), ref[i], got[i]);
    cr_log_info("%s pattern %d: %llu remote pairs in %llu calls, %d rows bit-identical", name, pattern,
                (unsigned long long)rc.pairs, (unsigned long long)rc.calls, T0);
    free(ref);
    free(got);
    free(local);
}

Test(moe_remote, all_local_is_the_reference) { check_placement("tiny-a", 0); }
Test(moe_remote, all_remote_bit_identical) { check_placement("tiny-a", 1); }
Test(moe_remote, mixed_bit_identical) { check_placement("tiny-a", 2); }
Test(moe_remote, per_layer_with_mtp_bit_identical) { check_placement("tiny-b", 3); }
Test(moe_remote, all_remote_with_mtp_bit_identical) { check_placement("tiny-b", 1); }

Test(moe_remote, hook_needs_function_and_map)
{
    char err[256];
    struct model *m;
    gw_backend *be;
    be = fixture_backend(fixture_gguf("tiny-a"), &m);
    struct gw_moe_remote r = {NULL, remote_fn, NULL};
    cr_assert_lt(gw_backend_set_moe_remote(be, &r, err, sizeof err), 0);
    cr_assert_eq(gw_backend_set_moe_remote(be, NULL, err, sizeof err), 0);
    gw_backend_free(be);
    model_close(m);
}
