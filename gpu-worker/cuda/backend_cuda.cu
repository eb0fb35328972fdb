/* backend_cuda.cu — the CUDA backend ("cuda" kind) behind gpu-worker/backend.h.
 *
 * The whole forward pass runs on the GPU, layer by layer like the CPU
 * reference (gpu-worker/cpu/backend_cpu.c), whose arithmetic it follows step
 * for step (ops.cuh says how closely) with the "ref" matrix kernels, or
 * within fp32 rounding of it with "fast" (matvec.cu).  At creation the dense
 * weights are copied to the device as the file stores them (formats without
 * a device decoder are widened to F32 on the way), and the small tensors
 * (norms, conv kernels, biases) as fp32.  A sequence keeps all its state on
 * the device: GDN conv and recurrent state, K/V, raw indexer keys and block
 * keys, the PLE conv state, the MTP K/V; the token history stays on the
 * host, where the PLE n-gram rows are hashed (cpu_ple_rows) before the rows
 * are gathered on the device, or asked of the gw_ple_rows hook.
 *
 * Routed experts (the VRAM tier): only the experts computed here are
 * uploaded, into per-layer slot arrays with a device table expert → slot
 * (expert_layout; the map comes with the parameters or from the remote hook,
 * and a changed map is laid out again).  All (token, expert) pairs of a
 * batch run at once; pairs without a slot are listed on the device
 * (k_split), copied to the host with x, and computed by the gw_moe_remote
 * hook while the device runs the resident pairs and the shared expert
 * (moe_forward); their results are scattered back into their pairs'
 * contribution rows, and every token's k contributions are then added in
 * ascending expert order, so placement never changes the result.  Without
 * hooks or taps an eval synchronises once, to copy the logits (or only their
 * argmax) out, and a one-token eval replays a CUDA graph of the whole step
 * (decode_graph).  The peak device memory is measured (vram_note) and the
 * budget checked at the layout (gpu-worker/vram.c).
 *
 * Temporaries come from the stream-ordered allocator (cudaMallocAsync), so
 * nothing is sized ahead for the largest batch.  Any CUDA failure marks the
 * sequence broken (as the CPU backend does after a failed call) and is
 * reported with the call and cudaGetErrorString. */
extern "C" {
#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend_impl.h"
#include "engine/cpu/cpu.h"
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/cuda/cuda_kernels.h"
#include "gpu-worker/cuda/ops.cuh"

extern "C" const int8_t quant_iq4nl_values[16];

/* ---------- errors ---------- */

/* The message of the last failure on this thread, returned with NB_EIO. */
static thread_local char g_msg[1024];

static int cu_fail(cudaError_t e, const char *what, int line)
{
    snprintf(g_msg, sizeof g_msg, "%s: %s (backend_cuda.cu:%d)", what, cudaGetErrorString(e), line);
    return NB_EIO;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        int rc_ = (x);                                                                                                 \
        if (rc_) return rc_;                                                                                           \
    } while (0)
#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) return cu_fail(e_, #x, __LINE__);                                                       \
    } while (0)
/* After a launch: the launch's own error (bad configuration) only. */
static int lchk(const char *what, int line)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cu_fail(e, what, line);
}
#define CKL(what) TRY(lchk(what, __LINE__))
#define LCHK(what) lchk(what, __LINE__)

static unsigned nblk(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

/* Threads for a loop over n values: a multiple of 32, at most 256. */
static int nthr(int64_t n)
{
    int t = (int)((n + 31) / 32 * 32);
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

/* ---------- the backend ---------- */

struct cu_hc {
    dmat down, up, inject;
    float *norm;
};

struct cu_layer {
    cu_hc hc_attn, hc_ffn;
    /* GDN */
    dmat qkv, z, alpha, beta, gdn_out;
    float *gdn_conv, *dt_bias, *gdn_a, *gdn_norm;
    /* attention */
    dmat q, k, v, o, idx_q, idx_k;
    float *q_norm, *k_norm, *idx_q_norm, *idx_k_norm;
    /* MoE; gate/up/down_exps: the layer's slot arrays (expert_layout), matrix s at s · mat_bytes */
    dmat router, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh;
    int32_t *slot_of; /* device, E entries: the expert's slot, -1 = not resident (computed by the remote hook) */
    int n_slots;      /* 0: no slot arrays (every pair of the layer is remote) */
    float *shexp_gate;
    /* PLE */
    dmat ple_key, ple_value;
    float *ple_norm_key, *ple_norm_query, *ple_norm_conv, *ple_conv;
    /* MTP */
    dmat eh_proj, embed, head_out;
    cu_hc head;
    float *enorm, *hnorm;
};

struct upload {
    const uint8_t *host;
    dmat m;
};

struct cuda_backend {
    struct gw_backend base;
    cudaStream_t st;
    int device;
    cu_layer *L; /* n_layer + n_nextn */
    dmat tok_embd, output, ple_table;
    cu_hc output_hc;
    /* Device memory is a few blocks sized by gpu-worker/vram.c (one cudaMalloc
     * each, every array at a GW_VRAM_ALIGN multiple), so the plan counts what
     * is allocated: the dense block (every weight upload, the slot tables, the
     * step's words), the slots, the RoPE tables, the arena, and per sequence
     * its state, K/V and MTP K/V. */
    char *dense_blk;
    size_t dense_cap, dense_off;
    char *slots_blk;
    uint64_t slots_bytes;
    cudaMemPool_t pool;   /* the temporaries' stream-ordered pool: the backend's own, else the device's */
    bool own_pool;
    bool ctx_fixed;       /* a budget: position-indexed blocks at their planned capacity at once */
    uint64_t used[5];     /* bytes of the blocks held now, by enum gw_vram_part (scratch: the arena) */
    upload *ups; /* host data → device matrix, so shared tensors are copied once */
    int n_ups, cap_ups;
    /* RoPE tables: cos/sin of every position below rope_cap (host-made with the CPU's libm calls), one block */
    float *inv_freq, *d_cos, *d_sin;
    void *rope_blk;
    uint64_t rope_bytes;
    int64_t rope_cap;
    /* the expert layout (expert_layout): which map it follows, and a generation the graphs bake in */
    uint8_t *layout;      /* host, (n_layer + n_nextn) × E: 1 = resident; NULL before the first layout */
    int64_t layout_gen;
    bool fast;            /* gw_backend_params.kernels "fast": matvec.cu's fp32 kernels where they apply */
    uint64_t budget;      /* gw_backend_params.vram_budget (0: none) */
    int64_t n_ctx;        /* positions the budget reserves K/V for */
    size_t free0;         /* cudaMemGetInfo's free bytes before creation */
    uint64_t dense_bytes, mtp_bytes; /* weights uploaded at creation (MTP: the nextn layers' own) */
    bool acct_mtp;        /* dev_alloc counts into mtp_bytes */
    bool created;         /* creation done: uploads count as bytes copied */
    /* pinned staging of the remote pairs (moe_forward) */
    int32_t *h_split;     /* k_split's output: 1 + 3·P */
    float *h_splitw, *h_x, *h_rout, *h_wts;
    int32_t *h_ids;
    int64_t pin_pairs, pin_rows;
    cudaEvent_t ev_host;  /* the copies the host waits for before calling the hook */
    /* CUDA graphs of the one-token decode step (see decode_graph) */
    bool graphs;          /* off with gw_backend_params.no_graphs */
    char *arena;          /* temporaries while capturing */
    size_t arena_cap, arena_off;
    bool arena_on;
    int64_t *d_pos;       /* the step's position, read by the kernels of a replayed graph */
    int32_t *d_tok;       /* the step's token */
    int64_t *h_pos;       /* pinned: what the graph's first copies read at each replay */
    int32_t *h_tok;
    int64_t *h_rows;      /* pinned: the step's PLE table rows (ple_n_heads) */
    float *h_out;         /* pinned: logits (V) then the wide row */
    int32_t *h_arg;       /* pinned: the step's argmax */
    float *h_ple;         /* pinned: the step's PLE rows from the gw_ple_rows hook (ple_embd floats) */
    /* the doorbell (mailbox, ops.cuh): remote experts of evals of at most
     * MB_ROWS rows, posted and awaited inside the stream (mb_begin) */
    char *mb_host, *mb_dev;  /* one pinned mapped block: its host and device addresses */
    int64_t mb_pairs;        /* pairs it holds (MB_ROWS · k) */
    unsigned int *d_mb_seq;  /* device: [0] requests posted, [1] the one the next wait waits for */
    gw_mailbox mb;           /* the remote thread and the eval's accounting (gpu-worker/mailbox.c) */
    bool mb_resync;          /* the last eval broke the protocol: counters cleared before the next */
    uint64_t mb_remote;      /* trunk pairs the thread had computed remotely during this eval */
};

static cuda_backend *cbe(gw_backend *b) { return (cuda_backend *)b; }

/* The blocks held now, by part, and each part's high-water mark (gw_backend_vram_used). */
static void ledger(cuda_backend *be, int part, int64_t delta)
{
    be->used[part] += (uint64_t)delta;
    uint64_t *peak = part == GW_PART_DENSE ? &be->base.vram_used.dense : part == GW_PART_MTP ? &be->base.vram_used.mtp
                     : part == GW_PART_KV ? &be->base.vram_used.kv : part == GW_PART_SLOTS ? &be->base.vram_used.slots
                                          : &be->base.vram_used.scratch;
    if (part != GW_PART_SCRATCH && be->used[part] > *peak) *peak = be->used[part]; /* scratch: vram_note */
}

/* A device block of one part (NULL for 0 bytes). */
static int block_alloc(cuda_backend *be, int part, void **p, uint64_t bytes, const char *what)
{
    *p = NULL;
    if (!bytes) return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        snprintf(g_msg, sizeof g_msg, "%s (%.1f MiB): %s", what, (double)bytes / 1048576.0, cudaGetErrorString(e));
        return NB_EIO;
    }
    ledger(be, part, (int64_t)bytes);
    return 0;
}

static void block_free(cuda_backend *be, int part, void *p, uint64_t bytes)
{
    if (!p) return;
    cudaFree(p);
    ledger(be, part, -(int64_t)bytes);
}

/* An array of the dense block (weights, slot tables, the step's words), at the
 * next GW_VRAM_ALIGN multiple; the block is gw_vram_dense_bytes' total, which
 * walks the same uploads: running past it is that walk undercounting. */
static int dev_alloc(cuda_backend *be, void **p, size_t bytes)
{
    const size_t need = gw_vram_align(bytes);
    *p = NULL;
    if (be->dense_off + need > be->dense_cap) {
        snprintf(g_msg, sizeof g_msg, "the dense block (%zu B, gpu-worker/vram.c gw_vram_dense_bytes) holds no %zu B more "
                 "at %zu B: the walk misses an upload", be->dense_cap, bytes, be->dense_off);
        return NB_EIO;
    }
    *p = be->dense_blk + be->dense_off;
    be->dense_off += need;
    *(be->acct_mtp ? &be->mtp_bytes : &be->dense_bytes) += need;
    return 0;
}

/* Host → device bytes of evals (gw_backend_bytes_copied). */
static void copied(cuda_backend *be, uint64_t n) { __atomic_add_fetch(&be->base.bytes_copied, n, __ATOMIC_RELAXED); }

/* Peak device use so far (gw_backend_vram_bytes): free memory at creation −
 * free now; and the scratch the backend holds (gw_backend_vram_used): the
 * arena and what its own pool has reserved at most (the device's pool, when
 * it has none of its own, is shared: not counted). */
static void vram_note(cuda_backend *be)
{
    size_t fr = 0, tot = 0;
    uint64_t pool = 0; /* the attribute is a cuuint64_t */
    if (be->own_pool && cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrReservedMemHigh, &pool) != cudaSuccess)
        (void)cudaGetLastError(), pool = 0;
    if (be->used[GW_PART_SCRATCH] + pool > be->base.vram_used.scratch) be->base.vram_used.scratch = be->used[GW_PART_SCRATCH] + pool;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || fr >= be->free0) return;
    uint64_t used = be->free0 - fr;
    if (used > be->base.vram_peak) __atomic_store_n(&be->base.vram_peak, used, __ATOMIC_RELAXED);
}

