/* vram.c — what a CUDA backend's device memory is made of, computed on the
 * host, and the budget check (issue 5: `--vram-budget`).
 *
 * The CUDA backend (gpu-worker/cuda/backend_cuda.cu) holds five things: the
 * dense weights (everything but routed experts; formats without a device
 * decoder widened to F32, small tensors as F32), the MTP block's dense
 * weights, one sequence's state, the local experts' slots and temporaries.
 * The first two it measures as it uploads them; the others are the formulas
 * here, which the backend and the gpu-worker process share, so the check
 * made before anything is uploaded and the one made by the backend agree.
 * This file needs no CUDA: it is part of every build and unit-tested
 * (tests/gpu-worker/test_vram.c). */
#include "gpu-worker/backend.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"

/* Device memory the backend holds beyond its own allocations: the
 * stream-ordered pool reserves whole chunks for the temporaries, and CUDA
 * loads kernel modules lazily at their first launch (after the backend's
 * baseline is measured). */
#define VRAM_SLACK ((uint64_t)64 << 20)

bool gw_vram_native_type(int type)
{
    switch (type) {
    case QT_F32: case QT_F16: case QT_Q4_0: case QT_Q5_0: case QT_Q5_1: case QT_Q8_0:
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_NL: case QT_BF16: return true;
    default: return false;
    }
}

/* ---- dense weights as the device holds them ----
 * The same walk and rules as the backend's upload (backend_cuda.cu up_mat,
 * up_f32, up_layer, cuda_setup): a matrix keeps its bytes when the device
 * decodes its type, else it is widened to F32; a small tensor (norms, conv
 * taps, biases) is always F32; a matrix already uploaded (same host data,
 * device type and shape: a tied head, the MTP block's fallback embedding) is
 * not uploaded again.  nebula-prepare pays its placement's dense bytes with
 * this too, so a placement made for a budget fits the worker's check. */
struct dense_walk {
    const struct model_tensor **seen; /* matrices uploaded so far */
    int n_seen, cap_seen;
    uint64_t *acct; /* dense or mtp */
    bool oom;
};

static bool same_upload(const struct model_tensor *a, const struct model_tensor *b)
{
    return a->data == b->data && gw_vram_native_type(a->type) == gw_vram_native_type(b->type) &&
           (!gw_vram_native_type(a->type) || a->type == b->type) && a->ne[0] == b->ne[0] && a->ne[1] == b->ne[1];
}

static void walk_mat(struct dense_walk *d, const struct model_tensor *t)
{
    if (!t->data) return;
    for (int i = 0; i < d->n_seen; i++)
        if (same_upload(d->seen[i], t)) return;
    if (d->n_seen == d->cap_seen) {
        int cap = d->cap_seen ? 2 * d->cap_seen : 256;
        const struct model_tensor **s = realloc(d->seen, (size_t)cap * sizeof *s);
        if (!s) {
            d->oom = true;
            return;
        }
        d->seen = s, d->cap_seen = cap;
    }
    d->seen[d->n_seen++] = t;
    const uint64_t n_mat = (uint64_t)t->ne[2] * (uint64_t)t->ne[3], rows = (uint64_t)t->ne[1];
    *d->acct += gw_vram_native_type(t->type) ? n_mat * rows * t->row_bytes : n_mat * rows * (uint64_t)t->ne[0] * 4;
}

