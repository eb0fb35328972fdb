/* backend_cpu.c — the CPU reference backend: setup, sequences, and the trunk.
 *
 * gw_eval runs the batch layer by layer over all its rows (so a prefill
 * chunk is one pass per layer, and GDN sees the whole chunk):
 *     X = [e, …, e];  per layer: PLE (if any) → HC_attn → GDN | attention →
 *     combine → HC_ffn → MoE → combine;  logits = W_out · HCmix_head(X).
 * Sequence state grows by doubling (K/V, indexer keys, token history); GDN
 * and PLE conv state is fixed-size.  A failure half-way through a batch
 * leaves the state inconsistent, so the sequence refuses further work until
 * it is reset. */
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

/* ---------- backend ---------- */

static void free_consts(struct cpu_layer_consts *c)
{
    float *all[] = {c->hc_attn_norm, c->hc_ffn_norm, c->gdn_conv, c->gdn_dt_bias, c->gdn_a, c->gdn_norm,
                    c->q_norm, c->k_norm, c->idx_q_norm, c->idx_k_norm, c->shexp_gate, c->ple_norm_key,
                    c->ple_norm_query, c->ple_norm_conv, c->ple_conv, c->nextn_enorm, c->nextn_hnorm,
                    c->nextn_head_norm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* fp32 copy of an optional small tensor: 0 when absent or copied. */
static int dq(const struct model_tensor *t, float **out)
{
    *out = NULL;
    if (!t->data) return 0;
    *out = cpu_dequant_all(t);
    return *out ? 0 : NB_ENOMEM;
}

static int load_consts(const struct model_layer *l, struct cpu_layer_consts *c)
{
    int rc = 0;
    rc |= dq(&l->hc_attn.norm, &c->hc_attn_norm) | dq(&l->hc_ffn.norm, &c->hc_ffn_norm);
    rc |= dq(&l->gdn.conv, &c->gdn_conv) | dq(&l->gdn.dt_bias, &c->gdn_dt_bias);
    rc |= dq(&l->gdn.a, &c->gdn_a) | dq(&l->gdn.norm, &c->gdn_norm);
    rc |= dq(&l->attn.q_norm, &c->q_norm) | dq(&l->attn.k_norm, &c->k_norm);
    rc |= dq(&l->attn.idx_q_norm, &c->idx_q_norm) | dq(&l->attn.idx_k_norm, &c->idx_k_norm);
    rc |= dq(&l->moe.shexp_gate, &c->shexp_gate);
    rc |= dq(&l->ple.norm_key, &c->ple_norm_key) | dq(&l->ple.norm_query, &c->ple_norm_query);
    rc |= dq(&l->ple.norm_conv, &c->ple_norm_conv) | dq(&l->ple.conv, &c->ple_conv);
    rc |= dq(&l->nextn.enorm, &c->nextn_enorm) | dq(&l->nextn.hnorm, &c->nextn_hnorm);
    rc |= dq(&l->nextn.head.norm, &c->nextn_head_norm);
    return rc ? NB_ENOMEM : 0;
}

static void cpu_free(gw_backend *gb)
{
    struct cpu_backend *be = (struct cpu_backend *)gb;
    const struct model_hparams *hp = &gb->model->hp;
    for (int i = 0; be->lc && i < hp->n_layer + hp->n_nextn; i++) free_consts(&be->lc[i]);
    free(be->lc);
    free(be->output_hc_norm);
    cpu_slots_free(be);
    free(be);
}

static int cpu_create(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err,
                      size_t errlen)
{
    struct cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return nb_errf(err, errlen, NB_ENOMEM, "cpu backend");
    be->base.ops = &gw_cpu_ops;
    be->base.model = m;
    be->n_threads = p && p->n_threads > 0 ? p->n_threads : 0;
    int n = m->hp.n_layer + m->hp.n_nextn;
    be->lc = calloc((size_t)n, sizeof *be->lc);
    int rc = be->lc ? dq(&m->output_hc.norm, &be->output_hc_norm) : NB_ENOMEM;
    for (int i = 0; i < n && rc == 0; i++) rc = load_consts(&m->layers[i], &be->lc[i]);
    if (rc) {
        cpu_free(&be->base);
        return nb_errf(err, errlen, rc, "cpu backend: out of memory for the small tensors");
    }
    if ((rc = cpu_slots_init(be, p, err, errlen))) {
        cpu_free(&be->base);
        return rc;
    }
    *out = &be->base;
    return 0;
}

/* ---------- sequences ---------- */

static void seq_free_state(struct cpu_seq *s)
{
    const struct model_hparams *hp = &s->base.be->model->hp;
    for (int i = 0; s->ls && i < hp->n_layer + hp->n_nextn; i++) {
        struct cpu_layer_state *st = &s->ls[i];
        free(st->conv), free(st->ssm), free(st->k), free(st->v), free(st->idx_k), free(st->blk_k), free(st->ple_conv);
        cpu_ckpt_free(st);
    }
    free(s->ls);
    free(s->tokens);
    free(s->mtp_pos);
}

static void cpu_seq_free(gw_seq *gs)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    seq_free_state(s);
    free(s);
}

static int seq_alloc_fixed(struct cpu_seq *s)
{
    const struct model *m = s->base.be->model;
    const struct model_hparams *hp = &m->hp;
    s->ls = calloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *s->ls);
    if (!s->ls) return NB_ENOMEM;
    for (int i = 0; i < hp->n_layer; i++) {
        struct cpu_layer_state *st = &s->ls[i];
        if (m->layers[i].kind == MODEL_LAYER_GDN) {
            st->conv = calloc((size_t)model_gdn_conv_state_floats(hp), sizeof(float));
            st->ssm = calloc((size_t)model_gdn_ssm_state_floats(hp), sizeof(float));
            if (!st->conv || !st->ssm) return NB_ENOMEM;
        }
        if (m->layers[i].has_ple && !(st->ple_conv = calloc((size_t)model_ple_conv_state_floats(hp), sizeof(float))))
            return NB_ENOMEM;
    }
    return 0;
}