/* A matrix (2-D or 3-D expert tensor) on the device; absent tensors give d == NULL. */
static int up_mat(cuda_backend *be, const struct model_tensor *t, dmat *out)
{
    memset(out, 0, sizeof *out);
    if (!t->data) return 0;
    for (int i = 0; i < be->n_ups; i++)
        if (be->ups[i].host == t->data && be->ups[i].m.type == gw_vram_device_type(t->type) &&
            be->ups[i].m.n_in == t->ne[0] && be->ups[i].m.n_out == t->ne[1]) {
            *out = be->ups[i].m;
            return 0;
        }
    const int64_t n_mat = t->ne[2] * t->ne[3], rows = t->ne[1];
    dmat m;
    m.n_in = t->ne[0];
    m.n_out = rows;
    void *d;
    if (dev_decodes(t->type)) {
        m.type = t->type;
        m.row_bytes = t->row_bytes;
        m.mat_bytes = n_mat > 1 ? t->mat_bytes : rows * t->row_bytes;
        /* A view (fused gate_up) needs its matrices' rows only: the last one ends rows·row_bytes after its start. */
        size_t bytes = (size_t)(n_mat - 1) * t->mat_bytes + (size_t)rows * t->row_bytes;
        size_t dense = (size_t)n_mat * rows * t->row_bytes;
        TRY(dev_alloc(be, &d, dense));
        if (m.mat_bytes == rows * t->row_bytes || n_mat == 1) {
            CK(cudaMemcpy(d, t->data, bytes, cudaMemcpyHostToDevice));
        } else { /* strided views become dense copies */
            for (int64_t e = 0; e < n_mat; e++)
                CK(cudaMemcpy((uint8_t *)d + (size_t)e * rows * t->row_bytes, t->data + (size_t)e * t->mat_bytes,
                              (size_t)rows * t->row_bytes, cudaMemcpyHostToDevice));
            m.mat_bytes = rows * t->row_bytes;
        }
    } else { /* widened to F32, one matrix at a time */
        m.type = QT_F32;
        m.row_bytes = (size_t)m.n_in * 4;
        m.mat_bytes = m.row_bytes * (size_t)rows;
        TRY(dev_alloc(be, &d, m.mat_bytes * (size_t)n_mat));
        float *buf = (float *)malloc(m.mat_bytes);
        if (!buf) {
            snprintf(g_msg, sizeof g_msg, "out of host memory widening %s", t->name);
            return NB_ENOMEM;
        }
        int rc = 0;
        for (int64_t e = 0; e < n_mat && rc == 0; e++) {
            for (int64_t r = 0; r < rows; r++)
                t->qt->to_float(t->data + (size_t)e * t->mat_bytes + (size_t)r * t->row_bytes, buf + r * m.n_in, m.n_in);
            cudaError_t ce = cudaMemcpy((uint8_t *)d + (size_t)e * m.mat_bytes, buf, m.mat_bytes, cudaMemcpyHostToDevice);
            if (ce != cudaSuccess) rc = cu_fail(ce, "cudaMemcpy (widened weights)", __LINE__);
        }
        free(buf);
        TRY(rc);
    }
    m.d = (const uint8_t *)d;
    if (be->n_ups == be->cap_ups) {
        int cap = be->cap_ups ? 2 * be->cap_ups : 256;
        upload *u = (upload *)realloc(be->ups, (size_t)cap * sizeof *u);
        if (!u) {
            snprintf(g_msg, sizeof g_msg, "out of host memory");
            return NB_ENOMEM;
        }
        be->ups = u, be->cap_ups = cap;
    }
    be->ups[be->n_ups++] = upload{t->data, m};
    *out = m;
    return 0;
}

/* A small tensor as fp32 on the device (NULL when absent). */
static int up_f32(cuda_backend *be, const struct model_tensor *t, float **out)
{
    *out = NULL;
    if (!t->data) return 0;
    float *h = cpu_dequant_all(t);
    if (!h) {
        snprintf(g_msg, sizeof g_msg, "out of host memory for %s", t->name);
        return NB_ENOMEM;
    }
    size_t bytes = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]) * sizeof(float);
    void *d;
    int rc = dev_alloc(be, &d, bytes);
    if (rc == 0) {
        cudaError_t ce = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) rc = cu_fail(ce, "cudaMemcpy (small tensor)", __LINE__);
    }
    free(h);
    *out = (float *)d;
    return rc;
}

static int up_hc(cuda_backend *be, const struct model_hc *h, cu_hc *o)
{
    TRY(up_mat(be, &h->down, &o->down));
    TRY(up_mat(be, &h->up, &o->up));
    TRY(up_mat(be, &h->inject, &o->inject));
    return up_f32(be, &h->norm, &o->norm);
}

static int up_layer(cuda_backend *be, const struct model *m, const struct model_layer *l, cu_layer *c)
{
    TRY(up_hc(be, &l->hc_attn, &c->hc_attn));
    TRY(up_hc(be, &l->hc_ffn, &c->hc_ffn));
    TRY(up_mat(be, &l->gdn.qkv, &c->qkv));
    TRY(up_mat(be, &l->gdn.gate, &c->z));
    TRY(up_mat(be, &l->gdn.alpha, &c->alpha));
    TRY(up_mat(be, &l->gdn.beta, &c->beta));
    TRY(up_mat(be, &l->gdn.out, &c->gdn_out));
    TRY(up_f32(be, &l->gdn.conv, &c->gdn_conv));
    TRY(up_f32(be, &l->gdn.dt_bias, &c->dt_bias));
    TRY(up_f32(be, &l->gdn.a, &c->gdn_a));
    TRY(up_f32(be, &l->gdn.norm, &c->gdn_norm));
    TRY(up_mat(be, &l->attn.q, &c->q));
    TRY(up_mat(be, &l->attn.k, &c->k));
    TRY(up_mat(be, &l->attn.v, &c->v));
    TRY(up_mat(be, &l->attn.o, &c->o));
    TRY(up_mat(be, &l->attn.idx_q, &c->idx_q));
    TRY(up_mat(be, &l->attn.idx_k, &c->idx_k));
    TRY(up_f32(be, &l->attn.q_norm, &c->q_norm));
    TRY(up_f32(be, &l->attn.k_norm, &c->k_norm));
    TRY(up_f32(be, &l->attn.idx_q_norm, &c->idx_q_norm));
    TRY(up_f32(be, &l->attn.idx_k_norm, &c->idx_k_norm));
    TRY(up_mat(be, &l->moe.router, &c->router));
    /* the routed experts go into slots later (expert_layout) */
    TRY(up_mat(be, &l->moe.gate_shexp, &c->gate_sh));
    TRY(up_mat(be, &l->moe.up_shexp, &c->up_sh));
    TRY(up_mat(be, &l->moe.down_shexp, &c->down_sh));
    TRY(up_f32(be, &l->moe.shexp_gate, &c->shexp_gate));
    TRY(up_mat(be, &l->ple.key, &c->ple_key));
    TRY(up_mat(be, &l->ple.value, &c->ple_value));
    TRY(up_f32(be, &l->ple.norm_key, &c->ple_norm_key));
    TRY(up_f32(be, &l->ple.norm_query, &c->ple_norm_query));
    TRY(up_f32(be, &l->ple.norm_conv, &c->ple_norm_conv));
    TRY(up_f32(be, &l->ple.conv, &c->ple_conv));
    if (l->is_nextn) {
        TRY(up_mat(be, &l->nextn.eh_proj, &c->eh_proj));
        TRY(up_f32(be, &l->nextn.enorm, &c->enorm));
        TRY(up_f32(be, &l->nextn.hnorm, &c->hnorm));
        TRY(up_hc(be, &l->nextn.head, &c->head));
        TRY(up_mat(be, l->nextn.embed_tokens.data ? &l->nextn.embed_tokens : &m->tok_embd, &c->embed));
        TRY(up_mat(be, l->nextn.shared_head.data ? &l->nextn.shared_head : &m->output, &c->head_out));
    }
    return 0;
}

static void mb_stop(cuda_backend *be);

static void cuda_free(gw_backend *gb)
{
    cuda_backend *be = cbe(gb);
    if (be->st) cudaStreamSynchronize(be->st);
    cudaFree(be->dense_blk);
    cudaFree(be->rope_blk);
    cudaFree(be->slots_blk);
    free(be->layout);
    cudaFreeHost(be->h_split), cudaFreeHost(be->h_splitw), cudaFreeHost(be->h_x), cudaFreeHost(be->h_rout);
    cudaFreeHost(be->h_wts), cudaFreeHost(be->h_ids);
    if (be->ev_host) cudaEventDestroy(be->ev_host);
    block_free(be, GW_PART_SCRATCH, be->arena, be->arena_cap);
    cudaFreeHost(be->h_pos);
    cudaFreeHost(be->h_tok);
    cudaFreeHost(be->h_rows);
    cudaFreeHost(be->h_out);
    cudaFreeHost(be->h_arg);
    cudaFreeHost(be->h_ple);
    mb_stop(be);
    if (be->own_pool) cudaMemPoolDestroy(be->pool);
    if (be->st) cudaStreamDestroy(be->st);
    free(be->ups);
    free(be->L);
    free(be->inv_freq);
    free(be);
}

/* cos/sin tables for positions < need (CPU: inv_freq = 1/powf(θ, 2i/d), angle = (float)pos·inv_freq),
 * one block (gpu-worker/vram.c: gw_vram_rope_bytes at gw_vram_capacity's positions). */
static int rope_reserve(cuda_backend *be, int64_t need)
{
    if (need <= be->rope_cap) return 0;
    const struct model *m = be->base.model;
    const int half = m->hp.rope_dim / 2;
    const int64_t cap = gw_vram_capacity(GW_GROW_ROPE, be->rope_cap, need, be->n_ctx, be->ctx_fixed);
    const uint64_t bytes = gw_vram_rope_bytes(m, cap);
    float *hc = (float *)malloc((size_t)(cap * half) * sizeof(float) * 2 + 1);
    if (!hc) {
        snprintf(g_msg, sizeof g_msg, "out of host memory for RoPE tables");
        return NB_ENOMEM;
    }
    float *hs = hc + cap * half;
    for (int64_t p = 0; p < cap; p++)
        for (int i = 0; i < half; i++) {
            float angle = (float)p * be->inv_freq[i];
            hc[p * half + i] = cosf(angle);
            hs[p * half + i] = sinf(angle);
        }
    void *blk = NULL;
    const uint64_t held = bytes ? bytes : GW_VRAM_ALIGN; /* no rotated dims: a block all the same */
    int rc = block_alloc(be, GW_PART_KV, &blk, held, "RoPE tables");
    float *dc = (float *)blk, *ds = (float *)((char *)blk + bytes / 2);
    cudaError_t e = cudaSuccess;
    if (rc == 0) e = cudaStreamSynchronize(be->st); /* the old tables may be in use */
    if (rc == 0 && e == cudaSuccess) e = cudaMemcpy(dc, hc, (size_t)(cap * half) * sizeof(float), cudaMemcpyHostToDevice);
    if (rc == 0 && e == cudaSuccess) e = cudaMemcpy(ds, hs, (size_t)(cap * half) * sizeof(float), cudaMemcpyHostToDevice);
    if (rc == 0 && e == cudaSuccess) e = cudaDeviceSynchronize(); /* legacy-stream copies: done before `st` reads them */
    free(hc);
    if (rc) return rc;
    if (e != cudaSuccess) {
        block_free(be, GW_PART_KV, blk, held);
        return cu_fail(e, "RoPE tables", __LINE__);
    }
    block_free(be, GW_PART_KV, be->rope_blk, be->rope_bytes);
    be->rope_blk = blk, be->rope_bytes = held, be->d_cos = dc, be->d_sin = ds, be->rope_cap = cap;
    return 0;
}

static int cuda_setup(cuda_backend *be)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    CK(cudaSetDevice(be->device));
    CK(cudaStreamCreateWithFlags(&be->st, cudaStreamNonBlocking));
    CK(cudaMemcpyToSymbol(c_iq4nl, quant_iq4nl_values, sizeof c_iq4nl));
    CK(lb_upload_codebooks()); /* the reference kernels' copy (this unit's) */
    if (gw_cuda_matvec_init(g_msg, sizeof g_msg)) return NB_EIO; /* the fast kernels' copy (matvec.cu's) */
    /* The temporaries' pool: the backend's own (its memory is this backend's
     * alone, measured and given back with it), else the device's. */
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = be->device;
    if (cudaMemPoolCreate(&be->pool, &pp) == cudaSuccess) {
        be->own_pool = true;
    } else {
        (void)cudaGetLastError();
        CK(cudaDeviceGetDefaultMemPool(&be->pool, be->device));
    }
    uint64_t keep = UINT64_MAX; /* keep freed temporaries in the pool between evals */
    CK(cudaMemPoolSetAttribute(be->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    /* one block for every weight upload, the slot tables and the step's words, sized by the walk that plans it */
    uint64_t dense = 0, mtp = 0;
    char derr[256];
    if (gw_vram_dense_bytes(m, &dense, &mtp, derr, sizeof derr)) {
        snprintf(g_msg, sizeof g_msg, "%s", derr);
        return NB_ENOMEM;
    }
    TRY(block_alloc(be, GW_PART_DENSE, (void **)&be->dense_blk, dense + mtp, "the dense weights"));
    be->dense_cap = dense + mtp;
    const int n = hp->n_layer + hp->n_nextn;
    be->L = (cu_layer *)calloc((size_t)n, sizeof *be->L);
    be->inv_freq = (float *)calloc((size_t)(hp->rope_dim / 2 + 1), sizeof(float));
    if (!be->L || !be->inv_freq) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int i = 0; i < hp->rope_dim / 2; i++)
        be->inv_freq[i] = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)hp->rope_dim);
    TRY(up_mat(be, &m->tok_embd, &be->tok_embd));
    TRY(up_mat(be, &m->output, &be->output));
    TRY(up_hc(be, &m->output_hc, &be->output_hc));
    TRY(up_mat(be, &m->ple_table, &be->ple_table));
    for (int i = 0; i < n; i++) {
        be->acct_mtp = m->layers[i].is_nextn;
        TRY(up_layer(be, m, &m->layers[i], &be->L[i]));
        void *so;
        be->acct_mtp = false; /* the slot tables: dense (gw_vram_dense_bytes counts them so) */
        TRY(dev_alloc(be, &so, (size_t)hp->n_expert * sizeof(int32_t)));
        be->L[i].slot_of = (int32_t *)so;
    }
    be->acct_mtp = false;
    CK(cudaEventCreateWithFlags(&be->ev_host, cudaEventDisableTiming));
    TRY(rope_reserve(be, 1024));
    void *w;
    TRY(dev_alloc(be, &w, sizeof(int64_t)));
    be->d_pos = (int64_t *)w;
    TRY(dev_alloc(be, &w, sizeof(int32_t)));
    be->d_tok = (int32_t *)w;
    TRY(dev_alloc(be, &w, 2 * sizeof(unsigned int)));
    be->d_mb_seq = (unsigned int *)w;
    CK(cudaMallocHost(&be->h_pos, sizeof(int64_t)));
    CK(cudaMallocHost(&be->h_tok, sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_rows, (size_t)(hp->ple_n_heads > 0 ? hp->ple_n_heads : 1) * sizeof(int64_t)));
    CK(cudaMallocHost(&be->h_out, (size_t)(hp->n_vocab + model_wide(hp)) * sizeof(float)));
    CK(cudaMallocHost(&be->h_arg, sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_ple, (size_t)(hp->ple_embd > 0 ? hp->ple_embd : 1) * sizeof(float)));
    CK(cudaDeviceSynchronize());
    return 0;
}

