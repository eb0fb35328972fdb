/* model.h — a qwen4exp GGUF, opened once and described by plain structs.
 *
 * model_open() maps the file (or split set) with gguf_open, reads every
 * hyperparameter from the `qwen4exp.*` keys (nothing is assumed from the
 * released model), then binds every tensor by name exactly once into the
 * semantic structs below (`layer->gdn.qkv`, `layer->moe.gate_exps`, ...),
 * checking each tensor's shape against the hyperparameters and its type
 * against the quant table (every tensor of the file is checked first, so an
 * unsupported type fails up front in one line naming tensor and type).  A failure names the key or tensor at fault
 * ("blk.3.attn_q.weight: expected 64×192, got 64×96").  After load nothing
 * looks a name up again: backends read struct fields.
 *
 * Tensor data stays in the mapping.  Shapes use GGUF order: ne[0] is the row
 * length (the input dimension of a matrix), ne[1] the number of rows (its
 * output dimension), ne[2] the expert index of a 3-D expert tensor.
 * Value-head-indexed GDN tensors are in GGUF's tiled order (value head h'
 * uses key head h' mod Hk); see docs/CONVERSION.md §3.3. */
#ifndef NB_MODEL_H
#define NB_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"

#define MODEL_ARCH "qwen4exp"
#define MODEL_PLE_MAX_NGRAM 8  /* n-gram orders 2..N, N ≤ this */
#define MODEL_PLE_MAX_HEADS 64 /* (N-1) · heads_per_ngram ≤ this */

/* One bound tensor.  `data == NULL` means an optional tensor that is absent. */
struct model_tensor {
    const uint8_t *data;
    const struct quant_traits *qt; /* its format's traits (to_float is never NULL) */
    enum quant_type type;
    int64_t ne[GGUF_MAX_DIMS];     /* unused dims are 1 */
    size_t row_bytes;              /* bytes of one ne[0] row */
    size_t mat_bytes;              /* bytes between consecutive ne[2] slices (expert matrices) */
    const char *name;              /* the GGUF name (for messages) */
};

enum model_layer_kind {
    MODEL_LAYER_GDN = 0,  /* Gated DeltaNet ("linear_attention") */
    MODEL_LAYER_ATTN = 1, /* gated attention: QSA when compress_ratio > 0, else dense */
};

/* A hyper-connection: grouped norm, low-rank stream mixer, and (for the
 * sublayer ones, not the head mixer) the inject weights. */
struct model_hc {
    struct model_tensor norm;   /* [nC], folded 1+w */
    struct model_tensor down;   /* [nC, r] */
    struct model_tensor up;     /* [r, nC] */
    struct model_tensor inject; /* [nC, n]; absent on head mixers */
};

struct model_gdn {
    struct model_tensor qkv;     /* [C, 2·Hk·dk + Hv·dv]: q | k | v (v heads tiled) */
    struct model_tensor gate;    /* [C, Hv·dv] z */
    struct model_tensor conv;    /* [Kc, conv_dim]; tap Kc-1 is the current token */
    struct model_tensor dt_bias; /* [Hv] */
    struct model_tensor a;       /* [Hv] = -exp(A_log) */
    struct model_tensor alpha;   /* [C, Hv] */
    struct model_tensor beta;    /* [C, Hv] */
    struct model_tensor norm;    /* [dv], plain weight (not folded) */
    struct model_tensor out;     /* [Hv·dv, C] */
};

struct model_attn {
    struct model_tensor q;          /* [C, 2·Hq·D]: per head D query rows then D gate rows */
    struct model_tensor k, v;       /* [C, Hkv·D] */
    struct model_tensor o;          /* [Hq·D, C] */
    struct model_tensor q_norm;     /* [D] */
    struct model_tensor k_norm;     /* [D] */
    struct model_tensor idx_q;      /* [C, Hi·Di]; absent on dense layers without an indexer */
    struct model_tensor idx_k;      /* [C, Di] */
    struct model_tensor idx_q_norm; /* [Di] */
    struct model_tensor idx_k_norm; /* [Di] */
};

struct model_moe {
    struct model_tensor router;     /* [C, E] */
    struct model_tensor gate_exps;  /* [C, I, E] (a view into gate_up when fused) */
    struct model_tensor up_exps;    /* [C, I, E] */
    struct model_tensor down_exps;  /* [I, C, E] */
    struct model_tensor shexp_gate; /* [C] scalar gate of the shared expert */
    struct model_tensor gate_shexp; /* [C, Is] */
    struct model_tensor up_shexp;   /* [C, Is] */
    struct model_tensor down_shexp; /* [Is, C] */
    bool fused_gate_up;             /* the file had ffn_gate_up_exps */
};

