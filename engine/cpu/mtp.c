/* mtp.c — the MTP draft block (llama.cpp's graph_mtp, docs/CONVERSION.md §5.1).
 *
 * Row i combines a wide state h (the trunk's residual after its last layer,
 * or the previous draft step's output) with the embedding of the next token:
 *     ê = RMS(e)·enorm,  ĥ_s = RMS(h_s)·hnorm_s,  P_s = W_eh·[ê ; ĥ_s]
 * per stream s (embedding half first; the streams stay distinct), then one
 * trunk-shaped block on P with dense attention over the MTP's own K/V
 * (the indexer is unused, as in llama.cpp), then the head: the MTP's own
 * mixer (or the trunk's when the file has none) and the trunk's LM head.
 * The block's output R is returned as the next step's wide state.
 *
 * The MTP K/V is a list of entries with increasing positions; a call at
 * position pos first drops the entries at ≥ pos, so re-drafting from any
 * point is a call with that point's position. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

/* P (T × wide) from the tokens' embeddings and the input wide states. */
static int build_input(const struct cpu_backend *be, const struct gw_mtp_args *a, float *P)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[hp->n_layer];
    const struct cpu_layer_consts *c = &be->lc[hp->n_layer];
    const int T = a->n_rows, n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp);
    const struct model_tensor *embd = l->nextn.embed_tokens.data ? &l->nextn.embed_tokens : &m->tok_embd;
    float *cat = malloc((size_t)(T * n * 2 * C) * sizeof *cat), *e = malloc((size_t)C * sizeof *e);
    int rc = cat && e ? 0 : NB_ENOMEM;
    for (int t = 0; t < T && rc == 0; t++) {
        cpu_get_row(embd, a->tokens[t], e);
        cpu_rms_norm(e, C, c->nextn_enorm, hp->rms_eps, e);
        for (int s = 0; s < n; s++) {
            float *row = cat + ((int64_t)t * n + s) * 2 * C;
            memcpy(row, e, (size_t)C * sizeof *row);
            cpu_rms_norm(a->wide_in + t * wide + s * C, C, c->nextn_hnorm + s * C, hp->rms_eps, row + C);
        }
    }
    if (rc == 0) {
        /* One row per (token, stream): the product lands in P's layout directly. */
        struct cpu_mat eh = cpu_mat_of(&l->nextn.eh_proj);
        cpu_matmul(&eh, cat, T * n, P);
    }
    free(cat);
    free(e);
    return rc;
}

/* The block: HC_attn → dense attention → combine → HC_ffn → MoE → combine. */
static int run_block(struct cpu_seq *s, const struct gw_mtp_args *a, int64_t n_ctx, const int64_t *pos, int T, float *X)
{
    const struct cpu_backend *be = cpu_be(&s->base);
    const struct model_hparams *hp = &be->base.model->hp;
    const int il = hp->n_layer;
    const struct model_layer *l = &be->base.model->layers[il];
    const struct cpu_layer_consts *c = &be->lc[il];
    const int64_t C = hp->n_embd;
    float *x = malloc((size_t)(T * C) * sizeof *x), *y = malloc((size_t)(T * C) * sizeof *y);
    float *inj = malloc((size_t)T * hp->hc_count * sizeof *inj);
    int rc = x && y && inj ? 0 : NB_ENOMEM;
    if (rc == 0) rc = cpu_hc_mix(hp, &l->hc_attn, c->hc_attn_norm, X, T, x, inj);
    if (rc == 0) rc = cpu_attn_forward_dense(hp, l, c, &s->ls[il], x, T, n_ctx, pos, y);
    if (rc == 0) {
        cpu_hc_combine(hp, X, y, inj, T);
        rc = cpu_hc_mix(hp, &l->hc_ffn, c->hc_ffn_norm, X, T, x, inj);
    }
    const struct gw_eval_args tap = {.route_tap = a->route_tap, .route_ctx = a->route_ctx};
    struct cpu_moe_ctx mc = {a->route_tap ? &tap : NULL, il, &be->base.remote, NULL, NULL, NULL}; /* MTP experts are not trunk work: not counted */
    if (rc == 0) rc = cpu_moe_forward(hp, &l->moe, c, x, T, y, &mc);
    if (rc == 0) cpu_hc_combine(hp, X, y, inj, T);
    free(x);
    free(y);
    free(inj);
    return rc;
}

int cpu_mtp_eval(gw_seq *gs, const struct gw_mtp_args *a, char *err, size_t errlen)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    const struct cpu_backend *be = cpu_be(gs);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[hp->n_layer];
    const int T = a->n_rows;
    const int64_t wide = model_wide(hp);
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    if (be->n_threads > 0) omp_set_num_threads(be->n_threads);
    int64_t n_ctx = 0; /* entries before a->pos survive */
    while (n_ctx < s->mtp_n && s->mtp_pos[n_ctx] < a->pos) n_ctx++;
    if (cpu_mtp_reserve(s, n_ctx + T)) return nb_errf(err, errlen, NB_ENOMEM, "MTP cache of %lld", (long long)(n_ctx + T));
    float *X = malloc((size_t)(T * wide) * sizeof *X);
    int64_t *pos = malloc((size_t)T * sizeof *pos);
    int rc = X && pos ? build_input(be, a, X) : NB_ENOMEM;
    for (int t = 0; t < T && rc == 0; t++) pos[t] = a->pos + t;
    if (rc == 0) rc = run_block(s, a, n_ctx, pos, T, X);
    if (rc == 0 && a->logits) {
        const struct model_tensor *head = l->nextn.shared_head.data ? &l->nextn.shared_head : &m->output;
        rc = cpu_head(be, &l->nextn.head, be->lc[hp->n_layer].nextn_head_norm, head, X, T, a->logits);
    }
    if (rc == 0 && a->wide_out) memcpy(a->wide_out, X, (size_t)(T * wide) * sizeof *X);
    if (rc == 0) {
        memcpy(s->mtp_pos + n_ctx, pos, (size_t)T * sizeof *pos);
        s->mtp_n = n_ctx + T;
    } else {
        s->broken = true;
    }
    free(X);
    free(pos);
    return rc ? nb_errf(err, errlen, rc, "MTP step of %d rows: out of memory", T) : 0;
}
