/* vram.c — what a CUDA backend's device memory is made of, computed on the
 * host, and the budget check (issue 5: `--vram-budget`).
 *
 * The CUDA backend (gpu-worker/cuda/, its blocks in memory.cu) holds five things: the
 * dense weights (everything but routed experts; formats without a device
 * decoder widened to F32, small tensors as F32), the MTP block's dense
 * weights, one sequence's state, the local experts' slots and temporaries.
 * The one idea: the backend sizes every device block it allocates with the
 * functions here — the dense walk, the slot, state and K/V layouts, the
 * capacities it grows to — so the plan is the sum of the very blocks the
 * backend asks the driver for (gw_vram_allocs lists them), plus one page of
 * the driver's rounding per block, the pool's temporaries (an estimate: the
 * batch) and a slack for what the driver itself loads.  The gpu-worker
 * process and nebula-prepare share them, so the check made before anything
 * is uploaded and the one made by the backend agree.  This file needs no
 * CUDA: it is part of every build and unit-tested
 * (tests/engine/test_vram.c). */
#include "engine/vram.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "gpu-worker/cuda/cuda_types.h"

/* Device memory the backend holds beyond its own blocks: the stream-ordered
 * pool reserves whole chunks for the temporaries, and CUDA loads kernel
 * modules lazily at their first launch and makes graphs' executables (after
 * the backend's baseline is measured). */
#define VRAM_SLACK ((uint64_t)64 << 20)
/* The step's position, token and mailbox counters: words in the dense block. */
#define VRAM_STEP_WORDS 3
/* RoPE tables cover at least this many positions. */
#define VRAM_ROPE_MIN 1024

uint64_t gw_vram_align(uint64_t bytes) { return (bytes + GW_VRAM_ALIGN - 1) / GW_VRAM_ALIGN * GW_VRAM_ALIGN; }

bool gw_vram_native_type(int type)
{
#define STORED(t, fast_decoder) case t:
    switch (type) {
    GW_CUDA_TYPES(STORED) return true;
    default: return false;
    }
#undef STORED
}

int gw_vram_device_type(int type) { return gw_vram_native_type(type) ? type : QT_F32; }

/* Bytes of one row of t as the device holds it. */
static uint64_t device_row_bytes(const struct model_tensor *t)
{
    return quant_row_size((enum quant_type)gw_vram_device_type(t->type), t->ne[0]);
}

/* ---- dense weights as the device holds them ----
 * The same walk and rules as the backend's upload (gpu-worker/cuda/upload.cu cu_up_mat,
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
    *d->acct += gw_vram_align(n_mat * rows * device_row_bytes(t));
}

static void walk_f32(struct dense_walk *d, const struct model_tensor *t)
{
    if (t->data) *d->acct += gw_vram_align(4 * (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3]);
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
    /* each layer's expert → slot table, and the step's words */
    *dense += (uint64_t)(m->hp.n_layer + m->hp.n_nextn) * gw_vram_align((uint64_t)m->hp.n_expert * 4) +
              VRAM_STEP_WORDS * (uint64_t)GW_VRAM_ALIGN;
    free(d.seen);
    return d.oom ? nb_errf(err, errlen, NB_ENOMEM, "out of memory sizing the dense weights") : 0;
}

uint64_t gw_vram_ple_table_bytes(const struct model *m)
{
    const struct model_tensor *t = &m->ple_table;
    if (!t->data) return 0;
    return gw_vram_align((uint64_t)t->ne[2] * (uint64_t)t->ne[3] * (uint64_t)t->ne[1] * device_row_bytes(t)); /* as walk_mat */
}

/* One expert matrix of t (rows ne[1] of ne[0] values) on the device. */
static uint64_t mat_bytes(const struct model_tensor *t)
{
    if (!t->data) return 0;
    return (uint64_t)t->ne[1] * device_row_bytes(t);
}

uint64_t gw_vram_expert_bytes(const struct model *m, int il)
{
    const struct model_moe *w = &m->layers[il].moe;
    return mat_bytes(&w->gate_exps) + mat_bytes(&w->up_exps) + mat_bytes(&w->down_exps);
}