/* Expert e of t (3-D) as the device holds it, into dst (device): its rows,
 * or widened to F32 through buf (rows × n_in floats). */
static int put_expert(const struct model_tensor *t, int64_t e, uint8_t *dst, float *buf)
{
    const uint8_t *src = t->data + (size_t)e * t->mat_bytes;
    const int64_t rows = t->ne[1], n_in = t->ne[0];
    if (dev_decodes(t->type)) {
        CK(cudaMemcpy(dst, src, (size_t)rows * t->row_bytes, cudaMemcpyHostToDevice));
        return 0;
    }
    for (int64_t r = 0; r < rows; r++) t->qt->to_float(src + (size_t)r * t->row_bytes, buf + r * n_in, n_in);
    CK(cudaMemcpy(dst, buf, (size_t)(rows * n_in) * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

static dmat slot_mat(const struct model_tensor *t, void *mem)
{
    dmat m;
    m.d = (const uint8_t *)mem;
    m.n_in = t->ne[0], m.n_out = t->ne[1];
    m.type = gw_vram_device_type(t->type);
    m.row_bytes = dev_decodes(t->type) ? t->row_bytes : (size_t)m.n_in * 4;
    m.mat_bytes = m.row_bytes * (size_t)m.n_out;
    return m;
}

/* Uploads the experts `local` marks (NULL: all) into per-layer slot arrays
 * (ascending expert id → slot) and the expert → slot tables, after checking
 * the budget; the previous slots are freed first, so only the new map's
 * experts are ever on the device together with the dense weights. */
static int expert_layout(cuda_backend *be, const uint8_t *local)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int n = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    struct gw_vram_parts parts;
    gw_vram_plan(m, local, be->n_ctx, &parts);
    parts.dense = be->dense_bytes, parts.mtp = be->mtp_bytes;
    char msg[sizeof g_msg];
    if (gw_vram_check(&parts, be->budget, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_ENOMEM;
    }
    CK(cudaStreamSynchronize(be->st));
    be->layout_gen++; /* captured graphs name the old slots */
    if (!be->layout && !(be->layout = (uint8_t *)malloc((size_t)n * E))) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    if (local) memcpy(be->layout, local, (size_t)n * E);
    else memset(be->layout, 1, (size_t)n * E);
    /* The previous slots go first; every view is cleared with them, so a failure below leaves none pointing at freed slots. */
    for (int il = 0; il < n; il++) {
        cu_layer *c = &be->L[il];
        memset(&c->gate_exps, 0, sizeof c->gate_exps), memset(&c->up_exps, 0, sizeof c->up_exps);
        memset(&c->down_exps, 0, sizeof c->down_exps);
        c->n_slots = 0;
    }
    block_free(be, GW_PART_SLOTS, be->slots_blk, be->slots_bytes);
    be->slots_blk = NULL, be->slots_bytes = 0;
    /* one block, each layer's three arrays laid out by gw_vram_slot_layout (a layer without slots: none) */
    int32_t *slot = (int32_t *)malloc((size_t)E * sizeof *slot);
    uint64_t *at = (uint64_t *)malloc((size_t)n * sizeof *at);
    float *buf = NULL;
    size_t buf_floats = 0;
    int rc = slot && at ? 0 : NB_ENOMEM;
    if (rc) snprintf(g_msg, sizeof g_msg, "out of host memory");
    uint64_t total = 0;
    for (int il = 0; il < n && rc == 0; il++) {
        int64_t k = 0;
        for (int e = 0; e < E; e++) k += be->layout[(size_t)il * E + e] != 0;
        at[il] = total;
        total += gw_vram_slot_layout(m, il, k, NULL);
    }
    if (rc == 0 && (rc = block_alloc(be, GW_PART_SLOTS, (void **)&be->slots_blk, total, "expert slots")) == 0)
        be->slots_bytes = total;
    for (int il = 0; il < n && rc == 0; il++) {
        const struct model_moe *w = &m->layers[il].moe;
        cu_layer *c = &be->L[il];
        const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
        dmat *ds[3] = {&c->gate_exps, &c->up_exps, &c->down_exps};
        int n_slots = 0;
        for (int e = 0; e < E; e++) slot[e] = be->layout[(size_t)il * E + e] ? n_slots++ : -1;
        uint64_t off[3];
        gw_vram_slot_layout(m, il, n_slots, off);
        for (int j = 0; j < 3 && rc == 0 && n_slots > 0; j++) {
            if (!ts[j]->data) continue;
            uint8_t *mem = (uint8_t *)be->slots_blk + at[il] + off[j];
            *ds[j] = slot_mat(ts[j], mem);
            const size_t need = (size_t)(ts[j]->ne[0] * ts[j]->ne[1]);
            if (!dev_decodes(ts[j]->type) && need > buf_floats) {
                free(buf);
                if (!(buf = (float *)malloc(need * sizeof(float)))) {
                    snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
                    break;
                }
                buf_floats = need;
            }
            for (int e = 0; e < E && rc == 0; e++)
                if (slot[e] >= 0) rc = put_expert(ts[j], e, mem + (size_t)slot[e] * ds[j]->mat_bytes, buf);
            if (rc == 0 && be->created) copied(be, (uint64_t)n_slots * ds[j]->mat_bytes);
        }
        if (rc == 0) c->n_slots = n_slots;
        if (rc == 0) {
            cudaError_t ce = cudaMemcpy(c->slot_of, slot, (size_t)E * sizeof *slot, cudaMemcpyHostToDevice);
            if (ce != cudaSuccess) rc = cu_fail(ce, "expert slot table", __LINE__);
        }
    }
    free(at);
    free(slot);
    free(buf);
    if (rc == 0) {
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) rc = cu_fail(ce, "expert layout", __LINE__);
    }
    if (rc) { /* nothing half-laid-out is used: the next eval lays out again */
        free(be->layout);
        be->layout = NULL;
    }
    vram_note(be);
    return rc;
}

/* Before device work: the experts of the map in force (the remote hook's, or
 * all), laid out again only when it changed since the last layout. */
static int ensure_layout(cuda_backend *be)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const size_t n = (size_t)(hp->n_layer + hp->n_nextn) * hp->n_expert;
    const uint8_t *want = be->base.remote.fn ? be->base.remote.local : NULL;
    if (be->layout) {
        bool same = true;
        if (want) same = memcmp(want, be->layout, n) == 0;
        else
            for (size_t i = 0; i < n && same; i++) same = be->layout[i] != 0;
        if (same) return 0;
    }
    return expert_layout(be, want);
}

/* The pinned staging of moe_forward for P pairs of T rows. */
static int pin_reserve(cuda_backend *be, int64_t P, int64_t T)
{
    const int64_t C = be->base.model->hp.n_embd;
    if (P <= be->pin_pairs && T <= be->pin_rows) return 0;
    CK(cudaStreamSynchronize(be->st)); /* earlier copies may still read or fill them */
    P = P > be->pin_pairs ? P : be->pin_pairs, T = T > be->pin_rows ? T : be->pin_rows;
    cudaFreeHost(be->h_split), cudaFreeHost(be->h_splitw), cudaFreeHost(be->h_x), cudaFreeHost(be->h_rout);
    cudaFreeHost(be->h_wts), cudaFreeHost(be->h_ids);
    be->h_split = NULL, be->h_splitw = be->h_x = be->h_rout = be->h_wts = NULL, be->h_ids = NULL;
    be->pin_pairs = be->pin_rows = 0;
    CK(cudaMallocHost(&be->h_split, (size_t)(1 + 3 * P) * sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_splitw, (size_t)P * sizeof(float)));
    CK(cudaMallocHost(&be->h_x, (size_t)(T * C) * sizeof(float)));
    CK(cudaMallocHost(&be->h_rout, (size_t)(P * C) * sizeof(float)));
    CK(cudaMallocHost(&be->h_wts, (size_t)P * sizeof(float)));
    CK(cudaMallocHost(&be->h_ids, (size_t)P * sizeof(int32_t)));
    be->pin_pairs = P, be->pin_rows = T;
    return 0;
}

static int cuda_create(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err,
                       size_t errlen)
{
    const char *kern = p ? p->kernels : NULL;
    enum gw_kernels kernels = GW_KERNELS_FAST; /* within 1e-6 of the CPU, greedy-identical (docs/BENCHMARKS.md) */
    if (kern && *kern && gw_kernels_parse(kern, &kernels))
        return nb_errf(err, errlen, NB_EINVAL, "cuda backend: kernels \"%s\": want ref or fast", kern);
    if (m->hp.n_expert_used > GW_CUDA_MAX_EXPERT_USED)
        return nb_errf(err, errlen, NB_ENOTSUP, "cuda backend: %d experts per token; the kernels handle at most %d",
                       (int)m->hp.n_expert_used, GW_CUDA_MAX_EXPERT_USED);
    if (m->hp.ssm_k_head_dim > 1024 || m->hp.ssm_v_head_dim > 1024) /* one GDN thread per state column */
        return nb_errf(err, errlen, NB_ENOTSUP, "cuda backend: GDN head sizes dk %d, dv %d; the kernels handle at most 1024",
                       m->hp.ssm_k_head_dim, m->hp.ssm_v_head_dim);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return nb_errf(err, errlen, NB_ENOTSUP, "no CUDA device: %s",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
    cuda_backend *be = (cuda_backend *)calloc(1, sizeof *be);
    if (!be) return nb_errf(err, errlen, NB_ENOMEM, "cuda backend");
    be->base.ops = &gw_cuda_ops;
    be->base.model = m;
    be->device = 0;
    be->graphs = !(p && p->no_graphs);
    be->fast = kernels == GW_KERNELS_FAST;
    be->budget = p ? p->vram_budget : 0;
    be->n_ctx = p && p->n_ctx > 0 ? p->n_ctx : gw_vram_default_ctx(m);
    /* Under a budget the position-indexed blocks get the capacities the plan
     * reserved at once (gw_vram_capacity): held anyway, never grown in steps
     * (an old and a new block side by side). */
    be->ctx_fixed = p && p->vram_budget;
    size_t tot = 0;
    /* Yield while the host waits for the stream: during a step the cores belong
     * to the cpu-moe-worker (and the remote thread), not to a spinning wait. */
    if ((e = cudaSetDevice(0)) == cudaSuccess) e = cudaSetDeviceFlags(cudaDeviceScheduleYield | cudaDeviceMapHost);
    if (e == cudaErrorSetOnActiveProcess) e = cudaSuccess, (void)cudaGetLastError(); /* a context exists (a second backend): its flags */
    if (e == cudaSuccess) e = cudaFree(0); /* the context first: its memory is not ours */
    if (e == cudaSuccess) e = cudaMemGetInfo(&be->free0, &tot);
    if (e != cudaSuccess) {
        free(be);
        return nb_errf(err, errlen, NB_ENOTSUP, "no usable CUDA device: %s", cudaGetErrorString(e));
    }
    int rc = cuda_setup(be);
    if (rc == 0) vram_note(be);
    if (rc == 0 && p && p->local) rc = expert_layout(be, p->local);
    be->created = true;
    if (rc) {
        cuda_free(&be->base);
        return nb_errf(err, errlen, rc, "cuda backend: %s", g_msg);
    }
    *out = &be->base;
    return 0;
}

/* ---------- sequences ---------- */

struct cu_lstate {
    float *conv, *ssm;   /* GDN */
    float *k, *v;        /* attention (MTP: its own entries) */
    float *idx_k, *blk_k; /* QSA */
    int64_t n_blk;
    float *ple_conv;
};

struct cuda_seq {
    struct gw_seq base;
    cu_lstate *ls;   /* n_layer + n_nextn; its arrays are views of the three blocks */
    int32_t *tokens; /* host history */
    int64_t cap;
    int64_t mtp_n, mtp_cap;
    int64_t *mtp_pos;
    /* device blocks laid out by gpu-worker/vram.c: the fixed-size state
     * (gw_vram_state_layout), K/V and indexer keys for cap positions
     * (gw_vram_kv_layout), the MTP K/V for mtp_cap (gw_vram_mtp_kv_bytes) */
    void *state_blk, *kv_blk, *mtp_blk;
    uint64_t state_bytes, kv_bytes, mtp_bytes;
    bool broken;
    cudaGraphExec_t exec; /* the captured decode step (decode_graph), or NULL */
    int64_t gkey[10];     /* what it baked in */
};

static void seq_release(cuda_seq *s)
{
    cuda_backend *be = cbe(s->base.be);
    block_free(be, GW_PART_KV, s->state_blk, s->state_bytes);
    block_free(be, GW_PART_KV, s->kv_blk, s->kv_bytes);
    block_free(be, GW_PART_KV, s->mtp_blk, s->mtp_bytes);
    free(s->ls);
    free(s->tokens);
    free(s->mtp_pos);
}

static void cuda_seq_free(gw_seq *gs)
{
    cuda_seq *s = (cuda_seq *)gs;
    cudaStreamSynchronize(cbe(gs->be)->st);
    if (s->exec) cudaGraphExecDestroy(s->exec);
    seq_release(s);
    free(s);
}

/* The array at off of a block (NULL where the layout has none). */
static float *at_off(void *blk, uint64_t off) { return off == UINT64_MAX || !blk ? NULL : (float *)((char *)blk + off); }

static int cuda_seq_create(gw_backend *gb, gw_seq **out, char *err, size_t errlen)
{
    const struct model *m = gb->model;
    const struct model_hparams *hp = &m->hp;
    cuda_seq *s = (cuda_seq *)calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "sequence");
    s->base.be = gb;
    s->ls = (cu_lstate *)calloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *s->ls);
    uint64_t(*off)[3] = (uint64_t(*)[3])malloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1) * sizeof *off);
    int rc = s->ls && off ? 0 : NB_ENOMEM;
    if (rc == 0) {
        const uint64_t bytes = gw_vram_state_layout(m, off);
        rc = block_alloc(cbe(gb), GW_PART_KV, &s->state_blk, bytes, "sequence state");
        if (rc == 0) s->state_bytes = bytes;
        if (rc == 0 && bytes && cudaMemset(s->state_blk, 0, bytes) != cudaSuccess)
            rc = cu_fail(cudaGetLastError(), "sequence state", __LINE__);
    }
    for (int i = 0; i < hp->n_layer && rc == 0; i++) {
        cu_lstate *st = &s->ls[i];
        st->conv = at_off(s->state_blk, off[i][0]), st->ssm = at_off(s->state_blk, off[i][1]);
        st->ple_conv = at_off(s->state_blk, off[i][2]);
    }
    free(off);
    if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess) rc = cu_fail(cudaGetLastError(), "sequence state", __LINE__);
    if (rc) {
        cuda_seq_free(&s->base);
        return nb_errf(err, errlen, rc, "sequence state: %s", rc == NB_ENOMEM ? "out of host memory" : g_msg);
    }
    *out = &s->base;
    return 0;
}

