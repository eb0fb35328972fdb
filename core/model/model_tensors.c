/* model_tensors.c — binding every tensor of a qwen4exp GGUF by name, once.
 *
 * Each tensor is looked up by its llama.cpp name, checked against the shape
 * the hyperparameters imply (GGUF order, ne[0] fastest; trailing dims of 1
 * are equal to absent ones) and against the quant table (a type we can
 * dequantize), and stored into its semantic slot.  The binder keeps the
 * first error and ignores later calls, so the binding code reads as a plain
 * list of tensors; the message names the tensor:
 *     "blk.3.attn_q.weight: expected 64×192, got 64×96".
 * Fused routed experts (`ffn_gate_up_exps`, gate rows first) are accepted in
 * place of gate/up: the two slots become strided views of it.  The MTP block
 * is bound from the separate MTP file when one was given (model_open_mtp),
 * against the trunk's hyperparameters, so a file of another shape fails
 * naming its tensor. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/model/model.h"
#include "core/model/model_priv.h"
#include "core/util/err.h"

struct binder {
    const gguf_file *g;
    char *err;
    size_t errlen;
    int rc; /* first error; later binds are no-ops */
};

enum { OPTIONAL = 0, REQUIRED = 1 };

#define S1(a) 1, (const int64_t[]){(a)}
#define S2(a, b) 2, (const int64_t[]){(a), (b)}
#define S3(a, b, c) 3, (const int64_t[]){(a), (b), (c)}

static int fmt_shape(char *buf, size_t len, int n, const int64_t *ne)
{
    int off = 0;
    for (int d = 0; d < n && off < (int)len; d++)
        off += snprintf(buf + off, len - (size_t)off, d ? "×%lld" : "%lld", (long long)ne[d]);
    return off;
}

/* Binds the tensor named by fmt into *t, checking its shape against ne[0..n-1]. */
__attribute__((format(printf, 6, 7))) static void bind(struct binder *b, struct model_tensor *t, int required, int n,
                                                        const int64_t *ne, const char *fmt, ...)
{
    memset(t, 0, sizeof *t);
    if (b->rc) return;
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const struct gguf_tensor *gt = gguf_find_tensor(b->g, name);
    if (!gt) {
        if (required) b->rc = nb_errf(b->err, b->errlen, NB_ENOENT, "%s: required tensor missing", name);
        return;
    }
    int64_t want[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    for (int d = 0; d < n; d++) want[d] = ne[d];
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (gt->ne[d] == want[d]) continue;
        char ws[96], gs[96];
        int shown = gt->n_dims > n ? gt->n_dims : n;
        fmt_shape(ws, sizeof ws, n, want);
        fmt_shape(gs, sizeof gs, shown, gt->ne);
        b->rc = nb_errf(b->err, b->errlen, NB_EFORMAT, "%s: expected %s, got %s", name, ws, gs);
        return;
    }
    const struct quant_traits *qt = quant_traits_of((enum quant_type)gt->type);
    size_t row_bytes = qt ? quant_row_size((enum quant_type)gt->type, gt->ne[0]) : 0;
    if (!qt || !qt->to_float || row_bytes == 0) {
        b->rc = nb_errf(b->err, b->errlen, NB_ENOTSUP, "%s: type %s (%u) cannot be dequantized", name,
                        quant_type_name((enum quant_type)gt->type), gt->type);
        return;
    }
    t->data = gt->data;
    t->qt = qt;
    t->type = (enum quant_type)gt->type;
    memcpy(t->ne, gt->ne, sizeof t->ne);
    t->row_bytes = row_bytes;
    t->mat_bytes = row_bytes * (size_t)gt->ne[1];
    t->name = gt->name;
}

/* A hyper-connection's tensors: prefix "blk.N.hc_attn", "output_hc", ... */
static void bind_hc(struct binder *b, const struct model_hparams *hp, struct model_hc *hc, bool inject,
                    const char *prefix)
{
    int64_t wide = model_wide(hp);
    bind(b, &hc->norm, REQUIRED, S1(wide), "%s_norm.weight", prefix);
    bind(b, &hc->down, REQUIRED, S2(wide, hp->hc_rank), "%s_down.weight", prefix);
    bind(b, &hc->up, REQUIRED, S2(hp->hc_rank, wide), "%s_up.weight", prefix);
    if (inject) bind(b, &hc->inject, REQUIRED, S2(wide, hp->hc_count), "%s_inject.weight", prefix);
}

