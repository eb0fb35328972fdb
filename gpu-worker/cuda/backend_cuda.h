/* backend_cuda.h — what the files of the CUDA backend share (private to
 * gpu-worker/cuda/): the backend's and a sequence's structs, the
 * temporaries, the error macros, and the host functions one file calls in
 * another.
 *
 * The backend is split like the CPU reference (engine/cpu/): a file per
 * layer type (gdn.cu, qsa.cu, ple.cu, moe.cu, hc.cu, mtp.cu), per mechanism
 * (slots.cu: the VRAM tier's expert slots; mailbox.cu: remote experts
 * handed to the CPU inside the stream; graph.cu: the decode step as a CUDA
 * graph), and for what every layer uses (linalg.cu: matrices, norms, RoPE;
 * memory.cu: device blocks and temporaries; upload.cu: the weights; seq.cu:
 * sequences; forward.cu: the trunk and the eval entry points;
 * backend_cuda.cu: creation).  The one idea that keeps it separately
 * compiled without relocatable device code: a kernel lives in the one .cu
 * file whose host code launches it, and where several files launch one
 * (RMS norm, RoPE, row gathers, the causal conv, the mailbox's kernels) they
 * call a host launcher declared here; the device helpers kernels share are
 * device.cuh's inline functions. */
#ifndef NB_GW_CUDA_BACKEND_CUDA_H
#define NB_GW_CUDA_BACKEND_CUDA_H

extern "C" {
#include "core/model/model.h"
#include "core/quant/quant.h"
#include "core/util/err.h"
#include "engine/backend_impl.h"
#include "engine/cpu/cpu.h"
}

#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/cuda/cuda_kernels.h"
#include "gpu-worker/mailbox.h"

/* ---------- errors ---------- */

/* The message of the last failure on this thread, returned with NB_EIO (memory.cu). */
extern thread_local char g_msg[1024];

/* g_msg = "what: the CUDA error (file.cu:line)"; returns NB_EIO. */
int cu_fail_at(cudaError_t e, const char *what, const char *file, int line);
#define cu_fail(e, what, line) cu_fail_at((e), (what), __FILE__, (line))

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
static inline int lchk_at(const char *what, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cu_fail_at(e, what, file, line);
}
#define CKL(what) TRY(lchk_at(what, __FILE__, __LINE__))
#define LCHK(what) lchk_at(what, __FILE__, __LINE__)

/* The array at off of a block (NULL where the layout has none: UINT64_MAX). */
static inline float *cu_at_off(void *blk, uint64_t off)
{
    return off == UINT64_MAX || !blk ? NULL : (float *)((char *)blk + off);
}
/* n floats device to device, queued on st. */
static inline cudaError_t cu_dcopy_async(float *dst, const float *src, int64_t n, cudaStream_t st)
{
    return cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, st);
}

static inline unsigned nblk(int64_t n, int b) { return (unsigned)((n + b - 1) / b); }

/* Threads for a loop over n values: a multiple of 32, at most 256. */
static inline int nthr(int64_t n)
{
    int t = (int)((n + 31) / 32 * 32);
    return t < 32 ? 32 : t > 256 ? 256 : t;
}

/* ---------- the backend ---------- */

/* A weight matrix on the device: n_out rows of n_in values of `type`
 * (enum quant_type numbers); expert e of a 3-D tensor at e·mat_bytes. */
struct dmat {
    const uint8_t *d;
    int type;
    int64_t n_in, n_out;
    size_t row_bytes, mat_bytes;
};

/* Formats with a device decoder: the rows of gpu-worker/cuda/cuda_types.h
 * (others are widened to F32 at upload).  linalg.cu's d_wval has a case for each. */
static inline bool dev_decodes(int t) { return gw_vram_native_type(t); }

