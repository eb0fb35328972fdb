/* qsa.c — gated attention, dense or restricted by the QSA block indexer.
 *
 * Attention: per head, W_q gives D query values then D gate values
 * (interleaved per head); q and k are RMS-normed per head, the first
 * rope_dim dims rotated NeoX-style, softmax(q·k/√D) over the visible keys
 * (GQA: query head h reads KV head h / (Hq/Hkv)), output × sigmoid(gate),
 * then W_o.
 *
 * Indexer (transformers' Qwen4ExpTextQSAIndexer): the raw key W_ik x is
 * cached per position, un-normed and un-roped.  Positions 0..p hold
 * B = ⌊(p+1)/cr⌋ complete blocks; block b's key is RMS(mean of its cr raw
 * keys)·w rotated at position cr·b (its first token), and depends on nothing
 * else, so it is computed once when the block completes and cached.  Query p
 * scores block b as Σ_heads ReLU(q_h·K_b)/√Di and attends the tokens of the
 * best min(B, budget/cr) blocks plus the incomplete tail (always).  A block
 * that just completed at p competes like any other (it is not the tail).
 * Ties on the boundary go to the lower block index (torch.topk leaves them
 * unspecified). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

/* Projections of T rows: q (T × Hq·D, normed, roped), gate (T × Hq·D), and
 * k, v (normed/roped k) written to the cache at slots slot0…. */
static void project_qkv(const struct model_hparams *hp, const struct model_attn *w, const struct cpu_layer_consts *c,
                        struct cpu_layer_state *st, const float *x, int T, const int64_t *pos, int64_t slot0, float *q,
                        float *gate, float *qg)
{
    const int Hq = hp->n_head, D = hp->head_dim;
    const int64_t kvw = (int64_t)hp->n_head_kv * D;
    struct cpu_mat wq = cpu_mat_of(&w->q), wk = cpu_mat_of(&w->k), wv = cpu_mat_of(&w->v);
    cpu_matmul(&wq, x, T, qg);
    cpu_matmul_strided(&wk, x, wk.n_in, T, st->k + slot0 * kvw, kvw);
    cpu_matmul_strided(&wv, x, wv.n_in, T, st->v + slot0 * kvw, kvw);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < Hq; h++) {
            const float *src = qg + ((int64_t)t * Hq + h) * 2 * D;
            float *qh = q + ((int64_t)t * Hq + h) * D;
            cpu_rms_norm(src, D, c->q_norm, hp->rms_eps, qh);
            cpu_rope(qh, hp->rope_dim, hp->rope_theta, pos[t]);
            memcpy(gate + ((int64_t)t * Hq + h) * D, src + D, (size_t)D * sizeof *gate);
        }
        for (int h = 0; h < hp->n_head_kv; h++) {
            float *kh = st->k + (slot0 + t) * kvw + (int64_t)h * D;
            cpu_rms_norm(kh, D, c->k_norm, hp->rms_eps, kh);
            cpu_rope(kh, hp->rope_dim, hp->rope_theta, pos[t]);
        }
    }
}

/* One query row over the cache slots sel[0..n_sel) (or 0..n_sel-1 when sel
 * is NULL).  scores: n_sel floats of scratch.  out: Hq·D, gated. */
static void attend_row(const struct model_hparams *hp, const struct cpu_layer_state *st, const float *q,
                       const float *gate, const int64_t *sel, int64_t n_sel, float *scores, float *out)
{
    const int Hq = hp->n_head, D = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const int64_t kvw = (int64_t)hp->n_head_kv * D;
    const double scale = 1.0 / sqrt((double)D);
    for (int h = 0; h < Hq; h++) {
        const int64_t kvo = (int64_t)(h / group) * D;
        const float *qh = q + (int64_t)h * D;
        for (int64_t i = 0; i < n_sel; i++) {
            int64_t slot = sel ? sel[i] : i;
            scores[i] = (float)(cpu_dot(qh, st->k + slot * kvw + kvo, D) * scale);
        }
        cpu_softmax(scores, n_sel);
        for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int64_t i = 0; i < n_sel; i++) acc += (double)scores[i] * st->v[(sel ? sel[i] : i) * kvw + kvo + d];
            out[(int64_t)h * D + d] = (float)acc * cpu_sigmoid(gate[(int64_t)h * D + d]);
        }
    }
}