static void walk_f32(struct dense_walk *d, const struct model_tensor *t)
{
    if (t->data) *d->acct += 4 * (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

static void walk_hc(struct dense_walk *d, const struct model_hc *h)
{
    walk_mat(d, &h->down), walk_mat(d, &h->up), walk_mat(d, &h->inject), walk_f32(d, &h->norm);
}

static void walk_layer(struct dense_walk *d, const struct model *m, const struct model_layer *l)
{
    walk_hc(d, &l->hc_attn), walk_hc(d, &l->hc_ffn);
    walk_mat(d, &l->gdn.qkv), walk_mat(d, &l->gdn.gate), walk_mat(d, &l->gdn.alpha), walk_mat(d, &l->gdn.beta);
    walk_mat(d, &l->gdn.out);
    walk_f32(d, &l->gdn.conv), walk_f32(d, &l->gdn.dt_bias), walk_f32(d, &l->gdn.a), walk_f32(d, &l->gdn.norm);
    walk_mat(d, &l->attn.q), walk_mat(d, &l->attn.k), walk_mat(d, &l->attn.v), walk_mat(d, &l->attn.o);
    walk_mat(d, &l->attn.idx_q), walk_mat(d, &l->attn.idx_k);
    walk_f32(d, &l->attn.q_norm), walk_f32(d, &l->attn.k_norm), walk_f32(d, &l->attn.idx_q_norm);
    walk_f32(d, &l->attn.idx_k_norm);
    walk_mat(d, &l->moe.router);
    walk_mat(d, &l->moe.gate_shexp), walk_mat(d, &l->moe.up_shexp), walk_mat(d, &l->moe.down_shexp);
    walk_f32(d, &l->moe.shexp_gate);
    walk_mat(d, &l->ple.key), walk_mat(d, &l->ple.value);
    walk_f32(d, &l->ple.norm_key), walk_f32(d, &l->ple.norm_query), walk_f32(d, &l->ple.norm_conv);
    walk_f32(d, &l->ple.conv);
    if (l->is_nextn) {
        walk_mat(d, &l->nextn.eh_proj);
        walk_f32(d, &l->nextn.enorm), walk_f32(d, &l->nextn.hnorm);
        walk_hc(d, &l->nextn.head);
        walk_mat(d, l->nextn.embed_tokens.data ? &l->nextn.embed_tokens : &m->tok_embd);
        walk_mat(d, l->nextn.shared_head.data ? &l->nextn.shared_head : &m->output);
    }
}

int gw_vram_dense_bytes(const struct model *m, uint64_t *dense, uint64_t *mtp, char *err, size_t errlen)
{
    *dense = 0, *mtp = 0;
    struct dense_walk d = {.acct = dense};
    walk_mat(&d, &m->tok_embd), walk_mat(&d, &m->output), walk_hc(&d, &m->output_hc), walk_mat(&d, &m->ple_table);
    for (int i = 0; i < m->hp.n_layer + m->hp.n_nextn; i++) {
        d.acct = m->layers[i].is_nextn ? mtp : dense;
        walk_layer(&d, m, &m->layers[i]);
    }
    free(d.seen);
    return d.oom ? nb_errf(err, errlen, NB_ENOMEM, "out of memory sizing the dense weights") : 0;
}

/* One expert matrix of t (rows ne[1] of ne[0] values) on the device. */
static uint64_t mat_bytes(const struct model_tensor *t)
{
    if (!t->data) return 0;
    return gw_vram_native_type(t->type) ? (uint64_t)t->ne[1] * t->row_bytes : (uint64_t)t->ne[1] * (uint64_t)t->ne[0] * 4;
}

uint64_t gw_vram_expert_bytes(const struct model *m, int il)
{
    const struct model_moe *w = &m->layers[il].moe;
    return mat_bytes(&w->gate_exps) + mat_bytes(&w->up_exps) + mat_bytes(&w->down_exps);
}

int64_t gw_vram_default_ctx(const struct model *m) { return m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 32768; }

uint64_t gw_vram_arena_bytes(const struct model *m, int64_t cap)
{
    const struct model_hparams *hp = &m->hp;
    return ((uint64_t)64 << 20) + 4 * ((uint64_t)2 * hp->n_vocab + (uint64_t)hp->n_head * cap + 2 * (uint64_t)cap + 2 * 1024);
}

static uint64_t kv_bytes(const struct model *m, int64_t n)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t kvw = (uint64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim;
    uint64_t f = 0; /* floats */
    for (int i = 0; i < hp->n_layer + hp->n_nextn; i++) {
        const struct model_layer *l = &m->layers[i];
        if (l->is_nextn || l->kind == MODEL_LAYER_ATTN) f += 2 * (uint64_t)n * kvw;
        if (!l->is_nextn && l->kind == MODEL_LAYER_ATTN && l->compress_ratio > 0)
            f += (uint64_t)n * Di + ((uint64_t)n / l->compress_ratio + 1) * Di;
        if (!l->is_nextn && l->kind == MODEL_LAYER_GDN)
            f += (uint64_t)(model_gdn_conv_state_floats(hp) + model_gdn_ssm_state_floats(hp));
        if (!l->is_nextn && l->has_ple) f += (uint64_t)model_ple_conv_state_floats(hp);
    }
    return 4 * f;
}

/* Temporaries of one eval of T rows: the largest sublayer's (the MoE's pairs,
 * the attention's probabilities, capped at 64 Mi floats as the backend
 * caps them) plus the residual streams, and the head's: the backend computes
 * logits GW_VRAM_HEAD_ROWS rows at a time (its mixed rows, logits and
 * argmax), so a prefill chunk's logits never need T × vocabulary floats. */
static uint64_t batch_bytes(const struct model *m, int64_t T, int64_t n_ctx)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t C = hp->n_embd, W = model_wide(hp), k = hp->n_expert_used;
    /* per row: router probabilities, the k pairs' gate/up/down/contribution rows and weights, the shared
     * expert, and with remote experts the miss list (3k + 1), their weights (k) and their results (k·C) */
    const uint64_t moe = (uint64_t)hp->n_expert + k * (2 * (uint64_t)hp->n_ff_exp + 2 * C + 3) + 3 * (uint64_t)hp->n_ff_shexp + C +
                         k * (C + 4) + 1;
    const uint64_t gdn = 2 * (uint64_t)model_gdn_conv_dim(hp) + 2 * (uint64_t)model_gdn_v_dim(hp); /* qkv, mixed; z, o */
    const uint64_t qw = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t probs = (uint64_t)hp->n_head * (uint64_t)n_ctx * (uint64_t)T;
    if (probs > ((uint64_t)64 << 20)) probs = (uint64_t)64 << 20;
    uint64_t layer = moe > gdn ? moe : gdn;
    if (5 * qw > layer) layer = 5 * qw;
    const uint64_t R = T < GW_VRAM_HEAD_ROWS ? (uint64_t)T : GW_VRAM_HEAD_ROWS;
    return 4 * ((uint64_t)T * (3 * W + 3 * C + layer) + probs + R * (C + (uint64_t)hp->n_vocab + 1));
}

static uint64_t scratch_bytes(const struct model *m, int64_t n_ctx)
{
    const int64_t T = n_ctx < GW_VRAM_BATCH_ROWS ? n_ctx : GW_VRAM_BATCH_ROWS;
    return gw_vram_arena_bytes(m, n_ctx) + batch_bytes(m, T, n_ctx) + VRAM_SLACK;
}

void gw_vram_plan(const struct model *m, const uint8_t *local, int64_t n_ctx, struct gw_vram_parts *p)
{
    const struct model_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = gw_vram_default_ctx(m);
    p->n_ctx = n_ctx;
    p->slots = 0, p->n_slots = 0;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        const uint64_t eb = gw_vram_expert_bytes(m, il);
        for (int e = 0; e < hp->n_expert; e++)
            if (!local || local[(size_t)il * hp->n_expert + e]) p->slots += eb, p->n_slots++;
    }
    p->kv = kv_bytes(m, n_ctx);
    p->scratch = scratch_bytes(m, n_ctx);
}