/* Remote experts of evals of at most this many rows go through the mailbox (mailbox.cu). */
#define MAILBOX_ROWS 17 /* a decode step or a verify window of up to 16 drafts */

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
    /* MoE; gate/up/down_exps: the layer's slot arrays (cu_expert_layout), matrix s at s · mat_bytes */
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
    /* Device memory is a few blocks sized by engine/vram.c (one cudaMalloc
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
    /* the expert layout (cu_expert_layout): which map it follows, and a generation the graphs bake in */
    uint8_t *layout;      /* host, (n_layer + n_nextn) × E: 1 = resident; NULL before the first layout */
    int64_t layout_gen;
    bool fast;            /* gw_backend_params.kernels "fast": matvec.cu's fp32 kernels where they apply */
    uint64_t budget;      /* gw_backend_params.vram_budget (0: none) */
    int64_t n_ctx;        /* positions the budget reserves K/V for */
    size_t free0;         /* cudaMemGetInfo's free bytes before creation */
    uint64_t dense_bytes, mtp_bytes; /* weights uploaded at creation (MTP: the nextn layers' own) */
    bool acct_mtp;        /* cu_dev_alloc counts into mtp_bytes */
    bool created;         /* creation done: uploads count as bytes copied */
    /* pinned staging of the remote pairs (cu_moe_forward) */
    int32_t *h_split;     /* k_split's output: 1 + 3·P */
    float *h_splitw, *h_x, *h_rout, *h_wts;
    int32_t *h_ids;
    int64_t pin_pairs, pin_rows;
    cudaEvent_t ev_host;  /* the copies the host waits for before calling the hook */
    /* CUDA graphs of the one-token decode step and of verify windows (see cu_decode_graph) */
    bool graphs;          /* off with gw_backend_params.no_graphs */
    char *arena;          /* temporaries while capturing */
    size_t arena_cap, arena_off;
    bool arena_on;
    int64_t *d_pos;       /* the step's (a window's first row's) position, read by the kernels of a replayed graph */
    int32_t *d_tok;       /* the step's tokens (GW_VERIFY_ROWS of room) */
    /* pinned, for step_rows rows (1, or GW_VERIFY_ROWS from the first window graph on; pin_gen counts the
     * re-allocations, which a graph's key holds): what the graph's first copies read at each replay, and
     * what its last ones write */
    int step_rows;
    int64_t pin_gen;
    int64_t *h_pos;
    int32_t *h_tok;
    int64_t *h_rows;      /* the rows' PLE table rows (ple_n_heads a row) */
    float *h_out;         /* logits (V a row), then from step_rows · V on the wide rows */
    int32_t *h_arg;       /* the rows' argmax */
    float *h_ple;         /* the rows' PLE values from the gw_ple_rows hook (ple_embd floats a row) */
    /* the mailbox (mailbox.cu): remote experts of evals of at most
     * MAILBOX_ROWS rows, posted and awaited inside the stream (cu_mailbox_begin) */
    char *mailbox_host, *mailbox_dev; /* one pinned mapped block: its host and device addresses */
    int64_t mailbox_pairs;            /* pairs it holds (MAILBOX_ROWS · k) */
    unsigned int *d_mailbox_seq;      /* device: [0] requests posted, [1] the one the next wait waits for */
    gw_mailbox mailbox;               /* the remote thread and the eval's accounting (gpu-worker/mailbox.c) */
    bool mailbox_resync;              /* the last eval broke the protocol: counters cleared before the next */
    uint64_t mailbox_remote;          /* trunk pairs the thread had computed remotely during this eval */
    /* streamed experts (stream.cu, gw_backend_set_expert_host): the host blobs, the copy stream */
    const uint8_t **xh_blob;          /* (n_layer + n_nextn) × E, NULL: not installed */
    int xh_min_rows;                  /* evals of more rows stream (gw_expert_host.min_rows) */
    uint64_t *xh_part, *xh_bytes;     /* 3 part offsets, and the blob bytes, per layer */
    void *xh_pinned;                  /* the range cudaHostRegister locked, or NULL */
    cudaStream_t st_copy;
    cudaEvent_t ev_copy[2], ev_used[2], ev_ring;
    int32_t *h_stream;                /* pinned: a call's packed pair list (4 words a pair) */
    int64_t h_stream_cap;
    /* the adaptive slot cache (adapt.cu): off unless gw_backend_params.slots_adaptive */
    bool adapt;
    struct gw_slot_params adapt_p;
    struct gw_slot_policy *pol;       /* NULL: the slots keep the layout */
    int32_t *h_slot_of;               /* pinned: the trunk layers' expert → slot tables as the steps see them */
    int32_t *h_routes;                /* pinned: each trunk layer's ids of the last eval (MAILBOX_ROWS · k) */
    uint8_t *can_in, *can_out;        /* the policy's maps (n_layer × E) */
    struct cu_fill *fills;            /* slot copies in flight (n_fills of cap_fills) */
    int n_fills, cap_fills;
    cudaStream_t st_adapt;            /* their stream: the main stream never waits for it */
    cudaEvent_t ev_adapt, ev_routes;
};