uint64_t gw_vram_slot_layout(const struct model *m, int il, int64_t n, uint64_t off[3])
{
    const struct model_moe *w = &m->layers[il].moe;
    const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
    uint64_t at = 0;
    for (int j = 0; j < 3; j++) {
        if (off) off[j] = at;
        at += gw_vram_align((uint64_t)(n > 0 ? n : 0) * mat_bytes(ts[j]));
    }
    return at;
}

int64_t gw_vram_default_ctx(const struct model *m) { return m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : 32768; }

int64_t gw_vram_capacity(enum gw_grow kind, int64_t cur, int64_t need, int64_t n_ctx, bool fixed)
{
    const int64_t floor = kind == GW_GROW_ROPE ? VRAM_ROPE_MIN : 64;
    int64_t planned = kind == GW_GROW_KV ? n_ctx : n_ctx + GW_VRAM_PAST_CTX;
    if (kind == GW_GROW_ROPE && planned < VRAM_ROPE_MIN) planned = VRAM_ROPE_MIN;
    if (need <= cur) return cur;
    if (fixed) return need > planned ? need : planned;
    int64_t cap = cur * 2 > need ? cur * 2 : need < floor ? floor : need;
    if (cap > planned && need <= planned) cap = planned; /* doubling stops at the context */
    return cap;
}

/* Lays arrays of the given bytes out one after another from *at (off: their offsets; 0 bytes: none, UINT64_MAX). */
static void lay(uint64_t *at, uint64_t *off, uint64_t bytes)
{
    if (off) *off = bytes ? *at : UINT64_MAX;
    *at += gw_vram_align(bytes);
}

/* Layer l's GDN conv state and recurrent state (off[0], off[1]), then its PLE
 * conv state (off[2]); rows > 0 (the verify checkpoint): after the two GDN
 * states that many rows of its inputs, after the PLE state its conv's. */
static void lay_states(uint64_t *at, uint64_t *off, const struct model_hparams *hp, const struct model_layer *l, uint64_t rows)
{
    const bool gdn = l->kind == MODEL_LAYER_GDN, ck = rows > 0;
    const uint64_t cd = (uint64_t)model_gdn_conv_dim(hp), Hv = (uint64_t)hp->ssm_n_v_heads;
    lay(at, off ? &off[0] : NULL, gdn ? 4 * (uint64_t)model_gdn_conv_state_floats(hp) : 0);
    lay(at, off ? &off[1] : NULL, gdn ? 4 * (uint64_t)model_gdn_ssm_state_floats(hp) : 0);
    if (ck) lay(at, off ? &off[2] : NULL, gdn ? 4 * rows * (2 * cd + 2 * Hv) : 0);
    lay(at, off ? &off[2 + ck] : NULL, l->has_ple ? 4 * (uint64_t)model_ple_conv_state_floats(hp) : 0);
    if (ck) lay(at, off ? &off[4] : NULL, l->has_ple ? 4 * rows * (uint64_t)model_wide(hp) : 0);
}

uint64_t gw_vram_state_layout(const struct model *m, uint64_t (*off)[3])
{
    uint64_t at = 0;
    for (int i = 0; i < m->hp.n_layer; i++) lay_states(&at, off ? off[i] : NULL, &m->hp, &m->layers[i], 0);
    return at;
}

uint64_t gw_vram_verify_layout(const struct model *m, uint64_t (*off)[GW_VRAM_VERIFY_ARRAYS])
{
    uint64_t at = 0;
    for (int i = 0; i < m->hp.n_layer; i++) lay_states(&at, off ? off[i] : NULL, &m->hp, &m->layers[i], GW_VERIFY_ROWS);
    return at;
}

uint64_t gw_vram_kv_layout(const struct model *m, int64_t cap, uint64_t (*off)[4])
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t kvw = (uint64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim, n = cap > 0 ? (uint64_t)cap : 0;
    uint64_t at = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        const struct model_layer *l = &m->layers[i];
        const bool attn = l->kind == MODEL_LAYER_ATTN, qsa = attn && l->compress_ratio > 0;
        lay(&at, off ? &off[i][0] : NULL, attn ? 4 * n * kvw : 0);
        lay(&at, off ? &off[i][1] : NULL, attn ? 4 * n * kvw : 0);
        lay(&at, off ? &off[i][2] : NULL, qsa ? 4 * n * Di : 0);
        lay(&at, off ? &off[i][3] : NULL, qsa ? 4 * (n / (uint64_t)l->compress_ratio + 1) * Di : 0);
    }
    return at;
}

