/* convert.h — the converter's plan: which GGUF tensors to write, where each
 * row of each comes from in the Hugging Face checkpoint, and the transform on
 * the way (docs/CONVERSION.md §3).
 *
 * The one idea: every GGUF tensor is produced row by row (ne[0] values at a
 * time) from rows of safetensors tensors, through a small "row map" (direct,
 * value-head tiled, stacked from a list, sliced from fused experts, or two
 * sources side by side) and an element-wise op (+1 fold, −exp).  So nothing is
 * ever held whole: the 51B-parameter n-gram table streams like a norm does. */
#ifndef NB_CONVERT_H
#define NB_CONVERT_H

#include "core/quant/quant.h"
#include "core/safetensors/safetensors.h"
#include "tools/nebula-convert/hfconfig.h"

#include <stdbool.h>
#include <stdint.h>

enum conv_role {
    ROLE_F32,          /* norms, 1-D tensors, router, conv kernels, decay: always F32 */
    ROLE_DENSE,        /* projections, embeddings, head */
    ROLE_EXPERT_GATEUP,
    ROLE_EXPERT_DOWN,
    ROLE_INDEXER,
    ROLE_PLE_TABLE,
    ROLE_COUNT
};

enum conv_rowmap {
    MAP_DIRECT,       /* source row = r + row_off */
    MAP_TILE,         /* rows >= tile_from are value heads, re-ordered HF grouped → GGUF tiled */
    MAP_LIST,         /* r / rows_per picks the source, r % rows_per its row */
    MAP_FUSED_EXPERT, /* expert e's rows [fe_off, fe_off + fe_n) of rows_per rows */
    MAP_CONCAT_COLS,  /* src[0] row r then src[1] row r (eh_proj) */
};

enum conv_op { OP_NONE, OP_FOLD, OP_NEG_EXP };

struct conv_tensor {
    char name[128];
    int n_dims;
    int64_t ne[4];
    enum conv_role role;
    enum quant_type type; /* chosen by conv_choose_types */
    enum conv_rowmap map;
    enum conv_op op;
    const struct st_tensor **src; /* owned array */
    int n_src;
    int64_t row_off, rows_per, fe_off, fe_n;
    /* value-head tiling: heads of `unit` rows (or columns) from row tile_from on */
    int64_t tile_from, tile_unit, tile_hk, tile_g;
    bool tile_cols; /* permute columns instead of rows (ssm_out, 1-D per-head vectors) */
};

/* A synthetic model (nebula-convert --synthetic): no checkpoint; every
 * source tensor the plan asks for is made up with the shape config.json
 * implies, and its values are drawn from a seeded generator when rows are
 * produced.  The layout therefore comes from the one plan, never from a copy. */
struct conv_synth {
    bool on;
    uint64_t seed;
    double router_skew; /* 0: uniform expert popularity */
    /* Topics (issue 15 item 5: routing that drifts with the context): token v belongs to topic v mod topics,
     * its embedding row gains topic_embed × u_topic (u: a unit-variance random direction per topic), and in
     * each MoE layer a topic_share of the experts favour each topic, their router rows gaining
     * topic_router / hidden × u_topic (a logit of about topic_router × the hidden state's share of u).
     * 0 topics: none (the fixed-popularity router of before); at most CONV_MAX_TOPICS. */
    int topics;
    double topic_embed, topic_router, topic_share;
    bool exact_rows;    /* every row drawn and quantized (slow); else large tensors come from pools (pool.c) */
    struct st_tensor **virt;
    int n_virt, cap_virt;
};

struct conv_plan {
    struct hf_config cfg;
    const st_set *st; /* NULL for a synthetic model */
    struct conv_synth synth;
    char prefix[64]; /* "model." or "model.language_model." */
    bool mtp;        /* MTP block exported as blk.{n_layers} */
    struct conv_tensor *t;
    int n, cap;
    /* PLE constants (u64 in GGUF), from the checkpoint's int64 buffers */
    uint64_t ple_mult[16], ple_offsets[64], ple_sizes[64];
    int n_ple_mult, n_ple_heads;
    int64_t ple_row_width;
};

/* A quant mix: the output type of each role (ROLE_F32 tensors and 1-D
 * tensors are always F32), with block-size fallbacks where a row does not fit
 * (K-quants need rows of 256: the 640-wide expert down rows fall back to their
 * 32-block neighbours).  One table for nebula-convert --type and nebula-gen --mix. */
/* A published mix also gives some tensors their own type: the first
 * override whose `match` is a substring of the tensor's name wins ("blk.0."
 * is the first layer only, "_shexp." the shared expert; "^x" matches names
 * that start with x).  Never for ROLE_F32 tensors or 1-D ones, which stay F32. */
struct conv_override {
    const char *match;
    enum quant_type type;
};
#define CONV_MAX_OVERRIDES 12

struct conv_mix {
    const char *name;
    enum quant_type type[ROLE_COUNT];
    uint32_t file_type; /* general.file_type (llama_ftype) */
    const char *about;
    struct conv_override over[CONV_MAX_OVERRIDES]; /* ends at the first NULL match */
};
extern const struct conv_mix conv_mixes[];
extern const int conv_n_mixes;
/* The mix of that name (case-insensitive), or NULL. */
const struct conv_mix *conv_mix_find(const char *name);
/* conv_mix_find for a command line: an unknown name is reported on stderr
 * ("PROG: unknown OPTION 'x' (f32, …)") and gives NULL. */