static inline cuda_backend *cbe(gw_backend *b) { return (cuda_backend *)b; }

/* ---------- sequences ---------- */

struct cu_lstate {
    float *conv, *ssm;   /* GDN */
    float *k, *v;        /* attention (MTP: its own entries) */
    float *idx_k, *blk_k; /* QSA */
    int64_t n_blk;
    float *ple_conv;
    /* the last verify window's checkpoint (rollback.cu; views of the sequence's ck_blk,
     * gw_vram_verify_layout): the GDN states before it and its rows' inputs (cu_ck_rows_of),
     * the PLE conv state before it and its rows' conv inputs */
    float *ck_conv, *ck_ssm, *ck_in, *ck_ple_conv, *ck_ple_in;
};

/* A GDN layer's checkpointed rows in its ck_in: the conv's input (qkv), the
 * conv's normalised output (q | k | v, the recurrence's input), g and β,
 * GW_VERIFY_ROWS rows of each. */
struct cu_ck_rows {
    float *qkv, *mixed, *g, *beta;
};
static inline cu_ck_rows cu_ck_rows_of(const struct model_hparams *hp, float *in)
{
    const int64_t R = GW_VERIFY_ROWS, cd = model_gdn_conv_dim(hp), Hv = hp->ssm_n_v_heads;
    return cu_ck_rows{in, in + R * cd, in + 2 * R * cd, in + 2 * R * cd + R * Hv};
}

/* What a captured graph bakes in (cu_decode_graph): capacities, addresses, which outputs, rows. */
#define CU_GRAPH_KEY 16
struct cuda_seq {
    struct gw_seq base;
    cu_lstate *ls;   /* n_layer + n_nextn; its arrays are views of the three blocks */
    int32_t *tokens; /* host history */
    int64_t cap;
    int64_t mtp_n, mtp_cap;
    int64_t *mtp_pos;
    /* device blocks laid out by engine/vram.c: the fixed-size state
     * (gw_vram_state_layout), K/V and indexer keys for cap positions
     * (gw_vram_kv_layout), the MTP K/V for mtp_cap (gw_vram_mtp_kv_bytes) */
    void *state_blk, *kv_blk, *mtp_blk;
    uint64_t state_bytes, kv_bytes, mtp_bytes;
    bool broken;
    /* the last eval when it was a verify window: its first position and the rows a
     * truncation may still return to (0: none; rollback.cu), and the checkpoint's block */
    int64_t ck_pos0;
    int ck_T;
    void *ck_blk;
    uint64_t ck_bytes;
    cudaGraphExec_t exec; /* the captured decode step (cu_decode_graph), or NULL */
    int64_t gkey[CU_GRAPH_KEY]; /* what it baked in */
    cudaGraphExec_t wexec[GW_VERIFY_ROWS + 1]; /* the captured verify window of T rows at [T], or NULL */
    int64_t wkey[GW_VERIFY_ROWS + 1][CU_GRAPH_KEY];
};