uint64_t gw_vram_mtp_kv_bytes(const struct model *m, int64_t cap)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->n_nextn <= 0) return 0;
    return 2 * gw_vram_align(4 * (uint64_t)(cap > 0 ? cap : 0) * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim);
}

uint64_t gw_vram_rope_bytes(const struct model *m, int64_t cap)
{
    return 2 * gw_vram_align(4 * (uint64_t)(cap > 0 ? cap : 0) * (uint64_t)(m->hp.rope_dim / 2));
}

/* Floats of T ≤ GW_VERIFY_ROWS rows' attention temporaries: the reference kernel's probabilities (a row's
 * visible positions a head) or the split-K kernel's partials and kept-block lists, whichever is larger. */
static uint64_t attn_floats(const struct model_hparams *hp, int64_t T, int64_t n_ctx)
{
    const uint64_t probs = (uint64_t)hp->n_head * (uint64_t)n_ctx * (uint64_t)T;
    const uint64_t split = (uint64_t)T * ((uint64_t)hp->n_head * GW_ATTN_SPLITS * ((uint64_t)hp->head_dim + 2) +
                                          (uint64_t)(hp->idx_top_k > 0 ? hp->idx_top_k : 1));
    return probs > split ? probs : split;
}

static uint64_t batch_bytes(const struct model *m, int64_t T, int64_t n_ctx);

/* The larger of a one-token step's temporaries (64 MiB, the logits, attention, the indexer's scores and flags)
 * and a verify window's (64 MiB on top of the pool's sum of GW_VERIFY_ROWS rows' temporaries, their scores and
 * flags): the graphs of both take theirs from the arena. */
uint64_t gw_vram_arena_bytes(const struct model *m, int64_t cap)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t step =
        ((uint64_t)64 << 20) + 4 * ((uint64_t)2 * hp->n_vocab + attn_floats(hp, 1, cap) + 2 * (uint64_t)cap + 2 * 1024);
    const uint64_t window = ((uint64_t)64 << 20) + batch_bytes(m, GW_VERIFY_ROWS, cap) +
                            4 * ((uint64_t)2 * GW_VERIFY_ROWS * (uint64_t)(cap > 0 ? cap : 0) + 2 * 1024);
    return step > window ? step : window;
}

/* One sequence's state at the capacities the backend gives it for n positions, and the RoPE tables. */
static uint64_t kv_bytes(const struct model *m, int64_t n)
{
    return gw_vram_state_layout(m, NULL) + gw_vram_verify_layout(m, NULL) +
           gw_vram_kv_layout(m, gw_vram_capacity(GW_GROW_KV, 0, 1, n, true), NULL) +
           gw_vram_mtp_kv_bytes(m, gw_vram_capacity(GW_GROW_MTP, 0, 1, n, true)) +
           gw_vram_rope_bytes(m, gw_vram_capacity(GW_GROW_ROPE, 0, 1, n, true));
}

/* The device blocks (one cudaMalloc each): dense weights, slots, the
 * sequence's fixed state, its K/V, the MTP K/V, the RoPE tables, the arena,
 * the verify checkpoint. */
static int n_blocks(const struct model *m) { return 6 + (m->hp.n_nextn > 0) + (gw_vram_verify_layout(m, NULL) > 0); }

/* What the driver's rounding and the slot arrays' alignment may add: a page a block, GW_VRAM_ALIGN an array. */
static uint64_t rounding_bytes(const struct model *m)
{
    return (uint64_t)n_blocks(m) * GW_VRAM_PAGE + 3 * (uint64_t)(m->hp.n_layer + m->hp.n_nextn) * GW_VRAM_ALIGN;
}

/* Temporaries of one eval of T rows: the largest sublayer's (the MoE's pairs,
 * the attention's probabilities, capped at 64 Mi floats as the backend
 * caps them) plus the residual streams, and the head's: the backend computes
 * logits GW_VRAM_HEAD_ROWS rows at a time (its mixed rows, logits and
 * argmax), so a prefill chunk's logits never need T × vocabulary floats. */
