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
#include "gpu-worker/cpu/cpu.h"

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

/* Runs expert e on the tokens routed to it (gathered, weighted, scattered back). */
static int run_expert(const struct model_hparams *hp, const struct model_moe *w, int e, const float *x, int T,
                      const int *ids, const float *wts, float *y, float *xs, float *ys, float *sc, int *rows)
{
    const int k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    int n = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++)
            if (ids[t * k + j] == e) {
                memcpy(xs + (int64_t)n * C, x + (int64_t)t * C, (size_t)C * sizeof *xs);
                sc[n] = wts[t * k + j];
                rows[n++] = t;
            }
    if (n == 0) return 0;
    memset(ys, 0, (size_t)(n * C) * sizeof *ys);
    struct cpu_mat g = cpu_mat_expert(&w->gate_exps, e), u = cpu_mat_expert(&w->up_exps, e),
                   d = cpu_mat_expert(&w->down_exps, e);
    int rc = ffn_add(&g, &u, &d, xs, n, sc, ys);
    for (int i = 0; rc == 0 && i < n; i++)
        for (int64_t c = 0; c < C; c++) y[rows[i] * C + c] += ys[i * C + c];
    return rc;
}

int cpu_moe_forward(const struct model_hparams *hp, const struct model_moe *w, const struct cpu_layer_consts *c,
                    const float *x, int T, float *y, const struct gw_eval_args *tap, int layer)
{
    const int E = hp->n_expert, k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    float *probs = malloc((size_t)T * E * sizeof *probs), *wts = malloc((size_t)T * k * sizeof *wts);
    int *ids = malloc((size_t)T * k * sizeof *ids), *rows = malloc((size_t)T * sizeof *rows);
    float *xs = malloc((size_t)(T * C) * sizeof *xs), *ys = malloc((size_t)(T * C) * sizeof *ys);
    float *sc = malloc((size_t)T * sizeof *sc);
    int rc = probs && wts && ids && rows && xs && ys && sc ? 0 : NB_ENOMEM;
    if (rc) goto out;
    struct cpu_mat router = cpu_mat_of(&w->router);
    cpu_matmul(&router, x, T, probs);
    for (int t = 0; t < T; t++) route(hp, probs + (int64_t)t * E, ids + t * k, wts + t * k);
    if (tap && tap->route_tap) tap->route_tap(tap->route_ctx, layer, T, k, ids, wts);
    memset(y, 0, (size_t)(T * C) * sizeof *y);
    for (int e = 0; e < E && rc == 0; e++) rc = run_expert(hp, w, e, x, T, ids, wts, y, xs, ys, sc, rows);
    if (rc) goto out;
    for (int t = 0; t < T; t++) sc[t] = cpu_sigmoid((float)cpu_dot(c->shexp_gate, x + t * C, C));
    struct cpu_mat g = cpu_mat_of(&w->gate_shexp), u = cpu_mat_of(&w->up_shexp), d = cpu_mat_of(&w->down_shexp);
    rc = ffn_add(&g, &u, &d, x, T, sc, y);
out:
    free(probs);
    free(wts);
    free(ids);
    free(rows);
    free(xs);
    free(ys);
    free(sc);
    return rc;
}
