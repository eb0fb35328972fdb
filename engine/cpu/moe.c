/* moe.c — routed experts plus the gated shared expert.
 *
 * Router: softmax over all E logits (the probabilities in fp32, as
 * transformers computes them), the top k kept (ties to the lower expert
 * index), renormalised to sum 1 when the model says so.  Each expert is
 * W_down(silu(W_gate x) ⊙ W_up x); the tokens routed to one expert are
 * gathered and run as one batch, so its weight rows are decoded once per
 * batch.  The shared expert runs on every token, scaled by
 * sigmoid(w_sh · x). */
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

/* Top-k of the softmaxed router logits of one token: ids and weights. */
static void route(const struct model_hparams *hp, float *probs, int *ids, float *wts)
{
    const int E = hp->n_expert, k = hp->n_expert_used;
    cpu_softmax(probs, E);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ids[i] == e;
            if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
        }
        ids[j] = best;
        wts[j] = probs[best];
    }
    if (hp->expert_weights_norm) {
        double s = 0;
        for (int j = 0; j < k; j++) s += wts[j];
        for (int j = 0; j < k; j++) wts[j] = (float)(wts[j] / s);
    }
}

/* out (T × C) += scale[t] · W_down(silu(W_gate x) ⊙ W_up x) for the T rows of x. */
static int ffn_add(const struct cpu_mat *gate, const struct cpu_mat *up, const struct cpu_mat *down, const float *x,
                   int T, const float *scale, float *out)
{
    const int64_t I = gate->n_out, C = down->n_out;
    float *g = malloc((size_t)(T * I) * sizeof *g), *u = malloc((size_t)(T * I) * sizeof *u);
    float *d = malloc((size_t)(T * C) * sizeof *d);
    int rc = g && u && d ? 0 : NB_ENOMEM;
    if (rc == 0) {
        cpu_matmul(gate, x, T, g);
        cpu_matmul(up, x, T, u);
        for (int64_t i = 0; i < (int64_t)T * I; i++) g[i] = cpu_silu(g[i]) * u[i];
        cpu_matmul(down, g, T, d);
        for (int t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) out[t * C + c] += scale[t] * d[t * C + c];
    }
    free(g);
    free(u);
    free(d);
    return rc;
}

/* Runs local expert e on the (token, slot) pairs routed to it and writes
 * each pair's weighted output into contrib[t·k + j] (C floats). */
static int run_expert(const struct model_hparams *hp, const struct model_moe *w, int e, const float *x, int T,
                      const int *ids, const float *wts, const uint8_t *skip, float *contrib, float *xs, float *ys, float *sc,
                      int *slot, uint64_t *computed)
{
    const int k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    int n = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++)
            if (ids[t * k + j] == e && !skip[t * k + j]) {
                memcpy(xs + (int64_t)n * C, x + (int64_t)t * C, (size_t)C * sizeof *xs);
                sc[n] = wts[t * k + j];
                slot[n++] = t * k + j;
            }
    if (n == 0) return 0;
    memset(ys, 0, (size_t)(n * C) * sizeof *ys);
    struct cpu_mat g = cpu_mat_expert(&w->gate_exps, e), u = cpu_mat_expert(&w->up_exps, e),
                   d = cpu_mat_expert(&w->down_exps, e);
    int rc = ffn_add(&g, &u, &d, xs, n, sc, ys);
    if (rc == 0 && computed) __atomic_fetch_add(computed, (uint64_t)n, __ATOMIC_RELAXED);
    for (int i = 0; rc == 0 && i < n; i++) memcpy(contrib + (int64_t)slot[i] * C, ys + (int64_t)i * C, (size_t)C * sizeof *ys);
    return rc;
}

/* The pairs whose expert is remote, handed to the backend's remote hook. */
static int run_remote(const struct model_hparams *hp, const struct cpu_moe_ctx *mc, const float *x, int T, const int *ids,
                      const float *wts, const uint8_t *skip, float *contrib)
{
    const int k = hp->n_expert_used, E = hp->n_expert;
    const int64_t C = hp->n_embd;
    const uint8_t *local = mc->remote->local + (size_t)mc->layer * E;
    int32_t *rows = malloc((size_t)T * k * sizeof *rows), *exps = malloc((size_t)T * k * sizeof *exps);
    float *w = malloc((size_t)T * k * sizeof *w), *out = malloc((size_t)T * k * (size_t)C * sizeof *out);
    int *slot = malloc((size_t)T * k * sizeof *slot), n = 0, rc = rows && exps && w && out && slot ? 0 : NB_ENOMEM;
    for (int t = 0; rc == 0 && t < T; t++)
        for (int j = 0; j < k; j++)
            if (!local[ids[t * k + j]] && !skip[t * k + j]) {
                rows[n] = t, exps[n] = ids[t * k + j], w[n] = wts[t * k + j], slot[n++] = t * k + j;
            }
    char err[256] = "";
    if (rc == 0 && n > 0) rc = mc->remote->fn(mc->remote->ctx, mc->layer, T, x, n, rows, exps, w, out, err, sizeof err);
    for (int i = 0; rc == 0 && i < n; i++) memcpy(contrib + (int64_t)slot[i] * C, out + (int64_t)i * C, (size_t)C * sizeof *out);
    free(rows);
    free(exps);
    free(w);
    free(out);
    free(slot);
    return rc;
}