/* ---------- temporaries (memory.cu) ---------- */

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

static inline tmp tmp_begin(cuda_backend *be) { return tmp{be, be->arena_off, {}, 0}; }
int cu_talloc(tmp *t, float **out, int64_t n);
/* Frees the temporaries whatever rc is, and returns the first failure. */
int cu_tdone(tmp *t, int rc);

/* ---------- device memory (memory.cu) ---------- */

/* A device block of one part (NULL for 0 bytes), and its release. */
int cu_block_alloc(cuda_backend *be, int part, void **p, uint64_t bytes, const char *what);
void cu_block_free(cuda_backend *be, int part, void *p, uint64_t bytes);
/* An array of the dense block (weights, slot tables, the step's words). */
int cu_dev_alloc(cuda_backend *be, void **p, size_t bytes);
/* Host → device bytes of evals (gw_backend_bytes_copied). */
void cu_copied(cuda_backend *be, uint64_t n);
/* The peak device use so far and the scratch held (gw_backend_vram_bytes, gw_backend_vram_used). */
void cu_vram_note(cuda_backend *be);

/* ---------- creation (backend_cuda.cu, upload.cu, slots.cu) ---------- */

int cu_up_mat(cuda_backend *be, const struct model_tensor *t, dmat *out);
int cu_up_hc(cuda_backend *be, const struct model_hc *h, cu_hc *o);
int cu_up_layer(cuda_backend *be, const struct model *m, const struct model_layer *l, cu_layer *c);
/* The RoPE tables for positions < need. */
int cu_rope_reserve(cuda_backend *be, int64_t need);
/* The experts `local` marks (NULL: all) into the slot arrays; and, before
 * device work, the layout of the map in force when it changed. */
int cu_expert_layout(cuda_backend *be, const uint8_t *local);
int cu_ensure_layout(cuda_backend *be);

/* ---------- the adaptive slot cache (adapt.cu) ---------- */

/* The policy from the layout just made (nothing without gw_backend_params.slots_adaptive); before the slots are
 * freed, the state dropped (copies in flight waited for: counted in gw_slot_stats.waited); at teardown, all. */
int cu_adapt_reset(cuda_backend *be);
void cu_adapt_drop(cuda_backend *be);
void cu_adapt_free(cuda_backend *be);
/* Before host blobs change: the copies in flight waited for (counted). */
void cu_adapt_quiesce(cuda_backend *be);
/* Before an eval: the slots whose copies completed enter the tables.  After an eval of T rows: its routes
 * counted and fed to the policy, a due round's copies queued. */
int cu_adapt_begin(cuda_backend *be);
int cu_adapt_end(cuda_backend *be, int T);
/* In cu_moe_forward: layer il's P routed ids to the host (trunk layers, decode-sized evals). */
cudaError_t cu_adapt_record(cuda_backend *be, int il, const int32_t *ids, int P);
/* Whether expert e of layer il is in a slot for the next step (the host's view). */
bool cu_resident(const cuda_backend *be, int il, int e);

/* ---------- sequences (seq.cu) ---------- */

int cuda_seq_create(gw_backend *gb, gw_seq **out, char *err, size_t errlen);
void cuda_seq_free(gw_seq *gs);
void cuda_seq_reset(gw_seq *gs);
int cuda_seq_truncate(gw_seq *gs, int64_t n_keep, char *err, size_t errlen);
int cuda_seq_copy(gw_seq *gd, const gw_seq *gsrc, char *err, size_t errlen);
int cuda_seq_parts(gw_seq *gs, bool load, int64_t n_pos, int64_t mtp_n, struct gw_seq_parts *p, char *err, size_t errlen);
int cuda_state_copy(gw_backend *be, void *dst, const void *src, uint64_t bytes, bool to_dev, char *err, size_t errlen);
/* K/V and indexer keys for `need` positions; the MTP block's K/V for `need` entries. */
int cu_seq_reserve(cuda_seq *s, int64_t need);
int cu_mtp_reserve(cuda_seq *s, int64_t need);