static void cuda_seq_reset(gw_seq *gs)
{
    cuda_seq *s = (cuda_seq *)gs;
    cuda_backend *be = cbe(gs->be);
    const struct model_hparams *hp = &gs->be->model->hp;
    bool ok = cudaStreamSynchronize(be->st) == cudaSuccess;
    if (s->state_blk) ok &= cudaMemset(s->state_blk, 0, s->state_bytes) == cudaSuccess; /* GDN and PLE conv state */
    for (int i = 0; i < hp->n_layer; i++) s->ls[i].n_blk = 0;
    ok &= cudaDeviceSynchronize() == cudaSuccess;
    gs->n_pos = 0;
    s->mtp_n = 0;
    s->broken = !ok; /* a device that cannot clear state keeps refusing work */
}

/* n floats of src to dst (device, legacy stream), when there are any. */
static int dcopy(float *dst, const float *src, int64_t n)
{
    if (dst && src && n > 0) CK(cudaMemcpy(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice));
    return 0;
}

/* K/V and indexer keys for `need` positions: a new block at the capacity
 * gw_vram_capacity gives (with the context fixed: the planned one at once,
 * so no old and new block are ever held together), the live entries copied
 * over, the old block freed. */
static int seq_reserve(cuda_seq *s, int64_t need)
{
    if (need <= s->cap) return 0;
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int64_t cap = gw_vram_capacity(GW_GROW_KV, s->cap, need, be->n_ctx, be->ctx_fixed);
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim, n = s->base.n_pos;
    int32_t *tok = (int32_t *)realloc(s->tokens, (size_t)cap * sizeof *tok);
    if (!tok) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    s->tokens = tok;
    uint64_t(*off)[4] = (uint64_t(*)[4])malloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1) * sizeof *off);
    if (!off) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    const uint64_t bytes = gw_vram_kv_layout(m, cap, off);
    void *blk = NULL;
    cudaError_t ce = cudaStreamSynchronize(be->st);
    int rc = ce == cudaSuccess ? block_alloc(be, GW_PART_KV, &blk, bytes, "K/V") : cu_fail(ce, "K/V", __LINE__);
    cu_lstate *nl = rc == 0 ? (cu_lstate *)calloc((size_t)hp->n_layer, sizeof *nl) : NULL;
    if (rc == 0 && !nl) snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
    for (int i = 0; i < hp->n_layer && rc == 0; i++) {
        const cu_lstate *o = &s->ls[i];
        cu_lstate *q = &nl[i];
        q->k = at_off(blk, off[i][0]), q->v = at_off(blk, off[i][1]);
        q->idx_k = at_off(blk, off[i][2]), q->blk_k = at_off(blk, off[i][3]);
        rc = dcopy(q->k, o->k, n * kvw);
        if (rc == 0) rc = dcopy(q->v, o->v, n * kvw);
        if (rc == 0) rc = dcopy(q->idx_k, o->idx_k, n * Di);
        if (rc == 0) rc = dcopy(q->blk_k, o->blk_k, o->n_blk * Di);
    }
    free(off);
    if (rc == 0 && (ce = cudaDeviceSynchronize()) != cudaSuccess) /* the copies ran on the legacy stream, which `st` does not wait for */
        rc = cu_fail(ce, "K/V", __LINE__);
    if (rc) {
        free(nl);
        block_free(be, GW_PART_KV, blk, bytes);
        return rc;
    }
    for (int i = 0; i < hp->n_layer; i++) {
        cu_lstate *st = &s->ls[i];
        st->k = nl[i].k, st->v = nl[i].v, st->idx_k = nl[i].idx_k, st->blk_k = nl[i].blk_k;
    }
    free(nl);
    block_free(be, GW_PART_KV, s->kv_blk, s->kv_bytes);
    s->kv_blk = blk, s->kv_bytes = bytes, s->cap = cap;
    return 0;
}

/* The MTP block's K/V for `need` entries, the same way (one block: K, then V at half). */
static int mtp_reserve(cuda_seq *s, int64_t need)
{
    if (need <= s->mtp_cap) return 0;
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    cu_lstate *st = &s->ls[hp->n_layer];
    const int64_t cap = gw_vram_capacity(GW_GROW_MTP, s->mtp_cap, need, be->n_ctx, be->ctx_fixed);
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t *pos = (int64_t *)realloc(s->mtp_pos, (size_t)cap * sizeof *pos);
    if (!pos) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    s->mtp_pos = pos;
    const uint64_t bytes = gw_vram_mtp_kv_bytes(m, cap);
    void *blk = NULL;
    CK(cudaStreamSynchronize(be->st));
    TRY(block_alloc(be, GW_PART_KV, &blk, bytes, "MTP K/V"));
    float *k = (float *)blk, *v = (float *)((char *)blk + bytes / 2);
    int rc = dcopy(k, st->k, s->mtp_n * kvw);
    if (rc == 0) rc = dcopy(v, st->v, s->mtp_n * kvw);
    cudaError_t ce = cudaSuccess;
    if (rc == 0 && (ce = cudaDeviceSynchronize()) != cudaSuccess) rc = cu_fail(ce, "MTP K/V", __LINE__);
    if (rc) {
        block_free(be, GW_PART_KV, blk, bytes);
        return rc;
    }
    block_free(be, GW_PART_KV, s->mtp_blk, s->mtp_bytes);
    s->mtp_blk = blk, s->mtp_bytes = bytes, st->k = k, st->v = v, s->mtp_cap = cap;
    return 0;
}

static int cuda_seq_truncate(gw_seq *gs, int64_t n_keep, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    const struct model *m = gs->be->model;
    for (int i = 0; i < m->hp.n_layer; i++) {
        int cr = m->layers[i].compress_ratio;
        if (cr > 0 && s->ls[i].n_blk > n_keep / cr) s->ls[i].n_blk = n_keep / cr;
    }
    gs->n_pos = n_keep;
    return 0;
}

static int seq_copy_body(cuda_seq *d, const cuda_seq *s)
{
    const struct model_hparams *hp = &d->base.be->model->hp;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim;
    CK(cudaStreamSynchronize(cbe(d->base.be)->st));
    d->base.n_pos = 0, d->mtp_n = 0; /* nothing of dst is kept while growing */
    TRY(seq_reserve(d, s->cap));
    TRY(mtp_reserve(d, s->mtp_cap));
    for (int i = 0; i < hp->n_layer + hp->n_nextn; i++) {
        const cu_lstate *a = &s->ls[i];
        cu_lstate *b = &d->ls[i];
        int64_t n = i < hp->n_layer ? s->base.n_pos : s->mtp_n;
        TRY(dcopy(b->conv, a->conv, model_gdn_conv_state_floats(hp)));
        TRY(dcopy(b->ssm, a->ssm, model_gdn_ssm_state_floats(hp)));
        TRY(dcopy(b->ple_conv, a->ple_conv, model_ple_conv_state_floats(hp)));
        TRY(dcopy(b->k, a->k, n * kvw));
        TRY(dcopy(b->v, a->v, n * kvw));
        TRY(dcopy(b->idx_k, a->idx_k, n * Di));
        TRY(dcopy(b->blk_k, a->blk_k, a->n_blk * Di));
        b->n_blk = a->n_blk;
    }
    CK(cudaDeviceSynchronize());
    if (s->base.n_pos) memcpy(d->tokens, s->tokens, (size_t)s->base.n_pos * sizeof *d->tokens);
    if (s->mtp_n) memcpy(d->mtp_pos, s->mtp_pos, (size_t)s->mtp_n * sizeof *d->mtp_pos);
    d->base.n_pos = s->base.n_pos;
    d->mtp_n = s->mtp_n;
    d->broken = s->broken;
    return 0;
}

static int cuda_seq_copy(gw_seq *gd, const gw_seq *gsrc, char *err, size_t errlen)
{
    cuda_seq *d = (cuda_seq *)gd;
    int rc = seq_copy_body(d, (const cuda_seq *)gsrc);
    if (rc) {
        d->broken = true;
        return nb_errf(err, errlen, rc, "sequence copy: %s", g_msg);
    }
    return 0;
}

/* ---------- the forward pass ---------- */

/* Temporaries of one sublayer, released in one go at its end.  They come
 * from the backend's arena while a graph is captured (fixed addresses, no
 * allocation nodes; allocations nest, so releasing is resetting the arena's
 * offset), else — or when the arena is full — from the stream-ordered
 * allocator. */
struct tmp {
    cuda_backend *be;
    size_t mark; /* arena offset at the start */
    void *p[24];
    int n;
};

static tmp tmp_begin(cuda_backend *be) { return tmp{be, be->arena_off, {}, 0}; }

static int talloc(tmp *t, float **out, int64_t n)
{
    cuda_backend *be = t->be;
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 255) & ~(size_t)255;
    if (be->arena_on && be->arena_off + bytes <= be->arena_cap) {
        *out = (float *)(be->arena + be->arena_off);
        be->arena_off += bytes;
        return 0;
    }
    void *p;
    if (be->arena_on) CK(cudaMallocAsync(&p, bytes, be->st)); /* the arena full while capturing: a graph allocation */
    else CK(cudaMallocFromPoolAsync(&p, bytes, be->pool, be->st));
    t->p[t->n++] = p;
    *out = (float *)p;
    return 0;
}

static int tfree(tmp *t)
{
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < t->n; i++) {
        cudaError_t f = cudaFreeAsync(t->p[i], t->be->st);
        if (e == cudaSuccess) e = f;
    }
    t->n = 0;
    t->be->arena_off = t->mark;
    CK(e);
    return 0;
}

/* Frees the temporaries whatever rc is, and returns the first failure. */
static int tdone(tmp *t, int rc)
{
    int r2 = tfree(t);
    return rc ? rc : r2;
}

/* The fast kernels apply to w (its type has one, its rows are whole blocks)
 * with x and y dense and 16-byte aligned. */
static bool fast_ok(const cuda_backend *be, const dmat &w, const float *x, int64_t xs, int64_t ys)
{
    const struct quant_traits *q = quant_traits_of((enum quant_type)w.type);
    return be->fast && gw_cuda_matvec_of(w.type) && q && xs == w.n_in && ys == w.n_out && w.n_in % q->blck_size == 0 &&
           w.n_in % 8 == 0 && !(((uintptr_t)x | (uintptr_t)w.d) & 15) && w.n_out < INT32_MAX;
}

/* y (T × n_out, row stride ys) = W x (T rows of n_in at stride xs): the
 * reference kernel (double accumulation), or with kernels "fast" matvec.cu's
 * (fp32, up to 16 rows a launch) where they apply. */
static int matmul(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int T, float *y, int64_t ys)
{
    if (T <= 0) return 0;
    cudaStream_t st = be->st;
    if (fast_ok(be, w, x, xs, ys)) {
        const gw_cuda_matvec_fn fn = gw_cuda_matvec_of(w.type);
        char e[160];
        for (int t0 = 0; t0 < T; t0 += GW_CUDA_MAX_BATCH) {
            const int nb = T - t0 < GW_CUDA_MAX_BATCH ? T - t0 : GW_CUDA_MAX_BATCH;
            if (fn(w.d, (int)w.n_out, (int)w.n_in, x + (int64_t)t0 * xs, nb, y + (int64_t)t0 * ys, st, e, sizeof e)) {
                snprintf(g_msg, sizeof g_msg, "%s", e);
                return NB_EIO;
            }
        }
        return 0;
    }
    for (int t0 = 0; t0 < T; t0 += 65535 * MM_TT) { /* grid.y limit */
        int nt = T - t0 < 65535 * MM_TT ? T - t0 : 65535 * MM_TT;
        dim3 grid((unsigned)w.n_out, nblk(nt, MM_TT));
        k_matmul<<<grid, MM_THREADS, 0, st>>>(w, x + (int64_t)t0 * xs, xs, nt, y + (int64_t)t0 * ys, ys, NULL, 1, NULL, 0);
        CKL("k_matmul");
    }
    return 0;
}

/* Expert form: pair p uses the slot of expert eid[p] and x row p / xdiv; pairs without a slot skipped. */
static int matmul_pairs(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int P, const int32_t *eid, int xdiv,
                        const int32_t *slot, float *y)
{
    cudaStream_t st = be->st;
    if (P <= 0) return 0;
    if (fast_ok(be, w, x, xs, w.n_out) && w.mat_bytes % 16 == 0) {
        char e[160];
        if (gw_cuda_matvec_pairs(w.type, w.d, w.mat_bytes, (int)w.n_out, (int)w.n_in, x, xdiv, eid, slot, P, y, st, e,
                                 sizeof e)) {
            snprintf(g_msg, sizeof g_msg, "%s", e);
            return NB_EIO;
        }
        return 0;
    }
    for (int p0 = 0; p0 < P; p0 += 65535) {
        int np = P - p0 < 65535 ? P - p0 : 65535;
        dim3 grid((unsigned)w.n_out, (unsigned)np);
        k_matmul<<<grid, MM_THREADS, 0, st>>>(w, x, xs, P, y, w.n_out, eid, xdiv, slot, p0);
        CKL("k_matmul (experts)");
    }
    return 0;
}