struct model_ple_weights {
    struct model_tensor key;        /* [P, nC] */
    struct model_tensor value;      /* [P, C] */
    struct model_tensor norm_key;   /* [nC] grouped, folded */
    struct model_tensor norm_query; /* [nC] */
    struct model_tensor norm_conv;  /* [nC] */
    struct model_tensor conv;       /* [Kp, nC]; tap Kp-1-t is t·dilation tokens back */
};

/* The MTP block's extra tensors (the rest of the block is a normal layer). */
struct model_nextn {
    struct model_tensor eh_proj;      /* [2C, C]: columns 0..C-1 take the normed embedding */
    struct model_tensor enorm;        /* [C] */
    struct model_tensor hnorm;        /* [nC] grouped */
    struct model_hc head;             /* nextn.hc_head_*, or a copy of output_hc_* */
    struct model_tensor embed_tokens; /* optional [C, V]; else token_embd is used */
    struct model_tensor shared_head;  /* optional [C, V]; else output is used */
};

struct model_layer {
    enum model_layer_kind kind;
    int compress_ratio; /* QSA tokens per index block; 0 = dense attention (and GDN layers) */
    bool has_ple;
    bool is_nextn;      /* an MTP block (index ≥ n_layer) */
    struct model_hc hc_attn, hc_ffn;
    struct model_gdn gdn;             /* kind == GDN */
    struct model_attn attn;           /* kind == ATTN */
    struct model_moe moe;
    struct model_ple_weights ple;     /* has_ple */
    struct model_nextn nextn;         /* is_nextn */
};

struct model_hparams {
    int64_t n_vocab;        /* V */
    int64_t n_embd;         /* C */
    int n_layer;            /* trunk layers L (block_count minus MTP blocks) */
    int n_nextn;            /* MTP blocks after the trunk (0 or 1) */
    int64_t n_ctx_train;    /* context_length, 0 if absent */
    float rms_eps;

    int hc_count;           /* n streams of the wide residual */
    int hc_rank;            /* r */

    int n_head, n_head_kv, head_dim; /* Hq, Hkv, D */
    int rope_dim;           /* rotated dims per head (first rope_dim, NeoX pairs i, i+rope_dim/2) */
    float rope_theta;

    int ssm_conv_kernel;    /* Kc */
    int ssm_k_head_dim;     /* dk: q and k heads, the recurrent state's rows (ssm.state_size) */
    int ssm_v_head_dim;     /* dv: v, z and output heads, the state's columns (ssm.inner_size / Hv) */
    bool ssm_gate_silu;     /* the output gate is silu(z), not sigmoid(z) (ssm.output_gate) */
    int ssm_n_k_heads;      /* Hk */
    int ssm_n_v_heads;      /* Hv (the output gate is sigmoid: no GGUF key, llama.cpp hard-codes it too) */

    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp; /* E, k, I, Is */
    bool expert_weights_norm; /* renormalise the top-k probabilities */

    int idx_n_head, idx_head_dim; /* Hi, Di */
    int idx_top_k;                /* token budget B (blocks = B / compress ratio) */

    int ple_layer;          /* 0-based layer index, -1 without PLE */
    int ple_ngram;          /* N: orders 2..N are hashed */
    int ple_heads_per_ngram;
    int ple_n_heads;        /* NH = (N-1)·heads_per_ngram */
    int ple_row_width;      /* W, one table row */
    int ple_embd;           /* P = NH·W, input width of ple_key/ple_value */
    int ple_conv_kernel;    /* Kp */
    int ple_dilation;       /* = N */
    int32_t ple_eos;        /* n-grams never reach back across this id */
    int64_t ple_mult[MODEL_PLE_MAX_NGRAM];     /* multiplier of t_{p-s}, s = 0..N-1 */
    int64_t ple_offset[MODEL_PLE_MAX_HEADS];   /* first table row of head h */
    int64_t ple_vocab[MODEL_PLE_MAX_HEADS];    /* rows of head h (a prime) */
};

struct model {
    struct model_hparams hp;
    struct model_tensor tok_embd;   /* [C, V] */
    struct model_tensor output;     /* [C, V] (token_embd when the file has no output) */
    struct model_hc output_hc;      /* head mixer (no inject) */
    struct model_tensor ple_table;  /* [W, R]; absent without PLE */
    struct model_layer *layers;     /* n_layer + n_nextn */
    bool nextn_uses_trunk_head;     /* MTP has no hc_head_*: it reuses output_hc (callers may log it) */
    bool nextn_declared_absent;     /* the file declares an MTP block (nextn_predict_layers) without its
                                       tensors, as published main files do: loaded without MTP */
    gguf_file *gguf;
    gguf_file *mtp_gguf;            /* the separate MTP file (model_open_mtp), NULL otherwise */
    char *mtp_path;                 /* its path (for messages), NULL otherwise */
};