static void bind_gdn(struct binder *b, const struct model_hparams *hp, struct model_gdn *w, int il)
{
    int64_t C = hp->n_embd, Hv = hp->ssm_n_v_heads, vdim = model_gdn_v_dim(hp);
    int64_t conv_dim = model_gdn_conv_dim(hp);
    bind(b, &w->qkv, REQUIRED, S2(C, conv_dim), "blk.%d.attn_qkv.weight", il);
    bind(b, &w->gate, REQUIRED, S2(C, vdim), "blk.%d.attn_gate.weight", il);
    bind(b, &w->conv, REQUIRED, S2(hp->ssm_conv_kernel, conv_dim), "blk.%d.ssm_conv1d.weight", il);
    bind(b, &w->dt_bias, REQUIRED, S1(Hv), "blk.%d.ssm_dt.bias", il);
    bind(b, &w->a, REQUIRED, S1(Hv), "blk.%d.ssm_a", il);
    bind(b, &w->alpha, REQUIRED, S2(C, Hv), "blk.%d.ssm_alpha.weight", il);
    bind(b, &w->beta, REQUIRED, S2(C, Hv), "blk.%d.ssm_beta.weight", il);
    bind(b, &w->norm, REQUIRED, S1(hp->ssm_v_head_dim), "blk.%d.ssm_norm.weight", il);
    bind(b, &w->out, REQUIRED, S2(vdim, C), "blk.%d.ssm_out.weight", il);
}

/* Attention; the indexer is required only when the layer selects (ratio > 0). */
static void bind_attn(struct binder *b, const struct model_hparams *hp, struct model_attn *w, int il, bool indexer)
{
    int64_t C = hp->n_embd, D = hp->head_dim, kv = (int64_t)hp->n_head_kv * D;
    bind(b, &w->q, REQUIRED, S2(C, 2 * hp->n_head * D), "blk.%d.attn_q.weight", il);
    bind(b, &w->k, REQUIRED, S2(C, kv), "blk.%d.attn_k.weight", il);
    bind(b, &w->v, REQUIRED, S2(C, kv), "blk.%d.attn_v.weight", il);
    bind(b, &w->o, REQUIRED, S2(hp->n_head * D, C), "blk.%d.attn_output.weight", il);
    bind(b, &w->q_norm, REQUIRED, S1(D), "blk.%d.attn_q_norm.weight", il);
    bind(b, &w->k_norm, REQUIRED, S1(D), "blk.%d.attn_k_norm.weight", il);
    if (!indexer) return; /* dense layers (MTP) may carry indexer tensors; they are unused */
    int64_t Di = hp->idx_head_dim;
    bind(b, &w->idx_q, REQUIRED, S2(C, (int64_t)hp->idx_n_head * Di), "blk.%d.indexer.q_proj.weight", il);
    bind(b, &w->idx_k, REQUIRED, S2(C, Di), "blk.%d.indexer.k_proj.weight", il);
    bind(b, &w->idx_q_norm, REQUIRED, S1(Di), "blk.%d.indexer.q_norm.weight", il);
    bind(b, &w->idx_k_norm, REQUIRED, S1(Di), "blk.%d.indexer.k_norm.weight", il);
}

static void bind_moe(struct binder *b, const struct model_hparams *hp, struct model_moe *w, int il)
{
    int64_t C = hp->n_embd, E = hp->n_expert, I = hp->n_ff_exp, Is = hp->n_ff_shexp;
    bind(b, &w->router, REQUIRED, S2(C, E), "blk.%d.ffn_gate_inp.weight", il);
    bind(b, &w->gate_exps, OPTIONAL, S3(C, I, E), "blk.%d.ffn_gate_exps.weight", il);
    if (w->gate_exps.data || b->rc) {
        bind(b, &w->up_exps, REQUIRED, S3(C, I, E), "blk.%d.ffn_up_exps.weight", il);
    } else {
        struct model_tensor fused;
        bind(b, &fused, OPTIONAL, S3(C, 2 * I, E), "blk.%d.ffn_gate_up_exps.weight", il);
        if (!fused.data && !b->rc)
            b->rc = nb_errf(b->err, b->errlen, NB_ENOENT,
                            "blk.%d.ffn_gate_exps.weight: required tensor missing (no ffn_gate_up_exps either)", il);
        /* Views: expert e's gate rows start at e·mat_bytes, its up rows I rows later. */
        w->gate_exps = fused;
        w->gate_exps.ne[1] = I;
        w->up_exps = w->gate_exps;
        w->up_exps.data = fused.data ? fused.data + (size_t)I * fused.row_bytes : NULL;
        w->fused_gate_up = true;
    }
    bind(b, &w->down_exps, REQUIRED, S3(I, C, E), "blk.%d.ffn_down_exps.weight", il);
    bind(b, &w->shexp_gate, REQUIRED, S1(C), "blk.%d.ffn_gate_inp_shexp.weight", il);
    bind(b, &w->gate_shexp, REQUIRED, S2(C, Is), "blk.%d.ffn_gate_shexp.weight", il);
    bind(b, &w->up_shexp, REQUIRED, S2(C, Is), "blk.%d.ffn_up_shexp.weight", il);
    bind(b, &w->down_shexp, REQUIRED, S2(Is, C), "blk.%d.ffn_down_shexp.weight", il);
}