/* RMS norm of `groups` consecutive groups of n values per row; wgs: the
 * weight's stride between groups (n: a grouped [groups·n] weight, 0: shared). */
static int rms_rows(cudaStream_t st, const float *in, int64_t irs, float *out, int64_t ors, int rows, int64_t n,
                    int groups, const float *w, int64_t wgs, float eps)
{
    if (rows <= 0) return 0;
    k_rms_norm<<<dim3((unsigned)rows, (unsigned)groups), nthr(n), 0, st>>>(in, irs, n, out, ors, n, n, w, wgs, eps);
    CKL("k_rms_norm");
    return 0;
}

static int rope(cuda_backend *be, float *x, int rows, int64_t rs, int heads, int64_t hs, int64_t pos0, int64_t pstep,
                const int64_t *dpos)
{
    const struct model_hparams *hp = &be->base.model->hp;
    if (rows <= 0 || hp->rope_dim < 2) return 0;
    k_rope<<<dim3((unsigned)rows, (unsigned)heads), nthr(hp->rope_dim / 2), 0, be->st>>>(
        x, rs, hs, hp->rope_dim, be->d_cos, be->d_sin, pos0, pstep, dpos);
    CKL("k_rope");
    return 0;
}

/* hc mixer: x (T × C) and inj (T × n; NULL for the head mixer) from X. */
static int hc_mix(cuda_backend *be, const cu_hc *h, const float *X, int T, float *x, float *inj)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp), r = hp->hc_rank;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *xn, *lo, *gate;
    int rc = talloc(&t, &xn, T * wide);
    if (rc == 0) rc = talloc(&t, &lo, T * r);
    if (rc == 0) rc = talloc(&t, &gate, T * wide);
    if (rc == 0) rc = rms_rows(st, X, wide, xn, wide, T, C, n, h->norm, C, hp->rms_eps);
    if (rc == 0) rc = matmul(be, h->down, xn, wide, T, lo, r);
    if (rc == 0) {
        k_silu_div<<<nblk(T * r, 256), 256, 0, st>>>(lo, T * r, (float)n);
        rc = LCHK("k_silu_div");
    }
    if (rc == 0) rc = matmul(be, h->up, lo, r, T, gate, wide);
    if (rc == 0) {
        k_hc_mean<<<nblk(T * C, 256), 256, 0, st>>>(xn, gate, T, n, C, x);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = cu_fail(e, "k_hc_mean", __LINE__);
    }
    if (rc == 0 && inj) {
        rc = matmul(be, h->inject, xn, wide, T, inj, n);
        if (rc == 0) {
            k_inject<<<nblk((int64_t)T * n, 256), 256, 0, st>>>(inj, (int64_t)T * n, (float)n);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) rc = cu_fail(e, "k_inject", __LINE__);
        }
    }
    return tdone(&t, rc);
}

static int hc_add(cuda_backend *be, float *X, const float *y, const float *inj, int T)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t N = (int64_t)T * model_wide(hp);
    k_hc_add<<<nblk(N, 256), 256, 0, be->st>>>(X, y, inj, T, hp->hc_count, hp->n_embd);
    CKL("k_hc_add");
    return 0;
}

/* ---- GDN ---- */

static int gdn_forward(cuda_backend *be, const cu_layer *c, cu_lstate *ls, const float *x, int T, float *y)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, Dk = hp->ssm_k_head_dim, Dv = hp->ssm_v_head_dim;
    const int64_t conv_dim = model_gdn_conv_dim(hp), vdim = model_gdn_v_dim(hp), kdim = model_gdn_k_dim(hp), C = hp->n_embd;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *qkv, *mixed, *z, *o, *g, *beta;
    int rc = talloc(&t, &qkv, T * conv_dim);
    if (rc == 0) rc = talloc(&t, &mixed, T * conv_dim);
    if (rc == 0) rc = talloc(&t, &z, T * vdim);
    if (rc == 0) rc = talloc(&t, &o, T * vdim);
    if (rc == 0) rc = talloc(&t, &g, (int64_t)T * Hv);
    if (rc == 0) rc = talloc(&t, &beta, (int64_t)T * Hv);
    if (rc == 0) rc = matmul(be, c->qkv, x, C, T, qkv, conv_dim);
    if (rc == 0) rc = matmul(be, c->z, x, C, T, z, vdim);
    if (rc == 0) rc = matmul(be, c->beta, x, C, T, beta, Hv);
    if (rc == 0) rc = matmul(be, c->alpha, x, C, T, g, Hv);
    cudaError_t e = cudaSuccess;
    if (rc == 0) {
        k_conv_silu<<<nblk(conv_dim, 128), 128, 0, st>>>(c->gdn_conv, hp->ssm_conv_kernel, 1, conv_dim, ls->conv, qkv, T,
                                                         mixed);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_conv_silu", __LINE__);
    }
    if (rc == 0) {
        k_gdn_prep<<<dim3((unsigned)T, (unsigned)(Hk > Hv ? Hk : Hv)), nthr(Dk), 0, st>>>(
            mixed, conv_dim, Hk, Hv, Dk, 1.0f / sqrtf((float)Dk), g, beta, c->gdn_a, c->dt_bias);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_prep", __LINE__);
    }
    const float *q = mixed, *k = mixed + kdim, *v = mixed + 2 * kdim;
    if (rc == 0 && T == 1 && Dk <= 128) { /* a state column of Dk floats fits in registers */
        k_gdn_recurrent_cols<128><<<dim3((unsigned)Hv, (unsigned)((Dv + 31) / 32)), 32, 0, st>>>(
            Hk, Hv, Dk, Dv, T, q, k, v, conv_dim, g, beta, ls->ssm, o);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_recurrent_cols", __LINE__);
    } else if (rc == 0 && T == 1) {
        k_gdn_recurrent<<<Hv, (Dv + 31) / 32 * 32, 0, st>>>(Hk, Hv, Dk, Dv, T, q, k, v, conv_dim, g, beta, ls->ssm, o);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_recurrent", __LINE__);
    } else if (rc == 0) {
        const int ch = CPU_GDN_CHUNK, Dmax = Dk > Dv ? Dk : Dv;
        float *fs, *ds;
        rc = talloc(&t, &fs, (int64_t)Hv * (ch * ch + ch * (Dk + Dv)));
        if (rc == 0) rc = talloc(&t, &ds, (int64_t)Hv * 2 * ch * 2); /* doubles */
        if (rc == 0) {
            k_gdn_chunked<<<Hv, (Dmax + 31) / 32 * 32, 0, st>>>(Hk, Hv, Dk, Dv, T, ch, q, k, v, conv_dim, g, beta,
                                                                 ls->ssm, o, (double *)ds, fs);
            if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_chunked", __LINE__);
        }
    }
    if (rc == 0) {
        k_gated_norm<<<(unsigned)(T * Hv), nthr(Dv), 0, st>>>(o, z, Dv, c->gdn_norm, hp->rms_eps, hp->ssm_gate_silu);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gated_norm", __LINE__);
    }
    if (rc == 0) rc = matmul(be, c->gdn_out, o, vdim, T, y, C);
    return tdone(&t, rc);
}

/* ---- attention ---- */

/* T rows at positions pos0 + t; K/V of the rows stored at slots slot0 + t of
 * (kc, vc); cr > 0: the QSA indexer over the layer's idx_k / blk_k (slot =
 * position).  dpos (a captured one-token step): pos0 and slot0 are 0 and the
 * position is read on the device; every launch is then the same at every
 * position (cap: the K/V capacity bounds the buffers). */
static int attention(cuda_backend *be, const cu_layer *c, cu_lstate *ls, float *kc, float *vc, const float *x, int T,
                     int64_t pos0, int64_t slot0, int cr, const int64_t *dpos, int64_t cap, float *y)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int Hq = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Hi = hp->idx_n_head, Di = hp->idx_head_dim;
    const int64_t qw = (int64_t)Hq * D, kvw = (int64_t)Hkv * D, C = hp->n_embd, iw = (int64_t)Hi * Di;
    const int64_t n_ctx = dpos ? cap : slot0 + T; /* probabilities per (row, head) */
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *qg, *q, *att, *kt, *vt, *qi = NULL, *it = NULL, *scores = NULL, *keepf = NULL;
    int rc = talloc(&t, &qg, T * 2 * qw);
    if (rc == 0) rc = talloc(&t, &q, T * qw);
    if (rc == 0) rc = talloc(&t, &att, T * qw);
    if (rc == 0) rc = talloc(&t, &kt, T * kvw);
    if (rc == 0) rc = talloc(&t, &vt, T * kvw);
    if (rc == 0) rc = matmul(be, c->q, x, C, T, qg, 2 * qw);
    if (rc == 0) rc = matmul(be, c->k, x, C, T, kt, kvw);
    if (rc == 0) rc = matmul(be, c->v, x, C, T, vt, kvw);
    /* q: norm (from the interleaved q|gate rows) then rope; k: the same, then into the cache */
    if (rc == 0) {
        k_rms_norm<<<dim3((unsigned)T, (unsigned)Hq), nthr(D), 0, st>>>(qg, 2 * qw, 2 * D, q, qw, D, D, c->q_norm, 0,
                                                                       hp->rms_eps);
        rc = LCHK("k_rms_norm (q)");
    }
    if (rc == 0) rc = rms_rows(st, kt, kvw, kt, kvw, T, D, Hkv, c->k_norm, 0, hp->rms_eps);
    if (rc == 0) rc = rope(be, q, T, qw, Hq, D, pos0, 1, dpos);
    if (rc == 0) rc = rope(be, kt, T, kvw, Hkv, D, pos0, 1, dpos);
    if (rc == 0) {
        k_store_rows<<<nblk(T * kvw, 256), 256, 0, st>>>(kt, T, kvw, kc, slot0, dpos);
        k_store_rows<<<nblk(T * kvw, 256), 256, 0, st>>>(vt, T, kvw, vc, slot0, dpos);
        rc = LCHK("k_store_rows (K/V)");
    }
    int64_t top = 0, bstride = 1;
    uint8_t *keep = NULL;
    if (rc == 0 && cr > 0) {
        rc = talloc(&t, &qi, T * iw);
        if (rc == 0) rc = talloc(&t, &it, T * Di);
        if (rc == 0) rc = matmul(be, c->idx_q, x, C, T, qi, iw);
        if (rc == 0) rc = matmul(be, c->idx_k, x, C, T, it, Di);
        if (rc == 0) {
            k_store_rows<<<nblk(T * Di, 256), 256, 0, st>>>(it, T, Di, ls->idx_k, pos0, dpos);
            rc = LCHK("k_store_rows (indexer keys)");
        }
        if (rc == 0) rc = rms_rows(st, qi, iw, qi, iw, T, Di, Hi, c->idx_q_norm, 0, hp->rms_eps);
        if (rc == 0) rc = rope(be, qi, T, iw, Hi, Di, pos0, 1, dpos);
        /* the block keys of the blocks this batch completes */
        const int64_t nb = dpos ? 1 : (pos0 + T) / cr - ls->n_blk;
        if (rc == 0 && nb > 0) {
            k_block_key<<<(unsigned)nb, nthr(Di), (size_t)Di * sizeof(float), st>>>(
                ls->idx_k, Di, cr, ls->n_blk, dpos, ls->blk_k, c->idx_k_norm, hp->rms_eps, hp->rope_dim, be->d_cos,
                be->d_sin);
            rc = LCHK("k_block_key");
        }
        if (rc == 0 && !dpos && (pos0 + T) / cr > ls->n_blk) ls->n_blk = (pos0 + T) / cr; /* graphs: decode_graph */
        top = hp->idx_top_k / cr;
        const int64_t B_all = dpos ? cap / cr : (pos0 + T) / cr; /* most complete blocks a row can have */
        bstride = B_all > 0 ? B_all : 1;
        if (rc == 0 && (dpos || B_all > top)) {
            rc = talloc(&t, &scores, T * bstride);
            if (rc == 0) rc = talloc(&t, &keepf, (T * bstride + 3) / 4);
            keep = (uint8_t *)keepf;
            /* row r scores only its own complete blocks (B_r = (pos0+r+1)/cr; on the device with dpos) */
            for (int r = 0; r < T && rc == 0; r++) {
                const int64_t Br = dpos ? bstride : (pos0 + r + 1) / cr;
                if (!dpos && Br <= top) continue;
                k_block_scores<<<nblk(Br, 128), 128, 0, st>>>(qi + r * iw, Hi, Di, ls->blk_k, Br, bstride,
                                                               scores + r * bstride, cr, dpos);
                k_block_keep<<<nblk(Br, 128), 128, 0, st>>>(scores + r * bstride, Br, bstride, top, keep + r * bstride,
                                                             cr, dpos);
                rc = LCHK("k_block_scores/keep");
            }
        }
    }
    if (rc == 0) {
        /* attention in row groups so that the probabilities stay under 64 Mi floats */
        int G = (int)(((int64_t)64 << 20) / ((int64_t)Hq * n_ctx));
        G = G < 1 ? 1 : G > T ? T : G;
        float *p;
        rc = talloc(&t, &p, (int64_t)G * Hq * n_ctx);
        for (int r0 = 0; r0 < T && rc == 0; r0 += G) {
            const int nr = T - r0 < G ? T - r0 : G;
            k_attend<<<dim3((unsigned)nr, (unsigned)Hq), 128, 0, st>>>(
                q + r0 * qw, qg + r0 * 2 * qw, 2 * qw, kc, vc, Hq, Hkv, D, slot0 + r0, pos0 + r0, cr, top,
                keep ? keep + r0 * bstride : NULL, bstride, p, n_ctx, att + r0 * qw, dpos);
            rc = LCHK("k_attend");
        }
    }
    if (rc == 0) rc = matmul(be, c->o, att, qw, T, y, C);
    return tdone(&t, rc);
}