static int cpu_seq_create(gw_backend *be, gw_seq **out, char *err, size_t errlen)
{
    struct cpu_seq *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "sequence");
    s->base.be = be;
    if (seq_alloc_fixed(s)) {
        cpu_seq_free(&s->base);
        return nb_errf(err, errlen, NB_ENOMEM, "sequence state");
    }
    *out = &s->base;
    return 0;
}

static void cpu_seq_reset(gw_seq *gs)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    const struct model_hparams *hp = &gs->be->model->hp;
    for (int i = 0; i < hp->n_layer; i++) {
        struct cpu_layer_state *st = &s->ls[i];
        if (st->conv) memset(st->conv, 0, (size_t)model_gdn_conv_state_floats(hp) * sizeof(float));
        if (st->ssm) memset(st->ssm, 0, (size_t)model_gdn_ssm_state_floats(hp) * sizeof(float));
        if (st->ple_conv) memset(st->ple_conv, 0, (size_t)model_ple_conv_state_floats(hp) * sizeof(float));
        st->n_blk = 0;
    }
    gs->n_pos = 0;
    s->mtp_n = 0;
    s->broken = false;
    s->ck_T = 0;
}

/* Grows *p to n floats, keeping its contents. */
static int grow(float **p, int64_t n)
{
    float *q = realloc(*p, (size_t)n * sizeof *q);
    if (!q) return NB_ENOMEM;
    *p = q;
    return 0;
}

