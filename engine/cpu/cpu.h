/* cpu.h — the CPU reference backend's private structures and building blocks.
 *
 * The reference computes in fp32 activations and fp32 state, with dot
 * products accumulated in double.  Weight matrices stay in the file's format
 * and are used row by row through the quant table: a row is dequantized to
 * fp32 (quant_traits.to_float) and dotted with the fp32 activation, never
 * with an activation quantized to vec_dot_type, so the only rounding a
 * quantized file adds is the file's own.  Small tensors (norm weights, conv
 * kernels, biases) are dequantized once at backend creation.
 *
 * Layouts: a batch of T rows is row-major (row t at t·width).  The wide
 * residual is n streams of C: stream i of row t at t·nC + i·C. */
#ifndef NB_ENGINE_CPU_H
#define NB_ENGINE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "engine/backend_impl.h"

/* Loops run in parallel only above this many multiply-adds: a parallel region
 * costs microseconds, and on a loaded machine a barrier waiting for a
 * descheduled thread costs a whole time slice (tiny models spent minutes so). */
#define CPU_PAR_MIN_WORK (1 << 18)

/* ---------- linalg.c: matrices and elementwise helpers ---------- */

/* A 2-D weight: n_out rows of n_in values in some quant format. */
struct cpu_mat {
    const uint8_t *data;
    const struct quant_traits *qt;
    int64_t n_in, n_out;
    size_t row_bytes;
};

struct cpu_mat cpu_mat_of(const struct model_tensor *t);
/* Expert e of a 3-D expert tensor. */
struct cpu_mat cpu_mat_expert(const struct model_tensor *t, int e);

/* y[t] = W x[t] for T rows (x: T × n_in, y: T × n_out).  Parallel over the
 * output rows; each row of W is dequantized once per call. */
void cpu_matmul(const struct cpu_mat *w, const float *x, int T, float *y);
/* Same with strided rows (x_stride, y_stride in floats). */
void cpu_matmul_strided(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y, int64_t y_stride);
/* Rows [j0, j1) of that product, in the caller's thread (the same
 * arithmetic, so the same bits, as cpu_matmul_strided). */
void cpu_matmul_rows(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y, int64_t y_stride,
                     int64_t j0, int64_t j1);
/* The same with quant_dot_f32 (fp32 FMA sums: equal within float tolerance,
 * not bit for bit); types without such a kernel take cpu_matmul_rows. */
void cpu_matmul_rows_f32(const struct cpu_mat *w, const float *x, int64_t x_stride, int T, float *y,
                         int64_t y_stride, int64_t j0, int64_t j1);
/* Row r of any 2-D tensor, dequantized (embedding and PLE table lookups). */
void cpu_get_row(const struct model_tensor *t, int64_t r, float *out);
/* Every element of t as fp32 (malloc'ed; NULL on failure or absent tensor). */
float *cpu_dequant_all(const struct model_tensor *t);

double cpu_dot(const float *a, const float *b, int64_t n);
/* out = x / sqrt(mean(x²) + eps) · w  (w may be NULL: no scale). */
void cpu_rms_norm(const float *x, int64_t n, const float *w, float eps, float *out);
/* RMS over each group of `group` values separately, then × w (n values of w). */
void cpu_group_rms_norm(const float *x, int64_t n, int64_t group, const float *w, float eps, float *out);
/* NeoX rotation of the first rope_dim values of x (pairs i, i + rope_dim/2) at
 * position pos, with transformers' float32 angle: pos · θ^(-2i/rope_dim). */
void cpu_rope(float *x, int rope_dim, float theta, int64_t pos);
/* Depthwise causal conv over time + SiLU for T rows of `ch` channels (in,
 * out: T × ch; w: ch × K, tap K-1 = the current row, tap K-1-j is j·dilation
 * rows back).  Rows before the batch come from state ((K-1)·dilation rows,
 * oldest first), which then advances to the batch's last inputs. */
/* The conv state after T more input rows (what cpu_causal_conv_silu leaves), without the outputs. */
void cpu_conv_state_push(int K, int dilation, int64_t ch, float *state, const float *in, int T);
void cpu_causal_conv_silu(const float *w, int K, int dilation, int64_t ch, float *state, const float *in, int T,
                          float *out);
float cpu_sigmoid(float x);
float cpu_silu(float x);
float cpu_softplus(float x);
/* In-place softmax of n values (max-subtracted, fp32 result, double sum). */
void cpu_softmax(float *x, int64_t n);

/* ---------- backend state ---------- */

/* fp32 copies of a layer's small tensors (dequantized at creation). */
struct cpu_layer_consts {
    float *hc_attn_norm, *hc_ffn_norm;
    float *gdn_conv, *gdn_dt_bias, *gdn_a, *gdn_norm; /* conv: conv_dim × Kc */
    float *q_norm, *k_norm, *idx_q_norm, *idx_k_norm;
    float *shexp_gate;
    float *ple_norm_key, *ple_norm_query, *ple_norm_conv, *ple_conv; /* conv: nC × Kp */
    float *nextn_enorm, *nextn_hnorm, *nextn_head_norm;
};