/* ---- PLE ---- */

/* graph: a captured one-token step, whose rows decode_graph writes into
 * the pinned h_rows before each replay (no host work inside the capture) —
 * and, with the gw_ple_rows hook, their values into h_ple. */
static int ple_forward(cuda_backend *be, cuda_seq *s, const cu_layer *c, cu_lstate *ls, int64_t pos0, int T, float *X,
                       bool graph)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int n = hp->hc_count, NH = hp->ple_n_heads, W = hp->ple_row_width;
    const int64_t P = hp->ple_embd, C = hp->n_embd, wide = model_wide(hp);
    cudaStream_t st = be->st;
    int64_t *rows = graph ? be->h_rows : (int64_t *)malloc((size_t)T * NH * sizeof *rows);
    float *he = NULL;
    if (!rows) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int r = 0; r < T && !graph; r++) cpu_ple_rows(hp, s->tokens, pos0 + r, rows + (int64_t)r * NH);
    tmp t = tmp_begin(be);
    float *e, *key, *value, *G, *Gn, *cv, *drows;
    int rc = talloc(&t, &e, T * P);
    if (rc == 0) rc = talloc(&t, &key, T * wide);
    if (rc == 0) rc = talloc(&t, &value, T * C);
    if (rc == 0) rc = talloc(&t, &G, T * wide);
    if (rc == 0) rc = talloc(&t, &Gn, T * wide);
    if (rc == 0) rc = talloc(&t, &cv, T * wide);
    if (rc == 0 && be->base.ple_rows.fn && graph) { /* decode_graph asked the hook before the replay */
        cudaError_t ce = cudaMemcpyAsync(e, be->h_ple, (size_t)(T * P) * sizeof(float), cudaMemcpyHostToDevice, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "PLE rows upload", __LINE__);
    } else if (rc == 0 && be->base.ple_rows.fn) {
        he = (float *)malloc((size_t)(T * P) * sizeof *he);
        char herr[256] = "";
        if (!he) {
            snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
        } else if ((rc = be->base.ple_rows.fn(be->base.ple_rows.ctx, T * NH, rows, he, herr, sizeof herr))) {
            snprintf(g_msg, sizeof g_msg, "PLE row hook: %s", herr);
        } else {
            cudaError_t ce = cudaMemcpyAsync(e, he, (size_t)(T * P) * sizeof *he, cudaMemcpyHostToDevice, st);
            copied(be, (uint64_t)(T * P) * sizeof *he);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st); /* he is freed below */
            if (ce != cudaSuccess) rc = cu_fail(ce, "PLE rows upload", __LINE__);
        }
    } else if (rc == 0) {
        rc = talloc(&t, &drows, (int64_t)T * NH * 2); /* int64 */
        cudaError_t ce = cudaSuccess;
        if (rc == 0) ce = cudaMemcpyAsync(drows, rows, (size_t)T * NH * sizeof *rows, cudaMemcpyHostToDevice, st);
        if (rc == 0 && !graph) copied(be, (uint64_t)T * NH * sizeof *rows); /* graphs: at each replay */
        if (rc == 0 && ce == cudaSuccess && !graph) ce = cudaStreamSynchronize(st); /* rows is freed below */
        if (rc == 0 && ce == cudaSuccess) {
            k_get_rows<int64_t><<<(unsigned)(T * NH), nthr(W), 0, st>>>(be->ple_table, (const int64_t *)drows, e, W);
            ce = cudaGetLastError();
        }
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "PLE rows", __LINE__);
    }
    if (!graph) free(rows);
    free(he);
    if (rc == 0) rc = matmul(be, c->ple_key, e, P, T, key, wide);
    if (rc == 0) rc = matmul(be, c->ple_value, e, P, T, value, C);
    if (rc == 0) rc = rms_rows(st, key, wide, key, wide, T, C, n, c->ple_norm_key, C, hp->rms_eps);
    if (rc == 0) rc = rms_rows(st, X, wide, Gn, wide, T, C, n, c->ple_norm_query, C, hp->rms_eps);
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        k_ple_gate<<<dim3((unsigned)T, (unsigned)n), nthr(C), 0, st>>>(key, Gn, value, n, C, G);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_ple_gate", __LINE__);
    }
    if (rc == 0) rc = rms_rows(st, G, wide, Gn, wide, T, C, n, c->ple_norm_conv, C, hp->rms_eps);
    if (rc == 0) {
        k_conv_silu<<<nblk(wide, 128), 128, 0, st>>>(c->ple_conv, hp->ple_conv_kernel, hp->ple_dilation, wide,
                                                     ls->ple_conv, Gn, T, cv);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_conv_silu (PLE)", __LINE__);
    }
    if (rc == 0) {
        k_add2<<<nblk(T * wide, 256), 256, 0, st>>>(X, G, cv, T * wide);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_add2", __LINE__);
    }
    return tdone(&t, rc);
}

/* ---- the doorbell ----
 *
 * The key idea: the host's part of a layer with remote experts is not a
 * wait of the host thread in the middle of the step but a request in mapped
 * pinned memory (gpu-worker/mailbox.h): the stream posts it (k_mb_post),
 * waits for its answer (k_mb_wait) and reads the results (k_mb_scatter), all
 * as kernels, so an eval synchronises once and a decode step with remote
 * experts replays as one CUDA graph.  The backend's remote thread
 * (gpu-worker/mailbox.c) answers: while an eval is in flight (mb_begin …
 * mb_end) it spins on the head, calls the gw_moe_remote hook (in the
 * pipeline the ring round trip to the cpu-moe-worker) on the mailbox's rows,
 * pairs and results (mb_answer), and stores the request's number into
 * `done`; between evals it sleeps.  Evals of more than MB_ROWS rows (prefill
 * chunks) keep the host path of moe_forward. */
#define MB_ROWS 17 /* a decode step or a verify window of up to 16 drafts */

static size_t mb_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Offsets of the mailbox's arrays: rows, experts, weights (pairs), x (MB_ROWS · C), out (pairs · C). */
static void mb_layout(int64_t pairs, int64_t C, size_t off[6])
{
    off[0] = mb_align(sizeof(mb_head));
    off[1] = off[0] + mb_align((size_t)pairs * sizeof(int32_t));
    off[2] = off[1] + mb_align((size_t)pairs * sizeof(int32_t));
    off[3] = off[2] + mb_align((size_t)pairs * sizeof(float));
    off[4] = off[3] + mb_align((size_t)(MB_ROWS * C) * sizeof(float));
    off[5] = off[4] + mb_align((size_t)(pairs * C) * sizeof(float)); /* the end */
}

/* The remote thread's answer to the request in h: the hook on the mailbox's arrays. */
static int mb_answer(void *ctx, const mb_head *h, char *err, size_t errlen)
{
    cuda_backend *be = (cuda_backend *)ctx;
    const struct model_hparams *hp = &be->base.model->hp;
    const struct gw_moe_remote *rem = &be->base.remote;
    size_t off[6];
    mb_layout(be->mb_pairs, hp->n_embd, off);
    const int layer = h->layer, T = h->n_rows, n = h->n_miss;
    if (n < 1 || n > be->mb_pairs || T < 1 || T > MB_ROWS || layer < 0 || layer >= hp->n_layer + hp->n_nextn || !rem->fn)
        return nb_errf(err, errlen, NB_EINVAL, "bad mailbox request (%d pairs of %d rows, layer %d)", n, T, layer);
    char herr[256] = "";
    int rc = rem->fn(rem->ctx, layer, T, (const float *)(be->mb_host + off[3]), n, (const int32_t *)(be->mb_host + off[0]),
                     (const int32_t *)(be->mb_host + off[1]), (const float *)(be->mb_host + off[2]),
                     (float *)(be->mb_host + off[4]), herr, sizeof herr);
    if (rc) return nb_errf(err, errlen, rc, "remote experts of layer %d: %s", layer, herr);
    copied(be, (uint64_t)n * (uint64_t)hp->n_embd * sizeof(float)); /* the results, read over PCIe */
    if (layer < hp->n_layer) __atomic_add_fetch(&be->mb_remote, (uint64_t)n, __ATOMIC_RELAXED);
    return 0;
}

/* Before an eval of T rows.  With a remote hook: no request of an earlier
 * eval may still be pending (the host path below would call the hook beside
 * the thread); and for T ≤ MB_ROWS the mailbox (made at the first such eval)
 * is opened and its thread set spinning (a prefill chunk takes the host
 * path: no core spins while the cpu-moe-worker needs them all). */