/* ---------- verify windows: the checkpoint and the return into it (rollback.cu) ---------- */

/* The sequence's checkpoint block (gw_vram_verify_layout), before its first verify window. */
int cu_verify_reserve(cuda_seq *s);
void cu_verify_free(cuda_seq *s);
/* Back to n_keep inside the last verify window (NB_ENOTSUP with err outside it): the states restored
 * and the kept rows replayed, nothing evaluated again. */
int cu_rollback(cuda_seq *s, int64_t n_keep, char *err, size_t errlen);

/* ---------- matrices, norms, RoPE, the causal conv (linalg.cu) ---------- */

/* The IQ4_NL levels into the reference kernels' constant memory (once, at creation). */
int cu_linalg_init(void);
int cu_matmul(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int T, float *y, int64_t ys);
int cu_matmul_pairs(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int P, const int32_t *eid, int xdiv,
                    const int32_t *slot, float *y);
int cu_rms_rows(cudaStream_t st, const float *in, int64_t irs, float *out, int64_t ors, int rows, int64_t n, int groups,
                const float *w, int64_t wgs, float eps);
int cu_rope(cuda_backend *be, float *x, int rows, int64_t rs, int heads, int64_t hs, int64_t pos0, int64_t pstep,
            const int64_t *dpos);
/* Launchers of linalg.cu's kernels for other files (grid, threads, stream, then the kernel's arguments; the
 * caller checks cudaGetLastError): k_get_rows, k_rms_norm, k_conv_silu. */
void cu_get_rows(unsigned blocks, int threads, cudaStream_t st, const dmat &w, const int32_t *rows, float *out,
                 int64_t os);
void cu_get_rows(unsigned blocks, int threads, cudaStream_t st, const dmat &w, const int64_t *rows, float *out,
                 int64_t os);
void cu_rms_norm(dim3 grid, int threads, cudaStream_t st, const float *in, int64_t irs, int64_t igs, float *out,
                 int64_t ors, int64_t ogs, int64_t n, const float *w, int64_t wgs, float eps);
void cu_conv_silu(unsigned blocks, int threads, cudaStream_t st, const float *w, int K, int dilation, int64_t ch,
                  float *state, const float *in, int T, float *out);

/* ---------- the layers (hc.cu, gdn.cu, qsa.cu, ple.cu, moe.cu) ---------- */

int cu_hc_mix(cuda_backend *be, const cu_hc *h, const float *X, int T, float *x, float *inj);
int cu_hc_add(cuda_backend *be, float *X, const float *y, const float *inj, int T);
/* verify: a verify window's GDN — the state before it and its rows' inputs kept in ls's checkpoint,
 * the rows token by token (the decode step's kernel); ple likewise (its conv state and inputs). */
int cu_gdn_forward(cuda_backend *be, const cu_layer *c, cu_lstate *ls, const float *x, int T, bool verify, float *y);
/* T steps of the recurrent delta rule on state, q | k | v rows of mixed at stride rs (gdn.cu). */
int cu_gdn_recurrence(cuda_backend *be, int T, const float *mixed, int64_t rs, const float *g, const float *beta,
                      float *state, float *out);
/* verify: the rows are a verify window (with a one-row eval: the split-K attention of the fast kernels) */
int cu_attention(cuda_backend *be, const cu_layer *c, cu_lstate *ls, float *kc, float *vc, const float *x, int T,
                 int64_t pos0, int64_t slot0, int cr, const int64_t *dpos, int64_t cap, bool verify, float *y);
int cu_ple_forward(cuda_backend *be, cuda_seq *s, const cu_layer *c, cu_lstate *ls, int64_t pos0, int T, float *X,
                   bool graph, bool verify);