/* ---------- the indexer ---------- */

/* Indexer queries of T rows (normed, roped) and raw keys into the cache;
 * block keys for every block complete at pos0 + T. */
static void indexer_prepare(const struct model_hparams *hp, const struct model_layer *l,
                            const struct cpu_layer_consts *c, struct cpu_layer_state *st, const float *x, int T,
                            int64_t pos0, float *qi)
{
    const int Hi = hp->idx_n_head, Di = hp->idx_head_dim, cr = l->compress_ratio;
    struct cpu_mat wq = cpu_mat_of(&l->attn.idx_q), wk = cpu_mat_of(&l->attn.idx_k);
    cpu_matmul(&wq, x, T, qi);
    cpu_matmul(&wk, x, T, st->idx_k + pos0 * Di);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hi; h++) {
            float *qh = qi + ((int64_t)t * Hi + h) * Di;
            cpu_rms_norm(qh, Di, c->idx_q_norm, hp->rms_eps, qh);
            cpu_rope(qh, hp->rope_dim, hp->rope_theta, pos0 + t);
        }
    for (int64_t b = st->n_blk; b < (pos0 + T) / cr; b++) {
        float *kb = st->blk_k + b * Di;
        for (int d = 0; d < Di; d++) {
            double s = 0;
            for (int j = 0; j < cr; j++) s += st->idx_k[(b * cr + j) * Di + d];
            kb[d] = (float)(s / cr);
        }
        cpu_rms_norm(kb, Di, c->idx_k_norm, hp->rms_eps, kb);
        cpu_rope(kb, hp->rope_dim, hp->rope_theta, b * cr);
    }
    if ((pos0 + T) / cr > st->n_blk) st->n_blk = (pos0 + T) / cr;
}

struct block_score {
    float score;
    int64_t block;
};

static int by_score_desc(const void *pa, const void *pb)
{
    const struct block_score *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->block < b->block ? -1 : a->block > b->block; /* ties: lower block first */
}

/* The tokens query position p attends (ascending), into sel; returns their count. */
static int64_t indexer_select(const struct model_hparams *hp, int cr, const struct cpu_layer_state *st,
                              const float *qi, int64_t p, struct block_score *bs, unsigned char *keep, int64_t *sel)
{
    const int Hi = hp->idx_n_head, Di = hp->idx_head_dim;
    const int64_t B = (p + 1) / cr, top = hp->idx_top_k / cr;
    int64_t n = 0;
    if (B <= top) {
        for (int64_t i = 0; i <= p; i++) sel[n++] = i;
        return n;
    }
    const double inv = 1.0 / sqrt((double)Di);
    for (int64_t b = 0; b < B; b++) {
        double s = 0;
        for (int h = 0; h < Hi; h++) {
            double d = cpu_dot(qi + (int64_t)h * Di, st->blk_k + b * Di, Di);
            s += d > 0 ? d : 0;
        }
        bs[b].score = (float)(s * inv);
        bs[b].block = b;
        keep[b] = 0;
    }
    qsort(bs, (size_t)B, sizeof *bs, by_score_desc);
    for (int64_t i = 0; i < top; i++) keep[bs[i].block] = 1;
    for (int64_t b = 0; b < B; b++)
        if (keep[b])
            for (int j = 0; j < cr; j++) sel[n++] = b * cr + j;
    for (int64_t i = B * cr; i <= p; i++) sel[n++] = i; /* the incomplete tail block */
    return n;
}

/* Per-thread scratch for the row loop, sized for a context of n_ctx. */
struct row_scratch {
    int64_t *sel;
    float *scores;
    struct block_score *bs;
    unsigned char *keep;
};