/* Coverage mode (gw_eval_args.coverage): which of the T·k pairs to leave out
 * (skip[p] = 1), each row's resident experts carrying at least τ of its
 * weight; a row below τ keeps them all and is marked in a->handoff.  The
 * resident map: the eval's, else the remote hook's local one, else every
 * expert.  Returns the pairs left out. */
static uint64_t coverage_skips(const struct model_hparams *hp, const struct cpu_moe_ctx *mc, int T, const int *ids,
                               const float *wts, uint8_t *skip)
{
    const int k = hp->n_expert_used, E = hp->n_expert;
    memset(skip, 0, (size_t)T * k);
    const struct gw_eval_args *a = mc ? mc->tap : NULL;
    if (!a || !a->verify || !(a->coverage > 0)) return 0;
    const uint8_t *res = a->resident ? a->resident : mc->remote && mc->remote->fn ? mc->remote->local : NULL;
    if (!res) return 0; /* every expert resident: nothing to leave out */
    res += (size_t)mc->layer * E;
    uint64_t n = 0;
    for (int t = 0; t < T; t++) {
        double all = 0, here = 0;
        for (int j = 0; j < k; j++) all += wts[t * k + j], here += res[ids[t * k + j]] ? wts[t * k + j] : 0;
        if (here >= (double)a->coverage * all) {
            for (int j = 0; j < k; j++) n += skip[t * k + j] = !res[ids[t * k + j]];
        } else if (a->handoff) {
            a->handoff[t] = 1;
        }
    }
    return n;
}

int cpu_moe_forward(const struct model_hparams *hp, const struct model_moe *w, const struct cpu_layer_consts *c,
                    const float *x, int T, float *y, const struct cpu_moe_ctx *mc)
{
    const int E = hp->n_expert, k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    const bool remote = mc && mc->remote && mc->remote->fn;
    float *probs = malloc((size_t)T * E * sizeof *probs), *wts = malloc((size_t)T * k * sizeof *wts);
    int *ids = malloc((size_t)T * k * sizeof *ids), *slot = malloc((size_t)T * k * sizeof *slot);
    float *xs = malloc((size_t)(T * C) * sizeof *xs), *ys = malloc((size_t)(T * C) * sizeof *ys);
    float *sc = malloc((size_t)T * k * sizeof *sc), *contrib = malloc((size_t)T * k * (size_t)C * sizeof *contrib);
    uint8_t *skip = malloc((size_t)T * k);
    int rc = probs && wts && ids && slot && xs && ys && sc && contrib && skip ? 0 : NB_ENOMEM;
    if (rc) goto out;
    struct cpu_mat router = cpu_mat_of(&w->router);
    cpu_matmul(&router, x, T, probs);
    for (int t = 0; t < T; t++) route(hp, probs + (int64_t)t * E, ids + t * k, wts + t * k);
    if (mc && mc->tap && mc->tap->route_tap) mc->tap->route_tap(mc->tap->route_ctx, mc->layer, T, k, ids, wts);
    const uint64_t skipped = coverage_skips(hp, mc, T, ids, wts, skip);
    if (skipped) {
        if (mc->skipped) __atomic_fetch_add(mc->skipped, skipped, __ATOMIC_RELAXED);
        for (int p = 0; p < T * k; p++)
            if (skip[p]) memset(contrib + (int64_t)p * C, 0, (size_t)C * sizeof *contrib);
    }
    if (mc && mc->ids_out)
        for (int p = 0; p < T * k; p++) mc->ids_out[p] = ids[p];
    const uint8_t *local = remote ? mc->remote->local + (size_t)mc->layer * E : NULL;
    for (int e = 0; e < E && rc == 0; e++)
        if (!local || local[e])
            rc = run_expert(hp, w, e, x, T, ids, wts, skip, contrib, xs, ys, sc, slot, mc ? mc->computed : NULL);
    if (rc == 0 && remote) rc = run_remote(hp, mc, x, T, ids, wts, skip, contrib);
    if (rc) goto out;
    /* Each token's k contributions summed in ascending expert order, wherever
     * they were computed: the order (so the float result) never depends on
     * the placement. */
    memset(y, 0, (size_t)(T * C) * sizeof *y);
    for (int t = 0; t < T; t++) {
        int *order = slot + t * k, nk = k; /* slot is free again: reuse it */
        for (int j = 0; j < nk; j++) order[j] = j;
        for (int a = 1; a < nk; a++)
            for (int b = a; b > 0 && ids[t * k + order[b]] < ids[t * k + order[b - 1]]; b--) {
                int tmp = order[b];
                order[b] = order[b - 1], order[b - 1] = tmp;
            }
        for (int j = 0; j < nk; j++) {
            const float *src = contrib + ((int64_t)t * k + order[j]) * C;
            for (int64_t ci = 0; ci < C; ci++) y[t * C + ci] += src[ci];
        }
    }
    for (int t = 0; t < T; t++) sc[t] = cpu_sigmoid((float)cpu_dot(c->shexp_gate, x + t * C, C));
    struct cpu_mat g = cpu_mat_of(&w->gate_shexp), u = cpu_mat_of(&w->up_shexp), d = cpu_mat_of(&w->down_shexp);
    rc = ffn_add(&g, &u, &d, x, T, sc, y);
out:
    free(probs);
    free(wts);
    free(ids);
    free(slot);
    free(xs);
    free(ys);
    free(sc);
    free(contrib);
    free(skip);
    return rc;
}