static void bind_ple(struct binder *b, const struct model_hparams *hp, struct model_ple_weights *w, int il)
{
    int64_t C = hp->n_embd, P = hp->ple_embd, wide = model_wide(hp);
    bind(b, &w->key, REQUIRED, S2(P, wide), "blk.%d.ple_key.weight", il);
    bind(b, &w->value, REQUIRED, S2(P, C), "blk.%d.ple_value.weight", il);
    bind(b, &w->norm_key, REQUIRED, S1(wide), "blk.%d.ple_norm_key.weight", il);
    bind(b, &w->norm_query, REQUIRED, S1(wide), "blk.%d.ple_norm_query.weight", il);
    bind(b, &w->norm_conv, REQUIRED, S1(wide), "blk.%d.ple_norm_conv.weight", il);
    bind(b, &w->conv, REQUIRED, S2(hp->ple_conv_kernel, wide), "blk.%d.ple_conv1d.weight", il);
}

/* The table's row count is the file's (padded); it must cover every head's range. */
static void bind_ple_table(struct binder *b, struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    const struct gguf_tensor *gt = gguf_find_tensor(b->g, "per_layer_token_embd.weight");
    int64_t rows_needed = 0;
    for (int h = 0; h < hp->ple_n_heads; h++)
        if (hp->ple_offset[h] + hp->ple_vocab[h] > rows_needed) rows_needed = hp->ple_offset[h] + hp->ple_vocab[h];
    int64_t rows = gt && gt->ne[1] >= rows_needed ? gt->ne[1] : rows_needed;
    bind(b, &m->ple_table, REQUIRED, S2(hp->ple_row_width, rows), "per_layer_token_embd.weight");
}

static void bind_nextn(struct binder *b, struct model *m, struct model_layer *l, int il)
{
    const struct model_hparams *hp = &m->hp;
    int64_t C = hp->n_embd;
    struct model_nextn *w = &l->nextn;
    bind(b, &w->eh_proj, REQUIRED, S2(2 * C, C), "blk.%d.nextn.eh_proj.weight", il);
    bind(b, &w->enorm, REQUIRED, S1(C), "blk.%d.nextn.enorm.weight", il);
    bind(b, &w->hnorm, REQUIRED, S1(model_wide(hp)), "blk.%d.nextn.hnorm.weight", il);
    bind(b, &w->embed_tokens, OPTIONAL, S2(C, hp->n_vocab), "blk.%d.nextn.embed_tokens.weight", il);
    bind(b, &w->shared_head, OPTIONAL, S2(C, hp->n_vocab), "blk.%d.nextn.shared_head_head.weight", il);
    /* Own head mixer if present (#27836 layout), else the trunk's (docs/CONVERSION.md §3.6). */
    char prefix[64], probe[96];
    snprintf(prefix, sizeof prefix, "blk.%d.nextn.hc_head", il);
    snprintf(probe, sizeof probe, "%s_norm.weight", prefix);
    if (gguf_find_tensor(b->g, probe)) {
        bind_hc(b, hp, &w->head, false, prefix);
        return;
    }
    /* An MTP-only file of the revision that drops the mixer from the trunk
     * file keeps the draft head's as output_hc_* (docs/CONVERSION.md §3.6). */
    if (b->g != m->gguf && gguf_find_tensor(b->g, "output_hc_norm.weight")) {
        bind_hc(b, hp, &w->head, false, "output_hc");
        return;
    }
    w->head = m->output_hc;
    m->nextn_uses_trunk_head = true;
}

static void bind_layer(struct binder *b, struct model *m, int il)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    char prefix[64];
    snprintf(prefix, sizeof prefix, "blk.%d.hc_attn", il);
    bind_hc(b, hp, &l->hc_attn, true, prefix);
    snprintf(prefix, sizeof prefix, "blk.%d.hc_ffn", il);
    bind_hc(b, hp, &l->hc_ffn, true, prefix);
    if (l->kind == MODEL_LAYER_GDN)
        bind_gdn(b, hp, &l->gdn, il);
    else
        bind_attn(b, hp, &l->attn, il, l->compress_ratio > 0);
    bind_moe(b, hp, &l->moe, il);
    if (l->has_ple) bind_ple(b, hp, &l->ple, il);
    if (l->is_nextn) bind_nextn(b, m, l, il);
}

int model_bind_tensors(struct model *m, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct binder b = {m->gguf, err, errlen, 0};
    bind(&b, &m->tok_embd, REQUIRED, S2(hp->n_embd, hp->n_vocab), "token_embd.weight");
    bind(&b, &m->output, OPTIONAL, S2(hp->n_embd, hp->n_vocab), "output.weight");
    if (!m->output.data) m->output = m->tok_embd;
    bind_hc(&b, hp, &m->output_hc, false, "output_hc");
    if (hp->ple_layer >= 0) bind_ple_table(&b, m);
    for (int il = 0; il < hp->n_layer && !b.rc; il++) bind_layer(&b, m, il);
    if (b.rc || hp->n_nextn == 0) return b.rc;
    /* The MTP block, from the separate MTP file when there is one. */
    char why[768] = "";
    struct binder bm = {m->mtp_gguf ? m->mtp_gguf : m->gguf, why, sizeof why, 0};
    bind_layer(&bm, m, hp->n_layer);
    if (bm.rc && m->mtp_gguf) return nb_errf(err, errlen, bm.rc, "MTP file %s: %s", m->mtp_path, why);
    if (bm.rc) return nb_errf(err, errlen, bm.rc, "%s", why);
    return 0;
}