static int scratch_alloc(struct row_scratch **out, int n_thr, int64_t n_ctx)
{
    struct row_scratch *rs = calloc((size_t)n_thr, sizeof *rs);
    if (!rs) return NB_ENOMEM;
    *out = rs;
    for (int i = 0; i < n_thr; i++) {
        rs[i].sel = malloc((size_t)n_ctx * sizeof *rs[i].sel);
        rs[i].scores = malloc((size_t)n_ctx * sizeof *rs[i].scores);
        rs[i].bs = malloc((size_t)n_ctx * sizeof *rs[i].bs);
        rs[i].keep = malloc((size_t)n_ctx);
        if (!rs[i].sel || !rs[i].scores || !rs[i].bs || !rs[i].keep) return NB_ENOMEM;
    }
    return 0;
}

static void scratch_free(struct row_scratch *rs, int n_thr)
{
    for (int i = 0; rs && i < n_thr; i++) {
        free(rs[i].sel);
        free(rs[i].scores);
        free(rs[i].bs);
        free(rs[i].keep);
    }
    free(rs);
}

/* The shared body: T rows at positions pos[], K/V stored at slot0 + t; row
 * t sees slots 0..slot0+t (dense) or the indexer's choice (cr > 0, where
 * slot = position). */
static int attention(const struct model_hparams *hp, const struct model_layer *l, const struct cpu_layer_consts *c,
                     struct cpu_layer_state *st, const float *x, int T, const int64_t *pos, int64_t slot0, int cr,
                     float *y)
{
    const int64_t qw = (int64_t)hp->n_head * hp->head_dim, iw = (int64_t)hp->idx_n_head * hp->idx_head_dim;
    const int n_thr = omp_get_max_threads();
    float *q = malloc((size_t)(T * qw) * sizeof *q), *gate = malloc((size_t)(T * qw) * sizeof *gate);
    float *qg = malloc((size_t)(T * 2 * qw) * sizeof *qg), *att = malloc((size_t)(T * qw) * sizeof *att);
    float *qi = cr > 0 ? malloc((size_t)(T * iw) * sizeof *qi) : NULL;
    struct row_scratch *rs = NULL;
    int rc = q && gate && qg && att && (cr == 0 || qi) ? scratch_alloc(&rs, n_thr, slot0 + T) : NB_ENOMEM;
    if (rc) goto out;
    project_qkv(hp, &l->attn, c, st, x, T, pos, slot0, q, gate, qg);
    if (cr > 0) indexer_prepare(hp, l, c, st, x, T, slot0, qi);
#pragma omp parallel for schedule(dynamic, 1) if ((int64_t)T * (slot0 + T) * qw >= CPU_PAR_MIN_WORK)
    for (int t = 0; t < T; t++) {
        struct row_scratch *r = &rs[omp_get_thread_num()];
        int64_t last = slot0 + t, n_sel = last + 1;
        const int64_t *sel = NULL;
        if (cr > 0) {
            n_sel = indexer_select(hp, cr, st, qi + t * iw, last, r->bs, r->keep, r->sel);
            sel = r->sel;
        }
        attend_row(hp, st, q + t * qw, gate + t * qw, sel, n_sel, r->scores, att + t * qw);
    }
    struct cpu_mat wo = cpu_mat_of(&l->attn.o);
    cpu_matmul(&wo, att, T, y);
out:
    scratch_free(rs, n_thr);
    free(q);
    free(gate);
    free(qg);
    free(att);
    free(qi);
    return rc;
}

int cpu_attn_forward(const struct model_hparams *hp, const struct model_layer *l, const struct cpu_layer_consts *c,
                     struct cpu_layer_state *st, const float *x, int T, int64_t pos0, float *y)
{
    int64_t *pos = malloc((size_t)T * sizeof *pos);
    if (!pos) return NB_ENOMEM;
    for (int t = 0; t < T; t++) pos[t] = pos0 + t;
    int rc = attention(hp, l, c, st, x, T, pos, pos0, l->compress_ratio, y);
    free(pos);
    return rc;
}

int cpu_attn_forward_dense(const struct model_hparams *hp, const struct model_layer *l,
                           const struct cpu_layer_consts *c, struct cpu_layer_state *st, const float *x, int T,
                           int64_t n_ctx, const int64_t *row_pos, float *y)
{
    return attention(hp, l, c, st, x, T, row_pos, n_ctx, 0, y);
}