int cu_moe_forward(cuda_backend *be, const cu_layer *c, int il, const float *x, int T, float *y,
                   const struct gw_eval_args *a);

/* g = silu(g) · u on st (moe.cu's k_swiglu); the caller checks cudaGetLastError. */
void cu_swiglu(cudaStream_t st, float *g, const float *u, int64_t n);
/* moe.cu's pieces for stream.cu: the router's top-k (probs T × E, ids and weights T × k); the shared expert
 * (ds = its output, sc = its gate; gs, us T × n_ff_shexp scratch); y += sc · ds; the pinned staging of
 * remote pairs (h_split, h_splitw, h_x, h_rout for P pairs of T rows). */
int cu_route(cuda_backend *be, const cu_layer *c, const float *x, int T, float *probs, int32_t *ids, float *wts);
int cu_shared_expert(cuda_backend *be, const cu_layer *c, const float *x, int T, float *gs, float *us, float *ds, float *sc);
int cu_add_shared(cuda_backend *be, float *y, const float *ds, const float *sc, int T);
int cu_pin_reserve(cuda_backend *be, int64_t P, int64_t T);

/* ---------- streamed experts (stream.cu) ---------- */

/* GW_STREAM_GROUP, GW_STREAM_PAIRS: engine/vram.h (the plan counts the ring and the temporaries) */
int cuda_set_expert_host(gw_backend *gb, const struct gw_expert_host *h, char *err, size_t errlen);
void cu_stream_free(cuda_backend *be);
/* Whether expert e of layer il has a host blob the device can compute from (its types decoded as stored). */
bool cu_streamable(const cuda_backend *be, int il, int e);
/* y = MoE(x) for a prefill chunk of T rows, expert by expert, the missed experts streamed (stream.cu). */
int cu_moe_expert_major(cuda_backend *be, const cu_layer *c, int il, const float *x, int T, float *y,
                        const struct gw_eval_args *a);

/* ---------- the mailbox: remote experts inside the stream (mailbox.cu) ---------- */

int cu_mailbox_begin(cuda_backend *be, int T);
int cu_mailbox_end(cuda_backend *be, int rc);
void cu_mailbox_stop(cuda_backend *be);
/* Queue k_mailbox_post of layer il's misses (k_split's list) and rows of x, or
 * k_mailbox_wait then k_mailbox_scatter of the results into contrib; cudaGetLastError. */
cudaError_t cu_mailbox_post(cuda_backend *be, const int32_t *split, const float *splitw, const float *x, int T,
                            int64_t C, int P, int il);
cudaError_t cu_mailbox_wait(cuda_backend *be, const int32_t *split, int P, int64_t C, float *contrib);

/* ---------- the trunk, the graph, MTP (forward.cu, graph.cu, mtp.cu) ---------- */

int cu_head(cuda_backend *be, const cu_hc *mixer, const dmat &out_w, const float *X, int T, float *logits,
            bool sync = true, int32_t *harg = NULL);
int cu_block_forward(cuda_backend *be, cuda_seq *s, const struct gw_eval_args *a, int il, int64_t pos0, int T, float *X,
                     float *x, float *y, float *inj, int64_t mtp_slot0, const int64_t *dpos);
int cu_eval_dev(cuda_seq *s, const struct gw_eval_args *a, const int64_t *dpos);
int cu_decode_graph(cuda_seq *s, const struct gw_eval_args *a);
/* The pinned step buffers for `rows` rows (creation: 1; the first window graph: GW_VERIFY_ROWS). */
int cu_step_pin(cuda_backend *be, int rows);
int cuda_eval(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen);
int cuda_mtp_eval(gw_seq *gs, const struct gw_mtp_args *a, char *err, size_t errlen);
/* The attributes of a kernel of this build (gw_cuda_probe: does it run on the device?). */
cudaError_t cu_kernel_attributes(cudaFuncAttributes *fa);

#endif