const struct conv_mix *conv_mix_parse(const char *prog, const char *option, const char *name);

/* The router skew that makes a synthetic model's routing about as
 * concentrated as the released model's: the hottest 16.7 % of each layer's
 * experts take ~65 % of routed selections (MODEL.md, last section; the
 * calibration run is in docs/BENCHMARKS.md, "nebula-gen router skew"). */
#define CONV_SKEW_DEFAULT 0.38
#define CONV_MAX_TOPICS 64 /* a router row's favoured topics are one 64-bit mask (rows.c) */
#define CONV_SKEW_DEFAULT_STR "0.38"

/* st NULL with synth->on: a synthetic model. */
int conv_plan_build(struct conv_plan *p, const st_set *st, const struct conv_synth *synth, const struct hf_config *cfg,
                    bool want_mtp, char *err, size_t errlen);
void conv_plan_free(struct conv_plan *p);
/* A synthetic model's plan from a config.json path: the first `layers`
 * layers (0: all), n-gram heads from `ngram_base` (0: as configured). */
int conv_synth_plan(struct conv_plan *p, const char *config_path, int64_t layers, int64_t ngram_base,
                    const struct conv_synth *synth, bool want_mtp, char *err, size_t errlen);
/* Sets every tensor's output type from a mix, with block-size fallbacks. */
void conv_choose_types(struct conv_plan *p, const struct conv_mix *mix);
/* write.c: the planned model (types chosen) as a GGUF at `out`, written to
 * out.tmp and renamed when complete; SIGINT/SIGTERM stop it cleanly. */
struct conv_write_opts {
    const char *prog;    /* for messages: "nebula-convert" */
    const char *name;    /* general.name */
    const char *description; /* NULL, or general.description (what the model is: the demo's notice) */
    const char *tok_dir; /* NULL, or a folder whose tokenizer.json is embedded */
    const struct conv_mix *mix;
    bool quiet; /* no per-tensor progress */
    /* The published layouts: split_ple writes a two-file split set, OUT's
     * name made NAME-00001-of-00002.gguf (everything else) and
     * NAME-00002-of-00002.gguf (the n-gram table alone, as ISTA-DASLab ships
     * it); mtp_out writes the MTP block (blk.L) as its own GGUF there, as
     * Unsloth ships MTP/mtp-*.gguf: the same keys, its tensors only, while
     * the main file keeps block_count L+1 and nextn_predict_layers 1 without
     * them (as published main files do). */
    bool split_ple;
    const char *mtp_out;
    /* Header and layout only: every tensor's bytes a hole of the file
     * (gguf_w_skip_data), the file full-size but taking no disk. */
    bool sparse;
};
int conv_write_gguf(const struct conv_plan *p, const char *out, const struct conv_write_opts *o, char *err, size_t errlen);
/* The path of shard s (0-based) of n that --split makes of OUT (NAME.gguf → NAME-0000s-of-0000n.gguf). */
int conv_shard_path(const char *out, int s, int n, char *path, size_t len);
/* Bytes of tensor data the plan writes (types chosen). */
double conv_plan_bytes(const struct conv_plan *p);
/* The synthetic values' hashes: splitmix64's finalizer, FNV-1a of a name. */
uint64_t conv_mix64(uint64_t x);
uint64_t conv_name_hash(const char *s);
/* Values of a synthetic source tensor (data == NULL): n values from `first`. */
void conv_synth_values(const struct conv_plan *p, const struct st_tensor *t, int64_t first, int64_t n, float *dst);
/* The topic model's parts (struct conv_synth): component col of topic's direction (unit variance), and
 * whether the router of `layer` makes `expert` favour `topic` (a topic_share of each layer's experts). */
float conv_topic_dir(const struct conv_synth *sy, int topic, int64_t col);
bool conv_topic_favours(const struct conv_synth *sy, int layer, int expert, int topic);
/* pool.c: a synthetic model's large tensors from pools of quantized rows. */
struct conv_pools;
struct conv_pools *conv_pools_new(void);
void conv_pools_free(struct conv_pools *ps);
/* Whether tensor t (type chosen) is written from a pool rather than row by row. */
bool conv_pool_applies(const struct conv_plan *p, const struct conv_tensor *t);
/* Rows [r0, r0 + nr) of t, quantized, into dst (nr · its row size); the
 * pool of t's kind is built on first use. */
int conv_pool_rows(struct conv_pools *ps, const struct conv_plan *p, const struct conv_tensor *t, int64_t r0, int64_t nr,
                   unsigned char *dst, char *err, size_t errlen);
/* Produces output row r (ne[0] floats) of tensor t; scratch has ≥ 2·ne[0] floats. */
int conv_row(const struct conv_plan *p, const struct conv_tensor *t, int64_t r, float *out, float *scratch, char *err, size_t errlen);
/* GGUF head h′ of a tiled axis holds HF head tile_src_head(h′). */
int64_t conv_tile_src_head(int64_t h, int64_t hk, int64_t g);

#endif