/* Opens and binds a qwen4exp GGUF (one file or any shard of a split set).
 * Returns 0 or a negative NB_E*, with err naming the key/tensor at fault. */
int model_open(const char *path, struct model **out, char *err, size_t errlen);
/* The same with the MTP block taken from a separate GGUF (mtp_path; NULL: as
 * model_open), as Unsloth ships `mtp-*.gguf`: a qwen4exp file whose
 * block_count is the trunk's plus one, nextn_predict_layers 1, holding the
 * blk.L tensors (any trunk tensors in it are ignored).  Its hyperparameters
 * and every shape must match the trunk's; a mismatch names the key or
 * tensor ("MTP file F: ...").  It replaces an MTP block of the main file. */
int model_open_mtp(const char *path, const char *mtp_path, struct model **out, char *err, size_t errlen);
void model_close(struct model *m);
/* Keeps the first n trunk layers (1 ≤ n ≤ n_layer) and nothing after
 * them: n_layer becomes n, the MTP block is dropped, and the n-gram table
 * with its layer when that layer is not among the first n.  The head mixer
 * and the LM head stay, so a backend made from m computes the real first-n
 * layer forward then the head — only those layers' weights uploaded (cuda)
 * or touched in the mapping (cpu).  For checks of models too large for the
 * device (nebula logits --layers).  NB_EINVAL with a message for another n. */
int model_keep_layers(struct model *m, int n, char *err, size_t errlen);
/* One line for the log about speculative decoding: which MTP block drafts,
 * or that there is none (the caller prints it). */
void model_mtp_describe(const struct model *m, char *buf, size_t len);

/* Width of the wide residual, n·C. */
static inline int64_t model_wide(const struct model_hparams *hp) { return (int64_t)hp->hc_count * hp->n_embd; }
/* Widths of GDN's q (and k) projection, Hk·dk, and of its v, z and output, Hv·dv. */
static inline int64_t model_gdn_k_dim(const struct model_hparams *hp) { return (int64_t)hp->ssm_n_k_heads * hp->ssm_k_head_dim; }
static inline int64_t model_gdn_v_dim(const struct model_hparams *hp) { return (int64_t)hp->ssm_n_v_heads * hp->ssm_v_head_dim; }
/* Channels of the GDN conv: 2·Hk·dk + Hv·dv (q, k, v). */
static inline int64_t model_gdn_conv_dim(const struct model_hparams *hp)
{
    return 2 * model_gdn_k_dim(hp) + model_gdn_v_dim(hp);
}

/* Floats of a sequence's fixed-size state per layer, whatever the backend:
 * the GDN conv's last Kc-1 columns, the GDN recurrent state (Hv × dk × dv),
 * and the PLE dilated conv's (Kp-1)·dilation wide columns. */
/* GDN's chunked form (prefill) works in blocks of this many rows from an
 * eval's first (transformers' chunk_size; both backends).  So a prefill split
 * at a multiple of it gives the unsplit prefill's logits bit for bit, and
 * anywhere else not: the positions a saved sequence state resumes from
 * exactly (the prompt cache, issue 17) are multiples of model_resume_align —
 * MODEL_GDN_CHUNK with GDN layers, 1 without (tests/engine/test_seq_state.c). */
#define MODEL_GDN_CHUNK 64
static inline int model_resume_align(const struct model *m)
{
    for (int i = 0; i < m->hp.n_layer; i++)
        if (m->layers[i].kind == MODEL_LAYER_GDN) return MODEL_GDN_CHUNK;
    return 1;
}

static inline int64_t model_gdn_conv_state_floats(const struct model_hparams *hp)
{
    return (int64_t)(hp->ssm_conv_kernel - 1) * model_gdn_conv_dim(hp);
}
static inline int64_t model_gdn_ssm_state_floats(const struct model_hparams *hp)
{
    return (int64_t)hp->ssm_n_v_heads * hp->ssm_k_head_dim * hp->ssm_v_head_dim;
}
static inline int64_t model_ple_conv_state_floats(const struct model_hparams *hp)
{
    return (int64_t)(hp->ple_conv_kernel - 1) * hp->ple_dilation * model_wide(hp);
}

#endif
