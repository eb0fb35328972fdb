/* hfconfig.h — the fields of a Hugging Face qwen4_exp config.json the
 * converter needs, read once into plain C.  Nothing about the model's sizes is
 * hard-coded anywhere else in the converter: every shape comes from here. */
#ifndef NB_CONVERT_HFCONFIG_H
#define NB_CONVERT_HFCONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HF_MAX_LAYERS 256
#define HF_MAX_PLE 8

struct hf_config {
    bool conditional_generation; /* Qwen4ExpForConditionalGeneration: text under model.language_model. */
    int64_t vocab_size, hidden_size, n_layers;
    int64_t n_head, n_head_kv, head_dim;
    double rms_eps, rope_theta, partial_rotary;
    int64_t rope_dim;            /* head_dim × partial_rotary_factor */
    int64_t mrope_section[4];
    int n_mrope_section;
    int64_t max_pos;
    bool is_linear[HF_MAX_LAYERS]; /* GDN layer (else QSA/full attention) */
    int64_t full_attention_interval; /* 0 when the pattern is irregular */
    /* Gated DeltaNet */
    int64_t lin_conv_kernel, lin_k_head_dim, lin_v_head_dim, lin_n_k_heads, lin_n_v_heads;
    bool gate_sigmoid;
    /* MoE */
    int64_t n_experts, n_experts_used, expert_ff, shared_ff;
    bool norm_topk;
    /* hyper-connections */
    int64_t hc_count, hc_lowrank;
    /* PLE */
    int n_ple;
    int64_t ple_layers[HF_MAX_PLE]; /* 0-based */
    int64_t ple_embed_dim, ple_conv_kernel, ngram_size, heads_per_ngram;
    int64_t ngram_vocab_base, ngram_divisor, ngram_seed, split_ngram_parts;
    int64_t ple_eos; /* first eos id: n-grams never reach across it */
    /* QSA indexer */
    bool has_indexer;
    int64_t idx_heads, idx_kv_heads, idx_head_dim, idx_budget, idx_ratio;
    /* special ids */
    int n_eos;
    int64_t eos[8];
    int64_t bos, pad; /* -1 when unset */
    int64_t image_token_id; /* -1 when unset */
    bool tie_embeddings;
    int64_t mtp_layers; /* mtp_num_hidden_layers (0 when absent) */
};

/* Reads DIR/config.json. Missing required field or bad value → NB_EFORMAT
 * naming the field. */
int hf_config_load(const char *dir, struct hf_config *cfg, char *err, size_t errlen);
/* Same, from a config.json path. */
int hf_config_load_file(const char *path, struct hf_config *cfg, char *err, size_t errlen);
/* Keeps the first n layers (synthetic models emulate a slice of the full
 * depth); PLE layers past them are dropped. NB_EINVAL if n is out of range. */
int hf_config_truncate(struct hf_config *cfg, int64_t n, char *err, size_t errlen);

#endif