/* Capacity for `need` positions of trunk K/V, indexer keys and history. */
static int seq_reserve(struct cpu_seq *s, int64_t need)
{
    if (need <= s->cap) return 0;
    const struct model *m = s->base.be->model;
    const struct model_hparams *hp = &m->hp;
    int64_t cap = s->cap * 2 > need ? s->cap * 2 : need < 64 ? 64 : need;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim;
    int32_t *tok = realloc(s->tokens, (size_t)cap * sizeof *tok);
    if (!tok) return NB_ENOMEM;
    s->tokens = tok;
    for (int i = 0; i < hp->n_layer; i++) {
        const struct model_layer *l = &m->layers[i];
        struct cpu_layer_state *st = &s->ls[i];
        if (l->kind != MODEL_LAYER_ATTN) continue;
        if (grow(&st->k, cap * kvw) || grow(&st->v, cap * kvw)) return NB_ENOMEM;
        if (l->compress_ratio > 0 &&
            (grow(&st->idx_k, cap * Di) || grow(&st->blk_k, (cap / l->compress_ratio + 1) * Di)))
            return NB_ENOMEM;
    }
    s->cap = cap;
    return 0;
}

int cpu_mtp_reserve(struct cpu_seq *s, int64_t need)
{
    if (need <= s->mtp_cap) return 0;
    const struct model_hparams *hp = &s->base.be->model->hp;
    struct cpu_layer_state *st = &s->ls[hp->n_layer];
    int64_t cap = s->mtp_cap * 2 > need ? s->mtp_cap * 2 : need < 64 ? 64 : need;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t *pos = realloc(s->mtp_pos, (size_t)cap * sizeof *pos);
    if (!pos) return NB_ENOMEM;
    s->mtp_pos = pos;
    if (grow(&st->k, cap * kvw) || grow(&st->v, cap * kvw)) return NB_ENOMEM;
    s->mtp_cap = cap;
    return 0;
}

static int cpu_seq_truncate(gw_seq *gs, int64_t n_keep, char *err, size_t errlen)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    const struct model *m = gs->be->model;
    if (gw_recurrent_layer(m) >= 0) { /* GDN / PLE state: only back into the last verify window */
        int rc = cpu_rollback(s, n_keep, err, errlen);
        if (rc) return rc;
    }
    for (int i = 0; i < m->hp.n_layer; i++) s->ls[i].n_blk = gw_blocks_kept(m, i, s->ls[i].n_blk, n_keep);
    gs->n_pos = n_keep;
    return 0;
}

static int copy_floats(float **dst, const float *src, int64_t n)
{
    if (!src) return 0;
    if (grow(dst, n > 0 ? n : 1)) return NB_ENOMEM;
    memcpy(*dst, src, (size_t)n * sizeof **dst);
    return 0;
}

static int cpu_seq_copy(gw_seq *gd, const gw_seq *gsrc, char *err, size_t errlen)
{
    struct cpu_seq *d = (struct cpu_seq *)gd;
    const struct cpu_seq *s = (const struct cpu_seq *)gsrc;
    const struct model_hparams *hp = &gd->be->model->hp;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim;
    int rc = seq_reserve(d, s->cap) | cpu_mtp_reserve(d, s->mtp_cap);
    for (int i = 0; i < hp->n_layer + hp->n_nextn && rc == 0; i++) {
        const struct cpu_layer_state *a = &s->ls[i];
        struct cpu_layer_state *b = &d->ls[i];
        int64_t n = i < hp->n_layer ? gsrc->n_pos : s->mtp_n;
        rc |= copy_floats(&b->conv, a->conv, model_gdn_conv_state_floats(hp)) | copy_floats(&b->ssm, a->ssm, model_gdn_ssm_state_floats(hp));
        rc |= copy_floats(&b->ple_conv, a->ple_conv, model_ple_conv_state_floats(hp));
        if (a->k) {
            memcpy(b->k, a->k, (size_t)(n * kvw) * sizeof(float));
            memcpy(b->v, a->v, (size_t)(n * kvw) * sizeof(float));
        }
        if (a->idx_k) memcpy(b->idx_k, a->idx_k, (size_t)(n * Di) * sizeof(float));
        if (a->blk_k) memcpy(b->blk_k, a->blk_k, (size_t)(a->n_blk * Di) * sizeof(float));
        b->n_blk = a->n_blk;
    }
    if (rc) {
        d->broken = true;
        return nb_errf(err, errlen, NB_ENOMEM, "sequence copy");
    }
    memcpy(d->tokens, s->tokens, (size_t)gsrc->n_pos * sizeof *d->tokens);
    if (s->mtp_n) memcpy(d->mtp_pos, s->mtp_pos, (size_t)s->mtp_n * sizeof *d->mtp_pos);
    gd->n_pos = gsrc->n_pos;
    d->mtp_n = s->mtp_n;
    d->broken = s->broken;
    d->ck_T = 0; /* the copy does not take the source's last verify window: it cannot roll back into it */
    return 0;
}