struct cpu_backend {
    struct gw_backend base;
    int n_threads;
    struct cpu_layer_consts *lc; /* n_layer + n_nextn */
    float *output_hc_norm;
    /* the adaptive slot cache (slots.c): with a remote hook, the experts computed here follow the routes */
    bool adapt;
    struct gw_slot_params adapt_p;
    uint8_t *movable;            /* gw_backend_params.slots_movable's copy (NULL: nothing moves) */
    struct gw_slot_policy *pol;  /* NULL: the hook's map as it is */
    const uint8_t *adapt_of;     /* the hook's map the policy started from */
    uint8_t *local;              /* (n_layer + n_nextn) × E: the map the trunk's MoE layers use */
    int32_t *slot_of;            /* n_layer × E: ≥ 0 where local (gw_slot_count's view) */
    int32_t *routes;             /* n_layer × GW_SLOT_ROWS·k: the eval's ids */
    struct gw_moe_remote remote; /* the hook with `local` */
    struct gw_slot_swap *swaps;  /* gw_slot_policy_feed's scratch */
};

/* slots.c: the parameters at creation; the state from the hook's map before an eval (cpu_slots_begin), the eval's
 * routes fed to the policy after it (cpu_slots_end); the map and route buffer a layer uses (NULL: none). */
int cpu_slots_init(struct cpu_backend *be, const struct gw_backend_params *p, char *err, size_t errlen);
void cpu_slots_free(struct cpu_backend *be);
int cpu_slots_begin(struct cpu_backend *be);
int cpu_slots_end(struct cpu_backend *be, int T);
static inline const struct gw_moe_remote *cpu_slots_remote(const struct cpu_backend *be)
{
    return be->pol ? &be->remote : &be->base.remote;
}
static inline int32_t *cpu_slots_routes(const struct cpu_backend *be, int il, int T)
{
    return be->pol && T <= GW_SLOT_ROWS ? be->routes + (size_t)il * GW_SLOT_ROWS * (size_t)be->base.model->hp.n_expert_used : NULL;
}

/* Per-layer sequence state (only the fields of the layer's kind are used). */
struct cpu_layer_state {
    float *conv;     /* GDN: (Kc-1) × conv_dim pre-conv inputs, oldest first */
    float *ssm;      /* GDN: Hv × dk × dv */
    float *k, *v;    /* attention: cap × Hkv·D */
    float *idx_k;    /* QSA: cap × Di raw indexer keys */
    float *blk_k;    /* QSA: block keys (normed, roped), cap/cr + 1 rows */
    int64_t n_blk;   /* valid rows of blk_k */
    float *ple_conv; /* PLE: (Kp-1)·N × nC normed gated values, oldest first */
    /* the last verify window (rollback.c): the state before it and the rows' inputs */
    float *ck_conv, *ck_ssm; /* GDN: conv and S before the window */
    float *ck_in;            /* GDN: the window's qkv rows, then q, k, v, g, β (cpu_ckpt_gdn) */
    float *ck_ple;           /* PLE: ple_conv before the window, then the window's conv inputs */
    int ck_rows;             /* rows ck_in / ck_ple hold */
};

struct cpu_seq {
    struct gw_seq base;
    struct cpu_layer_state *ls; /* n_layer (+ the MTP block's K/V) */
    int32_t *tokens;            /* history, n_pos entries */
    int64_t cap;                /* capacity of tokens and trunk K/V, in positions */
    int64_t mtp_n, mtp_cap;     /* MTP K/V entries */
    int64_t *mtp_pos;           /* position of each MTP entry (increasing) */
    bool broken;                /* a call failed half-way: refuse work until reset */
    int64_t ck_pos0;            /* the last eval's first position, when it was a verify window */
    int ck_T;                   /* its rows still kept; 0: the last eval was not one (no rollback into it) */
    int ck_W;                   /* its rows as the checkpoint laid them out (rollback.c's offsets) */
};

/* rollback.c: a verify window's checkpoint, layer by layer, and the return into it.
 * cpu_ckpt_gdn_state: the GDN state and the window's qkv rows, before the conv;
 * cpu_ckpt_gdn_inputs: its q, k, v, g, β; cpu_ckpt_ple: the PLE conv state and
 * inputs, before its conv.  NB_ENOMEM or 0. */
int cpu_ckpt_gdn_state(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *qkv);
void cpu_ckpt_gdn_inputs(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *q, const float *k,
                         const float *v, const float *g, const float *beta);
int cpu_ckpt_ple(const struct model_hparams *hp, struct cpu_layer_state *st, int T, const float *in);
/* Back to n_keep positions, inside the last verify window: the states before it, then its first rows' inputs
 * replayed; NB_ENOTSUP outside it. */
int cpu_rollback(struct cpu_seq *s, int64_t n_keep, char *err, size_t errlen);
void cpu_ckpt_free(struct cpu_layer_state *st);

