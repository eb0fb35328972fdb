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

/* Rows of a prefill chunk the scratch estimate provides for (the pipeline's
 * prefill chunks are at most this; a larger batch may need more). */
#define VRAM_BATCH 512

bool gw_vram_native_type(int type)
{
    switch (type) {
    case QT_F32: case QT_F16: case QT_Q4_0: case QT_Q5_0: case QT_Q5_1: case QT_Q8_0:
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_NL: case QT_BF16: return true;
    default: return false;
    }
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
            f += (uint64_t)(hp->ssm_conv_kernel - 1) * model_gdn_conv_dim(hp) +
                 (uint64_t)hp->ssm_n_v_heads * hp->ssm_head_dim * hp->ssm_head_dim;
        if (!l->is_nextn && l->has_ple) f += (uint64_t)(hp->ple_conv_kernel - 1) * hp->ple_dilation * model_wide(hp);
    }
    return 4 * f;
}

/* Temporaries of one eval of T rows: the largest sublayer's (the MoE's pairs,
 * the attention's probabilities, capped at 64 Mi floats as the backend
 * caps them) plus the residual streams, and the logits of every row. */
static uint64_t batch_bytes(const struct model *m, int64_t T, int64_t n_ctx)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t C = hp->n_embd, W = model_wide(hp), k = hp->n_expert_used;
    const uint64_t moe = (uint64_t)hp->n_expert + k * (2 * (uint64_t)hp->n_ff_exp + 2 * C + 3) + 3 * (uint64_t)hp->n_ff_shexp + C;
    const uint64_t gdn = 2 * (uint64_t)model_gdn_conv_dim(hp) + 2 * (uint64_t)hp->ssm_n_v_heads * hp->ssm_head_dim;
    const uint64_t qw = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t probs = (uint64_t)hp->n_head * (uint64_t)n_ctx * (uint64_t)T;
    if (probs > ((uint64_t)64 << 20)) probs = (uint64_t)64 << 20;
    uint64_t layer = moe > gdn ? moe : gdn;
    if (5 * qw > layer) layer = 5 * qw;
    return 4 * ((uint64_t)T * (3 * W + 3 * C + layer + hp->n_vocab) + probs);
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
    const int64_t T = n_ctx < VRAM_BATCH ? n_ctx : VRAM_BATCH;
    p->scratch = gw_vram_arena_bytes(m, n_ctx) + batch_bytes(m, T, n_ctx);
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

uint64_t gw_vram_worker_budget(uint64_t given, uint64_t placement_weights, const struct gw_vram_parts *p)
{
    if (given) return given;
    return placement_weights ? placement_weights + p->kv + p->scratch : 0;
}