/* gw_seq_save / gw_seq_load's view (engine/seq_state.c): the heap arrays themselves. */
static int cpu_seq_parts(gw_seq *gs, bool load, int64_t n_pos, int64_t mtp_n, struct gw_seq_parts *p, char *err, size_t errlen)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    const struct model_hparams *hp = &gs->be->model->hp;
    if (load) {
        gs->n_pos = 0, s->mtp_n = 0, s->ck_T = 0, s->broken = false;
        if (seq_reserve(s, n_pos) || cpu_mtp_reserve(s, mtp_n))
            return s->broken = true, nb_errf(err, errlen, NB_ENOMEM, "sequence of %lld positions", (long long)n_pos);
    }
    p->tokens = s->tokens, p->mtp_pos = s->mtp_pos, p->mtp_n = &s->mtp_n, p->broken = &s->broken;
    for (int i = 0; i < hp->n_layer + hp->n_nextn; i++) {
        struct cpu_layer_state *st = &s->ls[i];
        p->layers[i] = (struct gw_seq_layer){st->conv, st->ssm, st->ple_conv, st->k, st->v, st->idx_k, st->blk_k,
                                             i < hp->n_layer ? &st->n_blk : NULL};
    }
    return 0;
}

static int cpu_state_copy(gw_backend *be, void *dst, const void *src, uint64_t bytes, bool to_dev, char *err, size_t errlen)
{
    memcpy(dst, src, (size_t)bytes);
    return 0;
}

/* ---------- the trunk ---------- */

int cpu_head(const struct cpu_backend *be, const struct model_hc *mixer, const float *mixer_norm,
             const struct model_tensor *out_w, const float *X, int T, float *logits)
{
    const struct model_hparams *hp = &be->base.model->hp;
    float *h = malloc((size_t)(T * hp->n_embd) * sizeof *h);
    int rc = h ? cpu_hc_mix(hp, mixer, mixer_norm, X, T, h, NULL) : NB_ENOMEM;
    if (rc == 0) {
        struct cpu_mat w = cpu_mat_of(out_w);
        cpu_matmul(&w, h, T, logits);
    }
    free(h);
    return rc;
}

/* One trunk layer over the T rows of X. */
static int layer_forward(struct cpu_seq *s, const struct gw_eval_args *a, int il, int64_t pos0, int T, float *X, float *x,
                         float *y, float *inj)
{
    const struct cpu_backend *be = cpu_be(&s->base);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[il];
    const struct cpu_layer_consts *c = &be->lc[il];
    struct cpu_layer_state *st = &s->ls[il];
    int rc = 0;
    if (l->has_ple) rc = cpu_ple_forward(m, &be->base.ple_rows, l, c, st, s->tokens, pos0, T, a->verify, X);
    if (rc == 0) rc = cpu_hc_mix(hp, &l->hc_attn, c->hc_attn_norm, X, T, x, inj);
    if (rc == 0)
        rc = l->kind == MODEL_LAYER_GDN ? cpu_gdn_forward(hp, &l->gdn, c, st, x, T, a->verify, y)
                                        : cpu_attn_forward(hp, l, c, st, x, T, pos0, y);
    if (rc) return rc;
    cpu_hc_combine(hp, X, y, inj, T);
    if ((rc = cpu_hc_mix(hp, &l->hc_ffn, c->hc_ffn_norm, X, T, x, inj))) return rc;
    struct cpu_moe_ctx mc = {a, il, cpu_slots_remote(be), &s->base.be->experts_computed, &s->base.be->experts_skipped,
                             cpu_slots_routes(be, il, T)};
    if ((rc = cpu_moe_forward(hp, &l->moe, c, x, T, y, &mc))) return rc;
    cpu_hc_combine(hp, X, y, inj, T);
    return 0;
}