static int mb_begin(cuda_backend *be, int T)
{
    if (!be->base.remote.fn) return 0;
    char msg[512];
    if (be->mb_host && gw_mb_idle(&be->mb, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_EIO;
    }
    if (T > MB_ROWS) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    if (!be->mb_host) {
        const int64_t pairs = (int64_t)MB_ROWS * hp->n_expert_used;
        size_t off[6];
        mb_layout(pairs, hp->n_embd, off);
        void *hm = NULL, *dm = NULL;
        CK(cudaHostAlloc(&hm, off[5], cudaHostAllocMapped));
        memset(hm, 0, off[5]);
        cudaError_t ce = cudaHostGetDevicePointer(&dm, hm, 0);
        /* the counters cleared in the stream that reads them (not the legacy stream, which `st` does not wait for) */
        if (ce == cudaSuccess) ce = cudaMemsetAsync(be->d_mb_seq, 0, 2 * sizeof(unsigned int), be->st);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(be->st);
        if (ce != cudaSuccess) {
            cudaFreeHost(hm);
            return cu_fail(ce, "the remote-expert mailbox", __LINE__);
        }
        be->mb_host = (char *)hm, be->mb_dev = (char *)dm, be->mb_pairs = pairs;
        be->mb.head = (mb_head *)hm, be->mb.answer = mb_answer, be->mb.ctx = be;
    }
    if (be->mb_resync) { /* both sides' counts from 0 again (no hook runs: gw_mb_idle above) */
        CK(cudaMemsetAsync(be->d_mb_seq, 0, 2 * sizeof(unsigned int), be->st));
        CK(cudaStreamSynchronize(be->st));
        be->mb.head->posted = be->mb.head->done = be->mb.head->taken = 0;
        be->mb_resync = false;
    }
    __atomic_store_n(&be->mb_remote, 0, __ATOMIC_RELAXED);
    if (gw_mb_begin(&be->mb, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_EIO;
    }
    return 0;
}

/* After an eval (rc: its result so far): the stream drained (an eval that
 * failed half-way may have queued a post without its wait), a request the
 * thread has taken answered (so the hook never runs after the eval, beside
 * the host path of the next one), the thread put to sleep, a break of the
 * protocol, a hook failure, a timed-out answer or a count of requests
 * posted ≠ answers given turned into the eval's error (mailbox.c), and the
 * pairs the hook computed taken off the device's count. */
static int mb_end(cuda_backend *be, int rc)
{
    if (!gw_mb_active(&be->mb)) return rc;
    cudaError_t ce = cudaStreamSynchronize(be->st);
    char msg[512];
    const int mrc = gw_mb_end(&be->mb, msg, sizeof msg);
    if (be->mb.head->lost) be->mb_resync = true;
    __atomic_sub_fetch(&be->base.experts_computed, __atomic_load_n(&be->mb_remote, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    if (rc) return rc;
    if (ce != cudaSuccess) return cu_fail(ce, "eval", __LINE__);
    if (mrc) snprintf(g_msg, sizeof g_msg, "%s", msg);
    return mrc;
}

static void mb_stop(cuda_backend *be)
{
    gw_mb_stop(&be->mb);
    if (be->mb_host) cudaFreeHost(be->mb_host);
}

/* ---- MoE ---- */

/* y = MoE(x) for T rows of layer il (trunk or MTP); a: the eval (route tap) or NULL.
 *
 * The order overlaps the remote experts with the device's work: the router
 * and top-k run on the device, k_split lists the misses (experts without a
 * slot) there, and they are copied with x to pinned host memory, marked by
 * an event; then the resident pairs and the shared expert are queued, and
 * only then does the host wait — for the event, not for those kernels — and
 * call the hook, whose results are uploaded and scattered into their pairs'
 * contribution rows behind them.  Every token's k contributions are added
 * in ascending expert id whatever ran where, so placement never changes the
 * result. */
static int moe_forward(cuda_backend *be, const cu_layer *c, int il, const float *x, int T, float *y,
                       const struct gw_eval_args *a)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int E = hp->n_expert, k = hp->n_expert_used, I = hp->n_ff_exp, P = T * k;
    const int64_t C = hp->n_embd, Is = hp->n_ff_shexp;
    const struct gw_moe_remote *rem = &be->base.remote;
    const bool remote = rem->fn != NULL;
    const bool tap = a && a->route_tap;
    const bool mbox = remote && !tap && T <= MB_ROWS && gw_mb_active(&be->mb); /* the doorbell */
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *probs, *wts, *idsf, *G, *U, *Dn, *contrib, *sc, *gs, *us, *ds, *splitf = NULL, *splitw = NULL, *dout = NULL;
    int rc = talloc(&t, &probs, (int64_t)T * E);
    if (rc == 0) rc = talloc(&t, &wts, P);
    if (rc == 0) rc = talloc(&t, &idsf, P);
    if (rc == 0) rc = talloc(&t, &G, (int64_t)P * I);
    if (rc == 0) rc = talloc(&t, &U, (int64_t)P * I);
    if (rc == 0) rc = talloc(&t, &Dn, P * C);
    if (rc == 0) rc = talloc(&t, &contrib, P * C);
    if (rc == 0) rc = talloc(&t, &sc, T);
    if (rc == 0) rc = talloc(&t, &gs, T * Is);
    if (rc == 0) rc = talloc(&t, &us, T * Is);
    if (rc == 0) rc = talloc(&t, &ds, T * C);
    if (rc == 0 && remote) rc = talloc(&t, &splitf, 1 + 3 * (int64_t)P);
    if (rc == 0 && remote) rc = talloc(&t, &splitw, P);
    if (rc == 0 && ((remote && !mbox) || tap)) rc = pin_reserve(be, P, T);
    if (rc) return tdone(&t, rc);
    int32_t *ids = (int32_t *)idsf, *split = (int32_t *)splitf;
    cudaError_t ce = cudaSuccess;
    if ((rc = matmul(be, c->router, x, C, T, probs, E))) return tdone(&t, rc);
    k_route<<<(unsigned)T, 256, (size_t)E * sizeof(float), st>>>(probs, E, k, hp->expert_weights_norm, ids, wts);
    if ((ce = cudaGetLastError()) != cudaSuccess) return tdone(&t, cu_fail(ce, "k_route", __LINE__));
    /* what the host needs, copied (or posted) before the expert work is queued */
    if (remote) {
        k_split<<<1, SPLIT_THREADS, 0, st>>>(ids, wts, c->slot_of, P, k, split, splitw);
        ce = cudaGetLastError();
        if (ce == cudaSuccess && mbox) {
            size_t off[6];
            mb_layout(be->mb_pairs, C, off);
            char *d = be->mb_dev;
            k_mb_post<<<1, MB_POST_THREADS, 0, st>>>(split, splitw, x, T, C, P, il, (mb_head *)d, (int32_t *)(d + off[0]),
                                                     (int32_t *)(d + off[1]), (float *)(d + off[2]), (float *)(d + off[3]),
                                                     be->d_mb_seq, be->d_mb_seq + 1);
            ce = cudaGetLastError();
        }
        if (ce == cudaSuccess && !mbox)
            ce = cudaMemcpyAsync(be->h_split, split, (size_t)(1 + 3 * P) * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess && !mbox)
            ce = cudaMemcpyAsync(be->h_splitw, splitw, (size_t)P * sizeof(float), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess && !mbox)
            ce = cudaMemcpyAsync(be->h_x, x, (size_t)(T * C) * sizeof(float), cudaMemcpyDeviceToHost, st);
    }
    if (ce == cudaSuccess && tap) {
        ce = cudaMemcpyAsync(be->h_ids, ids, (size_t)P * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess) ce = cudaMemcpyAsync(be->h_wts, wts, (size_t)P * sizeof(float), cudaMemcpyDeviceToHost, st);
    }
    if (ce == cudaSuccess && ((remote && !mbox) || tap)) ce = cudaEventRecord(be->ev_host, st);
    if (ce != cudaSuccess) return tdone(&t, cu_fail(ce, "routes to the host", __LINE__));
    /* the resident pairs (a layer without slots has none: every pair is remote) and the shared expert, queued */
    if (c->n_slots > 0) {
        rc = matmul_pairs(be, c->gate_exps, x, C, P, ids, k, c->slot_of, G);
        if (rc == 0) rc = matmul_pairs(be, c->up_exps, x, C, P, ids, k, c->slot_of, U);
        if (rc == 0) {
            k_swiglu<<<nblk((int64_t)P * I, 256), 256, 0, st>>>(G, U, (int64_t)P * I);
            if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_swiglu", __LINE__);
        }
        if (rc == 0) rc = matmul_pairs(be, c->down_exps, G, I, P, ids, 1, c->slot_of, Dn);
        if (rc == 0) {
            k_scale_pairs<<<nblk(P * C, 256), 256, 0, st>>>(Dn, wts, ids, c->slot_of, P, C, contrib);
            if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_scale_pairs", __LINE__);
        }
    }
    if (rc == 0) {
        k_shexp_gate<<<(unsigned)T, nthr(C), 0, st>>>(c->shexp_gate, x, C, sc);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_shexp_gate", __LINE__);
    }
    if (rc == 0) rc = matmul(be, c->gate_sh, x, C, T, gs, Is);
    if (rc == 0) rc = matmul(be, c->up_sh, x, C, T, us, Is);
    if (rc == 0) {
        k_swiglu<<<nblk(T * Is, 256), 256, 0, st>>>(gs, us, T * Is);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_swiglu (shared)", __LINE__);
    }
    if (rc == 0) rc = matmul(be, c->down_sh, gs, Is, T, ds, C);
    /* the host's part, while the device works: through the mailbox, inside the stream */
    if (rc == 0 && mbox) {
        size_t off[6];
        mb_layout(be->mb_pairs, C, off);
        k_mb_wait<<<1, 1, 0, st>>>((mb_head *)be->mb_dev, be->d_mb_seq + 1);
        k_mb_scatter<<<nblk(P * C, 256), 256, 0, st>>>((const float *)(be->mb_dev + off[4]), split, P, C, contrib);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_mb_wait", __LINE__);
    }
    /* or by the host thread, behind the event */
    if (rc == 0 && ((remote && !mbox) || tap) && (ce = cudaEventSynchronize(be->ev_host)) != cudaSuccess)
        rc = cu_fail(ce, "routes to the host", __LINE__);
    if (rc == 0 && tap) a->route_tap(a->route_ctx, il, T, k, be->h_ids, be->h_wts);
    const int n_miss = remote && !mbox && rc == 0 ? be->h_split[0] : 0; /* mailbox: mb_end takes its misses off */
    if (n_miss > 0) {
        const int32_t *hs = be->h_split;
        char herr[256] = "";
        if ((rc = rem->fn(rem->ctx, il, T, be->h_x, n_miss, hs + 1, hs + 1 + P, be->h_splitw, be->h_rout, herr, sizeof herr)))
            snprintf(g_msg, sizeof g_msg, "remote experts of layer %d: %s", il, herr);
        if (rc == 0) rc = talloc(&t, &dout, (int64_t)n_miss * C);
        if (rc == 0) {
            ce = cudaMemcpyAsync(dout, be->h_rout, (size_t)n_miss * C * sizeof(float), cudaMemcpyHostToDevice, st);
            copied(be, (uint64_t)n_miss * C * sizeof(float));
            if (ce == cudaSuccess) {
                k_scatter_rows<<<nblk((int64_t)n_miss * C, 256), 256, 0, st>>>(dout, split + 1 + 2 * P, n_miss, C, contrib);
                ce = cudaGetLastError();
            }
            if (ce != cudaSuccess) rc = cu_fail(ce, "remote expert results", __LINE__);
        }
    }
    /* The pairs run here, counted as they are dispatched (trunk layers only,
     * gw_backend_experts_computed); a captured step counts at each replay. */
    if (rc == 0 && il < hp->n_layer && !be->arena_on)
        __atomic_add_fetch(&be->base.experts_computed, (uint64_t)(P - n_miss), __ATOMIC_RELAXED);
    if (rc == 0) {
        k_expert_sum<<<nblk(T * C, 256), 256, 0, st>>>(contrib, ids, T, k, C, y);
        k_add_scaled<<<nblk(T * C, 256), 256, 0, st>>>(y, ds, sc, T, C);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_expert_sum", __LINE__);
    }
    return tdone(&t, rc);
}

/* ---- the trunk ---- */

/* Logits of T rows of X through a head mixer and an output matrix, into host
 * memory (logits NULL: not copied), and each row's argmax (harg, NULL: not
 * asked) computed on the device, so greedy decoding copies one int a row
 * (sync false: the copies are only queued — a graph's pinned buffers).  The
 * rows go GW_VRAM_HEAD_ROWS at a time through one buffer (stream order keeps
 * a sub-batch's copies before the next one's matmul), so a prefill chunk asking
 * every row's logits holds a few rows × vocabulary floats, as the budget
 * counts them (gpu-worker/vram.c). */
static int head(cuda_backend *be, const cu_hc *mixer, const dmat &out_w, const float *X, int T, float *logits,
                bool sync = true, int32_t *harg = NULL)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t V = hp->n_vocab, wide = model_wide(hp);
    const int R = T < GW_VRAM_HEAD_ROWS ? T : GW_VRAM_HEAD_ROWS;
    tmp t = tmp_begin(be);
    float *h, *dl, *di = NULL;
    int rc = talloc(&t, &h, (int64_t)R * hp->n_embd);
    if (rc == 0) rc = talloc(&t, &dl, (int64_t)R * V);
    if (rc == 0 && harg) rc = talloc(&t, &di, R);
    for (int r0 = 0; r0 < T && rc == 0; r0 += R) {
        const int n = T - r0 < R ? T - r0 : R;
        rc = hc_mix(be, mixer, X + (int64_t)r0 * wide, n, h, NULL);
        if (rc == 0) rc = matmul(be, out_w, h, hp->n_embd, n, dl, V);
        if (rc) break;
        cudaError_t ce = cudaSuccess;
        if (harg) {
            k_argmax<<<(unsigned)n, ARGMAX_THREADS, 0, be->st>>>(dl, V, (int32_t *)di);
            ce = cudaGetLastError();
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(harg + r0, di, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, be->st);
        }
        if (ce == cudaSuccess && logits)
            ce = cudaMemcpyAsync(logits + (int64_t)r0 * V, dl, (size_t)((int64_t)n * V) * sizeof(float),
                                 cudaMemcpyDeviceToHost, be->st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "logits to the host", __LINE__);
    }
    if (rc == 0 && sync) {
        cudaError_t ce = cudaStreamSynchronize(be->st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "logits to the host", __LINE__);
    }
    return tdone(&t, rc);
}

/* One block (trunk layer il, or the MTP block) over the T rows of X. */
static int block_forward(cuda_backend *be, cuda_seq *s, const struct gw_eval_args *a, int il, int64_t pos0, int T,
                         float *X, float *x, float *y, float *inj, int64_t mtp_slot0, const int64_t *dpos)
{
    const struct model *m = be->base.model;
    const struct model_layer *l = &m->layers[il];
    const cu_layer *c = &be->L[il];
    cu_lstate *ls = &s->ls[il];
    if (l->has_ple) TRY(ple_forward(be, s, c, ls, pos0, T, X, dpos != NULL));
    TRY(hc_mix(be, &c->hc_attn, X, T, x, inj));
    if (l->kind == MODEL_LAYER_GDN) TRY(gdn_forward(be, c, ls, x, T, y));
    else if (l->is_nextn) TRY(attention(be, c, ls, ls->k, ls->v, x, T, pos0, mtp_slot0, 0, NULL, 0, y));
    else TRY(attention(be, c, ls, ls->k, ls->v, x, T, pos0, pos0, l->compress_ratio, dpos, s->cap, y));
    TRY(hc_add(be, X, y, inj, T));
    TRY(hc_mix(be, &c->hc_ffn, X, T, x, inj));
    TRY(moe_forward(be, c, il, x, T, y, a));
    return hc_add(be, X, y, inj, T);
}

/* The device work of one eval.  Outside a capture (dpos NULL) it may
 * synchronise and copy to the caller's buffers; captured (dpos = the
 * backend's d_pos, one token) it only queues: the token comes from the
 * pinned h_tok, the logits and wide row go to the pinned h_out. */
static int eval_dev(cuda_seq *s, const struct gw_eval_args *a, const int64_t *dpos)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int T = a->n_tokens, n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp), V = hp->n_vocab;
    const int64_t pos0 = dpos ? 0 : s->base.n_pos;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *X, *x, *y, *inj, *tokf = NULL, *e;
    int rc = talloc(&t, &X, T * wide);
    if (rc == 0) rc = talloc(&t, &x, T * C);
    if (rc == 0) rc = talloc(&t, &y, T * C);
    if (rc == 0) rc = talloc(&t, &inj, (int64_t)T * n);
    if (rc == 0 && !dpos) rc = talloc(&t, &tokf, T);
    if (rc == 0) rc = talloc(&t, &e, T * C);
    const int32_t *dtok = dpos ? be->d_tok : (const int32_t *)tokf;
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        if (dpos) {
            ce = cudaMemcpyAsync(be->d_tok, be->h_tok, sizeof(int32_t), cudaMemcpyHostToDevice, st);
            if (ce == cudaSuccess) ce = cudaMemcpyAsync(be->d_pos, be->h_pos, sizeof(int64_t), cudaMemcpyHostToDevice, st);
        } else {
            ce = cudaMemcpyAsync(tokf, a->tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, st);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
            copied(be, (uint64_t)T * sizeof(int32_t));
        }
        if (ce == cudaSuccess) {
            k_get_rows<int32_t><<<(unsigned)T, nthr(C), 0, st>>>(be->tok_embd, dtok, e, C);
            k_broadcast_streams<<<nblk(T * wide, 256), 256, 0, st>>>(e, T, n, C, X);
            ce = cudaGetLastError();
        }
        if (ce != cudaSuccess) rc = cu_fail(ce, "embedding", __LINE__);
    }
    float *htap = NULL;
    if (rc == 0 && a->tap && !(htap = (float *)malloc((size_t)(T * wide) * sizeof *htap)))
        rc = NB_ENOMEM, snprintf(g_msg, sizeof g_msg, "out of host memory");
    for (int il = 0; il < hp->n_layer && rc == 0; il++) {
        rc = block_forward(be, s, a, il, pos0, T, X, x, y, inj, 0, dpos);
        if (rc == 0 && a->tap) {
            ce = cudaMemcpyAsync(htap, X, (size_t)(T * wide) * sizeof *htap, cudaMemcpyDeviceToHost, st);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
            if (ce != cudaSuccess) rc = cu_fail(ce, "layer tap", __LINE__);
            else a->tap(a->tap_ctx, il, T, htap);
        }
    }
    free(htap);
    const int first = a->logits_rows == GW_ROWS_LAST ? T - 1 : 0;
    if (rc == 0 && a->logits_rows != GW_ROWS_NONE)
        rc = head(be, &be->output_hc, be->output, X + first * wide, T - first,
                  dpos ? (a->logits ? be->h_out : NULL) : a->logits, !dpos, dpos ? (a->argmax ? be->h_arg : NULL) : a->argmax);
    if (rc == 0 && a->wide_rows != GW_ROWS_NONE) {
        const int w0 = a->wide_rows == GW_ROWS_LAST ? T - 1 : 0;
        ce = cudaMemcpyAsync(dpos ? be->h_out + V : a->wide, X + w0 * wide, (size_t)((T - w0) * wide) * sizeof(float),
                             cudaMemcpyDeviceToHost, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "wide rows to the host", __LINE__);
    }
    if (rc == 0 && !dpos && (ce = cudaStreamSynchronize(st)) != cudaSuccess) rc = cu_fail(ce, "eval", __LINE__);
    return tdone(&t, rc);
}