/* Capacity for `need` MTP K/V entries. */
int cpu_mtp_reserve(struct cpu_seq *s, int64_t need);

static inline struct cpu_backend *cpu_be(const gw_seq *s) { return (struct cpu_backend *)s->be; }

/* ---------- the sublayers (each file's entry points) ---------- */

/* hc.c.  x: T × C mixed input, inj: T × n inject weights (NULL: head mixer).
 * Functions returning int give 0 or NB_ENOMEM. */
int cpu_hc_mix(const struct model_hparams *hp, const struct model_hc *w, const float *norm, const float *X, int T,
                float *x, float *inj);
/* X[t] stream i += inj[t][i] · y[t]. */
void cpu_hc_combine(const struct model_hparams *hp, float *X, const float *y, const float *inj, int T);

/* gdn.c.  The delta-rule core over T tokens, both forms (tested against each
 * other): q, k are T × Hk × dk (L2-normalised, q already scaled by 1/√dk),
 * v is T × Hv × dv, g (log decay) and beta are T × Hv, state is Hv × dk × dv
 * (updated; row-major per head: element (i, j) at i·dv + j), out is
 * T × Hv × dv.  Value head h reads key head h mod Hk (GGUF's tiled order). */
#define CPU_GDN_CHUNK GW_GDN_CHUNK /* transformers' chunk size, 64 (backend_impl.h: the resume rule follows it) */
struct cpu_gdn_dims {
    int n_k_heads, n_v_heads; /* Hk, Hv */
    int k_head_dim;           /* dk: q, k and the state's rows */
    int v_head_dim;           /* dv: v, out and the state's columns */
};
void cpu_gdn_core_recurrent(const struct cpu_gdn_dims *d, int T, const float *q, const float *k, const float *v,
                            const float *g, const float *beta, float *state, float *out);
void cpu_gdn_core_chunked(const struct cpu_gdn_dims *d, int T, int chunk, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, float *state, float *out);
/* y = GDN(x) for T rows; updates conv and recurrent state.  One token uses
 * the recurrent form, more the chunked form (as transformers does). */
int cpu_gdn_forward(const struct model_hparams *hp, const struct model_gdn *w, const struct cpu_layer_consts *c,
                    struct cpu_layer_state *st, const float *x, int T, bool verify, float *y);

/* qsa.c: attention for T rows at positions pos0…; K/V (and indexer keys)
 * for those rows are appended at pos0… (capacity already ensured). */
int cpu_attn_forward(const struct model_hparams *hp, const struct model_layer *l, const struct cpu_layer_consts *c,
                     struct cpu_layer_state *st, const float *x, int T, int64_t pos0, float *y);
/* Dense attention of T rows over n_ctx cached entries whose positions are
 * given (the MTP cache); the rows' own K/V are appended at n_ctx…. */
int cpu_attn_forward_dense(const struct model_hparams *hp, const struct model_layer *l,
                           const struct cpu_layer_consts *c, struct cpu_layer_state *st, const float *x, int T,
                           int64_t n_ctx, const int64_t *row_pos, float *y);

/* moe.c: y = MoE(x) for T rows. */
/* Where a MoE call comes from: the route tap (trunk layers) and the remote
 * experts of the backend (any layer, MTP included). */
struct cpu_moe_ctx {
    const struct gw_eval_args *tap; /* NULL: no route tap (its coverage mode too) */
    int layer;                      /* index into the remote map */
    const struct gw_moe_remote *remote;
    uint64_t *computed; /* NULL, or += the pairs run here (gw_backend_experts_computed) */
    uint64_t *skipped;  /* NULL, or += the pairs coverage mode left out (gw_backend_experts_skipped) */
    int32_t *ids_out;   /* NULL, or the T × k routed ids copied here (the slot cache's counts) */
};

int cpu_moe_forward(const struct model_hparams *hp, const struct model_moe *w, const struct cpu_layer_consts *c,
                    const float *x, int T, float *y, const struct cpu_moe_ctx *mc);

/* ple.c: X += PLE(X) for T rows; tokens = the whole history (n_pos0 + T
 * entries), rows are positions n_pos0…; updates the conv state.  Table rows
 * come from src when it has a function (backend.h), else from the model. */
int cpu_ple_forward(const struct model *m, const struct gw_ple_rows *src, const struct model_layer *l,
                    const struct cpu_layer_consts *c, struct cpu_layer_state *st, const int32_t *tokens,
                    int64_t n_pos0, int T, bool verify, float *X);
/* The global table rows of the n-gram heads for position p (NH values). */
void cpu_ple_rows(const struct model_hparams *hp, const int32_t *tokens, int64_t p, int64_t *rows);

/* mtp.c */
int cpu_mtp_eval(gw_seq *s, const struct gw_mtp_args *a, char *err, size_t errlen);

/* backend_cpu.c: the logits of T rows of the head mixer's input. */
int cpu_head(const struct cpu_backend *be, const struct model_hc *mixer, const float *mixer_norm,
             const struct model_tensor *out_w, const float *X, int T, float *logits);

#endif