static int run_trunk(struct cpu_seq *s, const struct gw_eval_args *a, float *X)
{
    const struct cpu_backend *be = cpu_be(&s->base);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int T = a->n_tokens;
    const int64_t C = hp->n_embd, wide = model_wide(hp), pos0 = s->base.n_pos;
    float *x = malloc((size_t)(T * C) * sizeof *x), *y = malloc((size_t)(T * C) * sizeof *y);
    float *inj = malloc((size_t)T * hp->hc_count * sizeof *inj);
    int rc = x && y && inj ? 0 : NB_ENOMEM;
    for (int t = 0; t < T && rc == 0; t++) {
        cpu_get_row(&m->tok_embd, a->tokens[t], X + t * wide);
        for (int i = 1; i < hp->hc_count; i++) memcpy(X + t * wide + i * C, X + t * wide, (size_t)C * sizeof *X);
    }
    for (int il = 0; il < hp->n_layer && rc == 0; il++) {
        rc = layer_forward(s, a, il, pos0, T, X, x, y, inj);
        if (rc == 0 && a->tap) a->tap(a->tap_ctx, il, T, X);
    }
    free(x);
    free(y);
    free(inj);
    return rc;
}

static int cpu_eval(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen)
{
    struct cpu_seq *s = (struct cpu_seq *)gs;
    const struct cpu_backend *be = cpu_be(gs);
    const struct model_hparams *hp = &be->base.model->hp;
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    if (be->n_threads > 0) omp_set_num_threads(be->n_threads);
    const int T = a->n_tokens;
    const int64_t wide = model_wide(hp), pos0 = gs->n_pos;
    if (seq_reserve(s, pos0 + T)) return nb_errf(err, errlen, NB_ENOMEM, "sequence of %lld positions", (long long)(pos0 + T));
    memcpy(s->tokens + pos0, a->tokens, (size_t)T * sizeof *s->tokens);
    float *X = malloc((size_t)(T * wide) * sizeof *X);
    int rc = X ? cpu_slots_begin((struct cpu_backend *)be) : NB_ENOMEM;
    if (rc == 0) rc = run_trunk(s, a, X);
    if (rc == 0) rc = cpu_slots_end((struct cpu_backend *)be, T);
    const int first = a->logits_rows == GW_ROWS_LAST ? T - 1 : 0;
    if (rc == 0 && a->logits_rows != GW_ROWS_NONE)
        rc = cpu_head(be, &be->base.model->output_hc, be->output_hc_norm, &be->base.model->output, X + first * wide,
                      T - first, a->logits);
    if (rc == 0 && a->wide_rows != GW_ROWS_NONE) {
        const int w0 = a->wide_rows == GW_ROWS_LAST ? T - 1 : 0;
        memcpy(a->wide, X + w0 * wide, (size_t)((T - w0) * wide) * sizeof *X);
    }
    free(X);
    s->ck_pos0 = pos0, s->ck_T = s->ck_W = rc == 0 && a->verify ? T : 0; /* any other eval ends the window's rollback */
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "eval of %d tokens at position %lld: %s", T, (long long)pos0,
                       rc == NB_ENOMEM ? "out of memory" : "a remote expert or PLE row hook failed");
    }
    gs->n_pos = pos0 + T;
    return 0;
}

const struct gw_backend_ops gw_cpu_ops = {
    .kind = "cpu",
    .create = cpu_create,
    .free = cpu_free,
    .seq_create = cpu_seq_create,
    .seq_free = cpu_seq_free,
    .seq_reset = cpu_seq_reset,
    .seq_truncate = cpu_seq_truncate,
    .seq_copy = cpu_seq_copy,
    .eval = cpu_eval,
    .mtp_eval = cpu_mtp_eval,
    .seq_parts = cpu_seq_parts,
    .state_copy = cpu_state_copy,
};
