/* hc.c — hyper-connections: the n-stream wide residual and its mixers.
 *
 * The residual X holds n streams of C per token.  Before each sublayer the
 * mixer reads X through a grouped RMS norm, computes a per-value gate
 * m = sigmoid(W_up · silu(W_down · Xn / n)) and feeds the sublayer the mean
 * over streams of m ⊙ Xn; the sublayer's output y is added back to every
 * stream of the *un-normalised* X with its own weight
 * inj_i = 2·sigmoid((W_inject · Xn)_i / n), centred on 1.  The head mixer is
 * the same without inject.  No Sinkhorn, no stream permutation. */
#include <stdlib.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

int cpu_hc_mix(const struct model_hparams *hp, const struct model_hc *w, const float *norm, const float *X, int T,
               float *x, float *inj)
{
    const int n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp), r = hp->hc_rank;
    float *xn = malloc((size_t)(T * wide) * sizeof *xn);
    float *lo = malloc((size_t)(T * r) * sizeof *lo);
    float *gate = malloc((size_t)(T * wide) * sizeof *gate);
    int rc = xn && lo && gate ? 0 : NB_ENOMEM;
    if (rc) goto out;
    for (int t = 0; t < T; t++) cpu_group_rms_norm(X + t * wide, wide, C, norm, hp->rms_eps, xn + t * wide);
    struct cpu_mat down = cpu_mat_of(&w->down), up = cpu_mat_of(&w->up);
    cpu_matmul(&down, xn, T, lo);
    for (int64_t i = 0; i < T * r; i++) lo[i] = cpu_silu(lo[i] / (float)n);
    cpu_matmul(&up, lo, T, gate);
    for (int t = 0; t < T; t++) {
        const float *xt = xn + t * wide, *gt = gate + t * wide;
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += (double)cpu_sigmoid(gt[i * C + c]) * xt[i * C + c];
            x[t * C + c] = (float)(s / n);
        }
    }
    if (inj) {
        struct cpu_mat iw = cpu_mat_of(&w->inject);
        cpu_matmul(&iw, xn, T, inj);
        for (int64_t i = 0; i < (int64_t)T * n; i++) inj[i] = 2.0f * cpu_sigmoid(inj[i] / (float)n);
    }
out:
    free(xn);
    free(lo);
    free(gate);
    return rc;
}

void cpu_hc_combine(const struct model_hparams *hp, float *X, const float *y, const float *inj, int T)
{
    const int n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++)
            for (int64_t c = 0; c < C; c++) X[t * wide + i * C + c] += inj[t * n + i] * y[t * C + c];
}