/* The rows' part of it with `moe` floats a row for the MoE sublayer. */
static uint64_t rows_bytes(const struct model *m, int64_t T, int64_t n_ctx, uint64_t moe)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t C = hp->n_embd, W = model_wide(hp);
    const uint64_t gdn = 2 * (uint64_t)model_gdn_conv_dim(hp) + 2 * (uint64_t)model_gdn_v_dim(hp); /* qkv, mixed; z, o */
    const uint64_t qw = (uint64_t)hp->n_head * hp->head_dim;
    uint64_t probs = T <= GW_VERIFY_ROWS ? attn_floats(hp, T, n_ctx) : (uint64_t)hp->n_head * (uint64_t)n_ctx * (uint64_t)T;
    if (probs > ((uint64_t)64 << 20)) probs = (uint64_t)64 << 20;
    uint64_t layer = moe > gdn ? moe : gdn;
    if (5 * qw > layer) layer = 5 * qw;
    const uint64_t R = T < GW_VRAM_HEAD_ROWS ? (uint64_t)T : GW_VRAM_HEAD_ROWS;
    return 4 * ((uint64_t)T * (3 * W + 3 * C + layer) + probs + R * (C + (uint64_t)hp->n_vocab + 1));
}

static uint64_t batch_bytes(const struct model *m, int64_t T, int64_t n_ctx)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t C = hp->n_embd, k = hp->n_expert_used;
    /* per row: router probabilities, the k pairs' gate/up/down/contribution rows and weights, the shared
     * expert, and with remote experts the miss list (3k + 1), their weights (k) and their results (k·C) */
    const uint64_t moe = (uint64_t)hp->n_expert + k * (2 * (uint64_t)hp->n_ff_exp + 2 * C + 3) + 3 * (uint64_t)hp->n_ff_shexp + C +
                         k * (C + 4) + 1;
    return rows_bytes(m, T, n_ctx, moe);
}

uint64_t gw_vram_stream_bytes(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    uint64_t blob = 0;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        const struct model_moe *w = &m->layers[il].moe;
        if (!w->gate_exps.data) continue;
        const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
        uint64_t b = 0;
        for (int j = 0; j < 3; j++) b += (uint64_t)ts[j]->ne[1] * ts[j]->row_bytes;
        b = (b + 4095) / 4096 * 4096;
        if (b > blob) blob = b;
    }
    if (!blob) return 0;
    const uint64_t C = hp->n_embd, I = hp->n_ff_exp;
    return 2 * GW_STREAM_GROUP * blob + 4 * (GW_STREAM_PAIRS * (2 * C + 2 * I) + GW_STREAM_GROUP) + 3 * GW_VRAM_ALIGN;
}

/* The arena, the pool's temporaries (a prefill chunk's streamed experts on top), the slack and the rounding. */
static uint64_t scratch_bytes(const struct model *m, int64_t n_ctx)
{
    return gw_vram_arena_bytes(m, gw_vram_capacity(GW_GROW_KV, 0, 1, n_ctx, true)) + gw_vram_pool_bytes(m, n_ctx) +
           gw_vram_stream_bytes(m) + VRAM_SLACK + rounding_bytes(m);
}

/* batch_bytes for the expert-major MoE: per row the router's probabilities,
 * ids and weights, the shared expert, and the plan's 11 words a pair; the
 * pairs' rows are GW_STREAM_PAIRS at a time, in gw_vram_stream_bytes. */
static uint64_t stream_batch_bytes(const struct model *m, int64_t T, int64_t n_ctx)
{
    const struct model_hparams *hp = &m->hp;
    const uint64_t k = hp->n_expert_used;
    const uint64_t moe = (uint64_t)hp->n_expert + 2 * k + 3 * (uint64_t)hp->n_ff_shexp + hp->n_embd + 1 + 11 * k;
    return rows_bytes(m, T, n_ctx, moe) + gw_vram_stream_bytes(m);
}