/* The one-token decode step as a CUDA graph.  It is captured once per
 * sequence and replayed while nothing it bakes in changes: the K/V buffers
 * (capacity), the RoPE tables, the arena, the expert layout and which
 * outputs are asked.  The
 * position and token reach the replayed kernels through d_pos / d_tok, copied
 * from pinned host words by the graph's first nodes, and the PLE rows (hashed
 * on the host) likewise; every launch is position-independent (ops.cuh: the
 * dpos forms), so a replay computes what the plain launches compute. */
static int decode_graph(cuda_seq *s, const struct gw_eval_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int64_t pos0 = s->base.n_pos, V = hp->n_vocab, wide = model_wide(hp);
    TRY(seq_reserve(s, pos0 + 1));
    TRY(rope_reserve(be, pos0 + 1));
    const size_t need = gw_vram_arena_bytes(m, s->cap); /* gpu-worker/vram.c: the budget counts it */
    if (be->arena_cap < need) {
        CK(cudaStreamSynchronize(be->st));
        block_free(be, GW_PART_SCRATCH, be->arena, be->arena_cap);
        be->arena = NULL, be->arena_cap = 0;
        TRY(block_alloc(be, GW_PART_SCRATCH, (void **)&be->arena, need, "the decode arena"));
        be->arena_cap = need;
    }
    s->tokens[pos0] = a->tokens[0];
    be->h_tok[0] = a->tokens[0];
    be->h_pos[0] = pos0;
    const struct gw_ple_rows *pr = &be->base.ple_rows;
    if (hp->ple_layer >= 0) cpu_ple_rows(hp, s->tokens, pos0, be->h_rows);
    if (hp->ple_layer >= 0 && pr->fn) { /* rows depend on the tokens only: asked before the replay */
        char herr[256] = "";
        if (pr->fn(pr->ctx, hp->ple_n_heads, be->h_rows, be->h_ple, herr, sizeof herr)) {
            snprintf(g_msg, sizeof g_msg, "PLE row hook: %s", herr);
            return NB_EIO;
        }
        copied(be, (uint64_t)hp->ple_embd * sizeof(float));
    }
    const int64_t key[10] = {s->cap, be->rope_cap, (int64_t)(uintptr_t)be->arena, (int64_t)be->arena_cap,
                             a->logits_rows != GW_ROWS_NONE && a->logits, a->wide_rows != GW_ROWS_NONE, be->layout_gen,
                             a->logits_rows != GW_ROWS_NONE && a->argmax, be->base.remote.fn != NULL, pr->fn != NULL};
    if (!s->exec || memcmp(key, s->gkey, sizeof key)) {
        if (s->exec) cudaGraphExecDestroy(s->exec);
        s->exec = NULL;
        cudaGraph_t g = NULL;
        CK(cudaStreamBeginCapture(be->st, cudaStreamCaptureModeThreadLocal));
        be->arena_on = true, be->arena_off = 0;
        int rc = eval_dev(s, a, be->d_pos);
        be->arena_on = false, be->arena_off = 0;
        cudaError_t ce = cudaStreamEndCapture(be->st, &g);
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "cudaStreamEndCapture", __LINE__);
        if (rc == 0 && (ce = cudaGraphInstantiate(&s->exec, g, 0)) != cudaSuccess) {
            s->exec = NULL;
            rc = cu_fail(ce, "cudaGraphInstantiate", __LINE__);
        }
        if (g) cudaGraphDestroy(g);
        TRY(rc);
        memcpy(s->gkey, key, sizeof key);
    }
    CK(cudaGraphLaunch(s->exec, be->st));
    __atomic_add_fetch(&be->base.graph_replays, 1, __ATOMIC_RELAXED);
    /* the replay's first copies: token, position, PLE rows */
    copied(be, sizeof(int32_t) + sizeof(int64_t) +
                   (hp->ple_layer >= 0 && !pr->fn ? (uint64_t)hp->ple_n_heads * sizeof(int64_t) : 0));
    CK(cudaStreamSynchronize(be->st));
    /* every trunk layer's k routed pairs, as if on the device: mb_end takes the remote ones off */
    __atomic_add_fetch(&be->base.experts_computed, (uint64_t)hp->n_expert_used * hp->n_layer, __ATOMIC_RELAXED);
    if (a->logits_rows != GW_ROWS_NONE && a->logits) memcpy(a->logits, be->h_out, (size_t)V * sizeof(float));
    if (a->logits_rows != GW_ROWS_NONE && a->argmax) a->argmax[0] = be->h_arg[0];
    if (a->wide_rows != GW_ROWS_NONE) memcpy(a->wide, be->h_out + V, (size_t)wide * sizeof(float));
    for (int i = 0; i < hp->n_layer; i++) {
        const int cr = m->layers[i].compress_ratio;
        if (cr > 0) s->ls[i].n_blk = (pos0 + 1) / cr;
    }
    return 0;
}

static int eval_body(cuda_seq *s, const struct gw_eval_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const int T = a->n_tokens;
    const int64_t pos0 = s->base.n_pos;
    TRY(ensure_layout(be));
    /* Taps are host calls in the middle of the step: those evals run plain.
     * The hooks are not: remote experts go through the mailbox, PLE rows are
     * asked before the replay. */
    if (T == 1 && be->graphs && !a->tap && !a->route_tap &&
        (!be->base.remote.fn || gw_mb_active(&be->mb)))
        return decode_graph(s, a);
    TRY(seq_reserve(s, pos0 + T));
    TRY(rope_reserve(be, pos0 + T));
    memcpy(s->tokens + pos0, a->tokens, (size_t)T * sizeof *s->tokens);
    return eval_dev(s, a, NULL);
}

/* Under a VRAM budget: the positions are those the budget reserved K/V for,
 * and a batch larger than the scratch estimate's GW_VRAM_BATCH_ROWS runs in
 * pieces of that many rows (each piece's asked rows of logits, argmax and
 * wide state go to their places in the caller's buffers). */
static int cuda_eval_piece(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen);

static int cuda_eval(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    cuda_backend *be = cbe(gs->be);
    const int T = a->n_tokens;
    if (be->budget && gs->n_pos + T > be->n_ctx)
        return nb_errf(err, errlen, NB_EINVAL,
                       "eval of %d tokens at position %lld: past the %lld positions the VRAM budget reserved K/V for "
                       "(the gpu-worker's --ctx)", T, (long long)gs->n_pos, (long long)be->n_ctx);
    if (!be->budget || T <= GW_VRAM_BATCH_ROWS || s->broken) return cuda_eval_piece(gs, a, err, errlen);
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t V = hp->n_vocab, wide = model_wide(hp);
    for (int r0 = 0; r0 < T; r0 += GW_VRAM_BATCH_ROWS) {
        const int n = T - r0 < GW_VRAM_BATCH_ROWS ? T - r0 : GW_VRAM_BATCH_ROWS;
        const bool last = r0 + n == T;
        struct gw_eval_args p = *a;
        p.tokens = a->tokens + r0, p.n_tokens = n;
        if (a->logits_rows == GW_ROWS_ALL) {
            p.logits = a->logits ? a->logits + (int64_t)r0 * V : NULL;
            p.argmax = a->argmax ? a->argmax + r0 : NULL;
        } else if (!last) {
            p.logits_rows = GW_ROWS_NONE, p.logits = NULL, p.argmax = NULL;
        }
        if (a->wide_rows == GW_ROWS_ALL) p.wide = a->wide + (int64_t)r0 * wide;
        else if (!last) p.wide_rows = GW_ROWS_NONE, p.wide = NULL;
        int rc = cuda_eval_piece(gs, &p, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int cuda_eval_piece(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    const int64_t pos0 = gs->n_pos;
    int rc = mb_begin(cbe(gs->be), a->n_tokens);
    if (rc == 0) rc = eval_body(s, a);
    rc = mb_end(cbe(gs->be), rc);
    vram_note(cbe(gs->be));
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "eval of %d tokens at position %lld: %s", a->n_tokens, (long long)pos0, g_msg);
    }
    gs->n_pos = pos0 + a->n_tokens;
    return 0;
}

/* ---------- MTP ---------- */

static int mtp_body(cuda_seq *s, const struct gw_mtp_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model_hparams *hp = &be->base.model->hp;
    const int il = hp->n_layer, T = a->n_rows, n = hp->hc_count;
    const cu_layer *c = &be->L[il];
    const int64_t C = hp->n_embd, wide = model_wide(hp);
    cudaStream_t st = be->st;
    int64_t n_ctx = 0; /* entries before a->pos survive */
    while (n_ctx < s->mtp_n && s->mtp_pos[n_ctx] < a->pos) n_ctx++;
    s->mtp_n = n_ctx;
    TRY(mtp_reserve(s, n_ctx + T));
    TRY(rope_reserve(be, a->pos + T));
    TRY(ensure_layout(be));
    tmp t = tmp_begin(be);
    float *X, *x, *y, *inj, *tokf, *e, *cat, *win;
    int rc = talloc(&t, &X, T * wide);
    if (rc == 0) rc = talloc(&t, &x, T * C);
    if (rc == 0) rc = talloc(&t, &y, T * C);
    if (rc == 0) rc = talloc(&t, &inj, (int64_t)T * n);
    if (rc == 0) rc = talloc(&t, &tokf, T);
    if (rc == 0) rc = talloc(&t, &e, T * C);
    if (rc == 0) rc = talloc(&t, &cat, (int64_t)T * n * 2 * C);
    if (rc == 0) rc = talloc(&t, &win, T * wide);
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        ce = cudaMemcpyAsync(tokf, a->tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, st);
        if (ce == cudaSuccess) ce = cudaMemcpyAsync(win, a->wide_in, (size_t)(T * wide) * sizeof(float), cudaMemcpyHostToDevice, st);
        copied(be, (uint64_t)T * sizeof(int32_t) + (uint64_t)(T * wide) * sizeof(float));
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
        if (ce == cudaSuccess) {
            k_get_rows<int32_t><<<(unsigned)T, nthr(C), 0, st>>>(c->embed, (const int32_t *)tokf, e, C);
            ce = cudaGetLastError();
        }
        if (ce != cudaSuccess) rc = cu_fail(ce, "MTP input", __LINE__);
    }
    /* cat row (t, s) = [RMS(e_t)·enorm ; RMS(h_t,s)·hnorm_s] */
    for (int sI = 0; sI < n && rc == 0; sI++) {
        rc = rms_rows(st, e, C, cat + (int64_t)sI * 2 * C, (int64_t)n * 2 * C, T, C, 1, c->enorm, 0, hp->rms_eps);
        if (rc == 0)
            rc = rms_rows(st, win + (int64_t)sI * C, wide, cat + (int64_t)sI * 2 * C + C, (int64_t)n * 2 * C, T, C, 1,
                          c->hnorm + (int64_t)sI * C, 0, hp->rms_eps);
    }
    if (rc == 0) rc = matmul(be, c->eh_proj, cat, 2 * C, T * n, X, C);
    if (rc == 0) rc = block_forward(be, s, NULL, il, a->pos, T, X, x, y, inj, n_ctx, NULL);
    if (rc == 0 && a->logits) rc = head(be, &c->head, c->head_out, X, T, a->logits);
    if (rc == 0 && a->wide_out) {
        ce = cudaMemcpyAsync(a->wide_out, X, (size_t)(T * wide) * sizeof(float), cudaMemcpyDeviceToHost, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "MTP wide rows to the host", __LINE__);
    }
    if (rc == 0 && (ce = cudaStreamSynchronize(st)) != cudaSuccess) rc = cu_fail(ce, "MTP step", __LINE__);
    if (rc == 0) {
        for (int r = 0; r < T; r++) s->mtp_pos[n_ctx + r] = a->pos + r;
        s->mtp_n = n_ctx + T;
    }
    return tdone(&t, rc);
}

static int cuda_mtp_eval(gw_seq *gs, const struct gw_mtp_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    int rc = mb_begin(cbe(gs->be), a->n_rows);
    if (rc == 0) rc = mtp_body(s, a);
    rc = mb_end(cbe(gs->be), rc);
    vram_note(cbe(gs->be));
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "MTP step of %d rows: %s", a->n_rows, g_msg);
    }
    return 0;
}

/* Device 0 usable by this build: a driver, a device, and kernels for its
 * architecture (the library holds sm_86/89/90 code: cudaFuncGetAttributes
 * on one kernel fails for a device it cannot run on). */
extern "C" int gw_cuda_probe(char *msg, size_t len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return nb_errf(msg, len, NB_ENOTSUP, "no CUDA device: %s",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return nb_errf(msg, len, NB_ENOTSUP, "CUDA device 0: %s", cudaGetErrorString(e));
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, k_argmax)) != cudaSuccess)
        return nb_errf(msg, len, NB_ENOTSUP, "%s (compute capability %d.%d): this build has no kernels for it (%s)",
                       prop.name, prop.major, prop.minor, cudaGetErrorString(e));
    return nb_errf(msg, len, 0, "%s, %.1f GiB, compute capability %d.%d", prop.name,
                   (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor);
}

extern "C" const struct gw_backend_ops gw_cuda_ops = {
    "cuda",          cuda_create,    cuda_free, cuda_seq_create, cuda_seq_free, cuda_seq_reset, cuda_seq_truncate,
    cuda_seq_copy,   cuda_eval,      cuda_mtp_eval,  true,
};