uint64_t gw_vram_total(const struct gw_vram_parts *p) { return p->dense + p->mtp + p->kv + p->slots + p->scratch; }

static void mib(uint64_t b, char *buf, size_t n) { snprintf(buf, n, "%.1f MiB (%" PRIu64 " B)", (double)b / 1048576.0, b); }

int gw_vram_check(const struct gw_vram_parts *p, uint64_t budget, char *err, size_t errlen)
{
    const uint64_t total = gw_vram_total(p);
    if (budget == 0 || total <= budget) return 0;
    char b[6][48];
    mib(p->dense, b[0], sizeof b[0]), mib(p->mtp, b[1], sizeof b[1]), mib(p->kv, b[2], sizeof b[2]);
    mib(p->slots, b[3], sizeof b[3]), mib(p->scratch, b[4], sizeof b[4]), mib(budget, b[5], sizeof b[5]);
    return nb_errf(err, errlen, NB_ENOMEM,
                   "the VRAM budget of %s is %.1f MiB short: dense weights %s + MTP %s + K/V and state for %lld "
                   "positions %s + %lld expert slots %s + scratch %s = %.1f MiB",
                   b[5], (double)(total - budget) / 1048576.0, b[0], b[1], (long long)p->n_ctx, b[2],
                   (long long)p->n_slots, b[3], b[4], (double)total / 1048576.0);
}

int gw_vram_parse_bytes(const char *s, uint64_t *out, char *err, size_t errlen)
{
    char *end = NULL;
    double v = s && *s ? strtod(s, &end) : NAN;
    double mul = 1;
    const bool digits = end && end != s;
    if (digits && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0, end++; break;
        case 'm': case 'M': mul = 1048576.0, end++; break;
        case 'g': case 'G': mul = 1073741824.0, end++; break;
        case 't': case 'T': mul = 1099511627776.0, end++; break;
        default: break;
        }
        if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (!digits || *end || !(v >= 0) || v * mul >= 18446744073709551616.0)
        return nb_errf(err, errlen, NB_EINVAL, "\"%s\" is not a byte count (like 123, 512M, 80G)", s ? s : "");
    *out = (uint64_t)(v * mul);
    return 0;
}

uint64_t gw_vram_reserve(const struct model *m, int64_t n_ctx)
{
    if (n_ctx <= 0) n_ctx = gw_vram_default_ctx(m);
    return kv_bytes(m, n_ctx) + scratch_bytes(m, n_ctx);
}

uint64_t gw_vram_worker_budget(uint64_t given, uint64_t placement_budget, bool placement_total, const struct gw_vram_parts *p)
{
    if (given) return given;
    if (!placement_budget) return 0;
    return placement_total ? placement_budget : placement_budget + p->kv + p->scratch;
}