int64_t gw_vram_stream_rows(const struct model *m, int64_t n_ctx, uint64_t room)
{
    if (n_ctx <= 0) n_ctx = gw_vram_default_ctx(m);
    int64_t lo = 1, hi = 8192; /* NB_MAX_PREFILL_CHUNK (core/conf): the largest chunk anything sends */
    if (stream_batch_bytes(m, hi, n_ctx) <= room) return hi;
    while (hi - lo > 1) { /* the bytes grow with the rows */
        const int64_t mid = (lo + hi) / 2;
        if (stream_batch_bytes(m, mid, n_ctx) <= room) lo = mid;
        else hi = mid;
    }
    return lo;
}

uint64_t gw_vram_pool_bytes(const struct model *m, int64_t n_ctx)
{
    if (n_ctx <= 0) n_ctx = gw_vram_default_ctx(m);
    const int64_t T = n_ctx < GW_VRAM_BATCH_ROWS ? n_ctx : GW_VRAM_BATCH_ROWS;
    return batch_bytes(m, T, n_ctx);
}

int gw_vram_allocs(const struct model *m, const uint8_t *local, int64_t n_ctx, struct gw_vram_alloc *a, int max)
{
    const struct model_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = gw_vram_default_ctx(m);
    uint64_t dense = 0, mtp = 0;
    if (gw_vram_dense_bytes(m, &dense, &mtp, NULL, 0)) return -1;
    uint64_t slots = 0;
    for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
        int64_t n = 0;
        for (int e = 0; e < hp->n_expert; e++) n += !local || local[(size_t)il * hp->n_expert + e];
        slots += gw_vram_slot_layout(m, il, n, NULL);
    }
    const struct gw_vram_alloc all[] = {
        {"dense weights (and MTP's)", GW_PART_DENSE, dense + mtp},
        {"expert slots", GW_PART_SLOTS, slots},
        {"GDN and PLE state", GW_PART_KV, gw_vram_state_layout(m, NULL)},
        {"verify checkpoint", GW_PART_KV, gw_vram_verify_layout(m, NULL)},
        {"K/V and indexer keys", GW_PART_KV, gw_vram_kv_layout(m, gw_vram_capacity(GW_GROW_KV, 0, 1, n_ctx, true), NULL)},
        {"MTP K/V", GW_PART_KV, gw_vram_mtp_kv_bytes(m, gw_vram_capacity(GW_GROW_MTP, 0, 1, n_ctx, true))},
        {"RoPE tables", GW_PART_KV, gw_vram_rope_bytes(m, gw_vram_capacity(GW_GROW_ROPE, 0, 1, n_ctx, true))},
        {"decode arena", GW_PART_SCRATCH, gw_vram_arena_bytes(m, gw_vram_capacity(GW_GROW_KV, 0, 1, n_ctx, true))},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i].bytes) {
            if (n < max) a[n] = all[i];
            n++;
        }
    return n;
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
    /* matrices (not the small tensors, which are F32 on the device anyway) the device widens */
    p->n_widened = 0, p->widened_name = NULL, p->widened_type = -1;
    const gguf_file *files[] = {m->gguf, m->mtp_gguf}; /* the trunk's file and a separate MTP file */
    for (int f = 0; f < 2; f++)
        for (int64_t i = 0; files[f] && i < gguf_tensor_count(files[f]); i++) {
            const struct gguf_tensor *t = gguf_tensor_at(files[f], i);
            if (t->n_dims < 2 || gw_vram_native_type((int)t->type)) continue;
            if (p->n_widened++ == 0) p->widened_name = t->name, p->widened_type = (int)t->type;
        }
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
    char widened[192] = "";
    if (p->n_widened > 0)
        snprintf(widened, sizeof widened,
                 "; %lld matrices are held widened to f32, the device having no decoder for their type (the "
                 "first: %s, %s)",
                 (long long)p->n_widened, p->widened_name ? p->widened_name : "?",
                 quant_type_name((enum quant_type)p->widened_type));
    return nb_errf(err, errlen, NB_ENOMEM,
                   "the VRAM budget of %s is %.1f MiB short: dense weights %s + MTP %s + K/V and state for %lld "
                   "positions %s + %lld expert slots %s + scratch %s = %.1f MiB%s",
                   b[5], (double)(total - budget) / 1048576.0, b[0], b[1], (long long)p->n_ctx, b[2],
                   (long long)p->n_slots, b[3], b[4], (double)total / 1048576.0, widened);
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
