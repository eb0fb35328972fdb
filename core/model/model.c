/* model.c — opening a qwen4exp GGUF and reading its hyperparameters.
 *
 * Every number the forward pass needs comes from a `qwen4exp.*` key; a
 * required key that is missing, zero or out of range is an error naming the
 * key.  The one derived decision is the kind of each layer (GDN or
 * attention), taken in this order (docs/CONVERSION.md §3.1):
 *   1. `attention.recurrent_layers` (per-layer bool) when present;
 *   2. else `attention.compress_ratios` when some trunk layer has a ratio > 0
 *      (> 0 ⇒ QSA), checked against `full_attention_interval` if present;
 *   3. else `full_attention_interval` (default 4): every interval-th layer is
 *      attention, dense because no ratio says otherwise (this is what a file
 *      converted by llama.cpp from a transformers-5.17-spelled config looks like).
 * MTP blocks (index ≥ n_layer) are always attention, and dense, as in
 * llama.cpp's MTP graph.  Tensor binding is in model_tensors.c. */
#include "core/model/model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model_priv.h"
#include "core/util/err.h"

#define KEY(suffix) MODEL_ARCH "." suffix

/* A required positive integer key (any integer type that fits an int). */
static int req_int(const gguf_file *g, const char *key, int *out, char *err, size_t errlen)
{
    if (gguf_find_key(g, key) < 0) return nb_errf(err, errlen, NB_ENOENT, "%s: required key missing", key);
    int64_t v;
    int rc = gguf_get_i64(g, key, &v, err, errlen);
    if (rc) return rc;
    if (v <= 0 || v > INT_MAX) return nb_errf(err, errlen, NB_EFORMAT, "%s: %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

/* An optional non-negative integer key; *out keeps its default when absent. */
static int opt_int(const gguf_file *g, const char *key, int *out, char *err, size_t errlen)
{
    if (gguf_find_key(g, key) < 0) return 0;
    int64_t v;
    int rc = gguf_get_i64(g, key, &v, err, errlen);
    if (rc) return rc;
    if (v < 0 || v > INT_MAX) return nb_errf(err, errlen, NB_EFORMAT, "%s: %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

static int req_f32(const gguf_file *g, const char *key, float *out, char *err, size_t errlen)
{
    if (gguf_find_key(g, key) < 0) return nb_errf(err, errlen, NB_ENOENT, "%s: required key missing", key);
    int rc = gguf_get_f32(g, key, out, err, errlen);
    if (rc) return rc;
    if (!(*out > 0)) return nb_errf(err, errlen, NB_EFORMAT, "%s: %g must be positive", key, (double)*out);
    return 0;
}

/* Reads n entries of an integer or bool array into dst (as int64).  The
 * array must hold at least n entries; extra entries are ignored. */
static int read_int_array(const gguf_file *g, const char *key, uint64_t n, int64_t *dst, char *err, size_t errlen)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return nb_errf(err, errlen, NB_ENOENT, "%s: required key missing", key);
    if (gguf_kv_type(g, i) != GGUF_VT_ARRAY)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: expected an array, got %s", key, gguf_vtype_name(gguf_kv_type(g, i)));
    uint64_t len = gguf_kv_arr_len(g, i);
    if (len < n)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: has %llu entries, at least %llu required", key,
                       (unsigned long long)len, (unsigned long long)n);
    if (gguf_kv_arr_type(g, i) == GGUF_VT_BOOL) {
        enum gguf_vtype t;
        const void *data;
        uint64_t cnt;
        int rc = gguf_get_arr_data(g, key, &t, &data, &cnt, err, errlen);
        if (rc) return rc;
        for (uint64_t j = 0; j < n; j++) dst[j] = ((const uint8_t *)data)[j] != 0;
        return 0;
    }
    /* Integer elements (u64 included) are widened exactly; never through float. */
    for (uint64_t j = 0; j < n; j++) {
        int rc = gguf_get_arr_i64(g, key, j, &dst[j], err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int read_core(const gguf_file *g, struct model_hparams *hp, int *n_block, char *err, size_t errlen)
{
    int rc, n_embd, kv_len, v_len;
    if ((rc = req_int(g, KEY("block_count"), n_block, err, errlen))) return rc;
    hp->n_nextn = 0;
    if ((rc = opt_int(g, KEY("nextn_predict_layers"), &hp->n_nextn, err, errlen))) return rc;
    if (hp->n_nextn > 1)
        return nb_errf(err, errlen, NB_ENOTSUP, "%s: %d MTP blocks, only one is supported", KEY("nextn_predict_layers"),
                       hp->n_nextn);
    if (hp->n_nextn >= *n_block)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: %d is not below block_count %d", KEY("nextn_predict_layers"),
                       hp->n_nextn, *n_block);
    hp->n_layer = *n_block - hp->n_nextn;
    if ((rc = req_int(g, KEY("embedding_length"), &n_embd, err, errlen))) return rc;
    hp->n_embd = n_embd;
    int ctx = 0;
    if ((rc = opt_int(g, KEY("context_length"), &ctx, err, errlen))) return rc;
    hp->n_ctx_train = ctx;
    if ((rc = req_f32(g, KEY("attention.layer_norm_rms_epsilon"), &hp->rms_eps, err, errlen))) return rc;

    if ((rc = req_int(g, KEY("hyper_connection.count"), &hp->hc_count, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("hyper_connection.low_rank"), &hp->hc_rank, err, errlen))) return rc;
    if (hp->hc_count < 2)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: %d streams, at least 2 required", KEY("hyper_connection.count"),
                       hp->hc_count);

    if ((rc = req_int(g, KEY("attention.head_count"), &hp->n_head, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("attention.head_count_kv"), &hp->n_head_kv, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("attention.key_length"), &kv_len, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("attention.value_length"), &v_len, err, errlen))) return rc;
    if (kv_len != v_len)
        return nb_errf(err, errlen, NB_ENOTSUP, "%s %d != %s %d: one head size is supported", KEY("attention.key_length"),
                       kv_len, KEY("attention.value_length"), v_len);
    hp->head_dim = kv_len;
    if (hp->n_head % hp->n_head_kv)
        return nb_errf(err, errlen, NB_EFORMAT, "%s %d is not a multiple of %s %d", KEY("attention.head_count"),
                       hp->n_head, KEY("attention.head_count_kv"), hp->n_head_kv);
    if ((rc = req_int(g, KEY("rope.dimension_count"), &hp->rope_dim, err, errlen))) return rc;
    if (hp->rope_dim % 2 || hp->rope_dim > hp->head_dim)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: %d must be even and at most the head size %d",
                       KEY("rope.dimension_count"), hp->rope_dim, hp->head_dim);
    return req_f32(g, KEY("rope.freq_base"), &hp->rope_theta, err, errlen);
}

static int read_gdn_moe(const gguf_file *g, struct model_hparams *hp, char *err, size_t errlen)
{
    int rc, inner;
    if ((rc = req_int(g, KEY("ssm.conv_kernel"), &hp->ssm_conv_kernel, err, errlen))) return rc;
    /* As llama.cpp reads them: state_size is the key head size dk, and the
     * value head size is derived, dv = inner_size / time_step_rank (Hv). */
    if ((rc = req_int(g, KEY("ssm.state_size"), &hp->ssm_k_head_dim, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("ssm.group_count"), &hp->ssm_n_k_heads, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("ssm.time_step_rank"), &hp->ssm_n_v_heads, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("ssm.inner_size"), &inner, err, errlen))) return rc;
    if (inner % hp->ssm_n_v_heads)
        return nb_errf(err, errlen, NB_EFORMAT, "%s %d is not a multiple of %s %d (value heads × value head size)",
                       KEY("ssm.inner_size"), inner, KEY("ssm.time_step_rank"), hp->ssm_n_v_heads);
    hp->ssm_v_head_dim = inner / hp->ssm_n_v_heads;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return nb_errf(err, errlen, NB_EFORMAT, "%s %d is not a multiple of %s %d", KEY("ssm.time_step_rank"),
                       hp->ssm_n_v_heads, KEY("ssm.group_count"), hp->ssm_n_k_heads);
    /* The GDN output gate (config.json output_gate_type): Nebula's key, absent
     * from published files, whose model is sigmoid-gated. */
    hp->ssm_gate_silu = false;
    if (gguf_find_key(g, KEY("ssm.output_gate")) >= 0) {
        const char *gate;
        if ((rc = gguf_get_str(g, KEY("ssm.output_gate"), &gate, err, errlen))) return rc;
        if (strcmp(gate, "sigmoid") && strcmp(gate, "silu"))
            return nb_errf(err, errlen, NB_EFORMAT, "%s \"%s\" is not sigmoid or silu", KEY("ssm.output_gate"), gate);
        hp->ssm_gate_silu = strcmp(gate, "silu") == 0;
    }

    if ((rc = req_int(g, KEY("expert_count"), &hp->n_expert, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("expert_used_count"), &hp->n_expert_used, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("expert_feed_forward_length"), &hp->n_ff_exp, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("expert_shared_feed_forward_length"), &hp->n_ff_shexp, err, errlen))) return rc;
    if (hp->n_expert_used > hp->n_expert)
        return nb_errf(err, errlen, NB_EFORMAT, "%s %d exceeds %s %d", KEY("expert_used_count"), hp->n_expert_used,
                       KEY("expert_count"), hp->n_expert);
    hp->expert_weights_norm = true;
    if (gguf_find_key(g, KEY("expert_weights_norm")) >= 0 &&
        (rc = gguf_get_bool(g, KEY("expert_weights_norm"), &hp->expert_weights_norm, err, errlen)))
        return rc;
    return 0;
}

/* Layer kinds and compress ratios (see the comment at the top). */
static int read_layer_kinds(const gguf_file *g, struct model *m, int n_block, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    int64_t *cr = calloc((size_t)n_block, sizeof *cr), *rec = calloc((size_t)n_block, sizeof *rec);
    int rc = 0, interval = 0;
    if (!cr || !rec) { rc = nb_errf(err, errlen, NB_ENOMEM, "layer arrays"); goto out; }
    bool has_cr = gguf_find_key(g, KEY("attention.compress_ratios")) >= 0;
    bool has_rec = gguf_find_key(g, KEY("attention.recurrent_layers")) >= 0;
    if (has_cr && (rc = read_int_array(g, KEY("attention.compress_ratios"), (uint64_t)hp->n_layer, cr, err, errlen)))
        goto out;
    if (has_rec && (rc = read_int_array(g, KEY("attention.recurrent_layers"), (uint64_t)hp->n_layer, rec, err, errlen)))
        goto out;
    if ((rc = opt_int(g, KEY("full_attention_interval"), &interval, err, errlen))) goto out;
    bool any_cr = false;
    for (int i = 0; i < hp->n_layer; i++) {
        if (cr[i] < 0 || cr[i] > INT_MAX) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "%s[%d]: %lld is out of range", KEY("attention.compress_ratios"), i,
                         (long long)cr[i]);
            goto out;
        }
        any_cr |= cr[i] > 0;
    }
    for (int i = 0; i < hp->n_layer; i++) {
        struct model_layer *l = &m->layers[i];
        bool by_interval = (i + 1) % (interval > 0 ? interval : 4) == 0;
        if (has_rec) {
            l->kind = rec[i] ? MODEL_LAYER_GDN : MODEL_LAYER_ATTN;
            if (rec[i] && cr[i] > 0) {
                rc = nb_errf(err, errlen, NB_EFORMAT, "layer %d: %s says recurrent but %s is %lld", i,
                             KEY("attention.recurrent_layers"), KEY("attention.compress_ratios"), (long long)cr[i]);
                goto out;
            }
        } else if (any_cr) {
            l->kind = cr[i] > 0 ? MODEL_LAYER_ATTN : MODEL_LAYER_GDN;
            if (interval > 0 && by_interval != (cr[i] > 0)) {
                rc = nb_errf(err, errlen, NB_EFORMAT, "layer %d: %s and %s disagree about its kind", i,
                             KEY("attention.compress_ratios"), KEY("full_attention_interval"));
                goto out;
            }
        } else {
            l->kind = by_interval ? MODEL_LAYER_ATTN : MODEL_LAYER_GDN;
        }
        l->compress_ratio = (int)cr[i];
    }
    for (int i = hp->n_layer; i < n_block; i++) {
        m->layers[i].kind = MODEL_LAYER_ATTN;
        m->layers[i].compress_ratio = 0;
        m->layers[i].is_nextn = true;
    }
out:
    free(cr);
    free(rec);
    return rc;
}

/* Indexer keys are required when some layer is QSA; each ratio must divide the budget. */
static int read_indexer(const gguf_file *g, struct model *m, char *err, size_t errlen)
{
    struct model_hparams *hp = &m->hp;
    bool any = false;
    for (int i = 0; i < hp->n_layer; i++) any |= m->layers[i].compress_ratio > 0;
    if (!any) return 0;
    int rc;
    if ((rc = req_int(g, KEY("attention.indexer.head_count"), &hp->idx_n_head, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("attention.indexer.key_length"), &hp->idx_head_dim, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("attention.indexer.top_k"), &hp->idx_top_k, err, errlen))) return rc;
    if (hp->rope_dim > hp->idx_head_dim)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: %d is below the rotary dims %d", KEY("attention.indexer.key_length"),
                       hp->idx_head_dim, hp->rope_dim);
    for (int i = 0; i < hp->n_layer; i++) {
        int r = m->layers[i].compress_ratio;
        if (r > 0 && hp->idx_top_k % r)
            return nb_errf(err, errlen, NB_EFORMAT, "%s %d is not a multiple of layer %d's compress ratio %d",
                           KEY("attention.indexer.top_k"), hp->idx_top_k, i, r);
    }
    return 0;
}

/* PLE keys (docs/CONVERSION.md §1.4, §3.1).  The u64 arrays are read as
 * integers, never through float: the multipliers have ~45 significant bits. */
static int read_ple(const gguf_file *g, struct model *m, char *err, size_t errlen)
{
    struct model_hparams *hp = &m->hp;
    hp->ple_layer = -1;
    int64_t ki = gguf_find_key(g, KEY("ple.layers"));
    if (ki < 0 || gguf_kv_arr_len(g, ki) == 0) return 0;
    if (gguf_kv_arr_len(g, ki) > 1)
        return nb_errf(err, errlen, NB_ENOTSUP, "%s: %llu layers, only one PLE layer is supported", KEY("ple.layers"),
                       (unsigned long long)gguf_kv_arr_len(g, ki));
    int64_t layer, eos;
    int rc;
    if ((rc = read_int_array(g, KEY("ple.layers"), 1, &layer, err, errlen))) return rc;
    if (layer < 0 || layer >= hp->n_layer)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: layer %lld is out of range", KEY("ple.layers"), (long long)layer);
    hp->ple_layer = (int)layer;
    m->layers[layer].has_ple = true;
    if ((rc = req_int(g, KEY("ple.ngram_size"), &hp->ple_ngram, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("ple.heads_per_ngram"), &hp->ple_heads_per_ngram, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("ple.conv_kernel"), &hp->ple_conv_kernel, err, errlen))) return rc;
    if ((rc = req_int(g, KEY("embedding_length_per_layer_input"), &hp->ple_row_width, err, errlen))) return rc;
    if (gguf_find_key(g, KEY("ple.eos_token_id")) < 0)
        return nb_errf(err, errlen, NB_ENOENT, "%s: required key missing", KEY("ple.eos_token_id"));
    if ((rc = gguf_get_i64(g, KEY("ple.eos_token_id"), &eos, err, errlen))) return rc;
    if (eos < 0 || eos >= hp->n_vocab)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: %lld is not a token id", KEY("ple.eos_token_id"), (long long)eos);
    hp->ple_eos = (int32_t)eos;
    if (hp->ple_ngram < 2 || hp->ple_ngram > MODEL_PLE_MAX_NGRAM)
        return nb_errf(err, errlen, NB_ENOTSUP, "%s: %d is outside 2..%d", KEY("ple.ngram_size"), hp->ple_ngram,
                       MODEL_PLE_MAX_NGRAM);
    hp->ple_n_heads = (hp->ple_ngram - 1) * hp->ple_heads_per_ngram;
    if (hp->ple_n_heads > MODEL_PLE_MAX_HEADS)
        return nb_errf(err, errlen, NB_ENOTSUP, "PLE: %d n-gram heads, at most %d supported", hp->ple_n_heads,
                       MODEL_PLE_MAX_HEADS);
    hp->ple_embd = hp->ple_n_heads * hp->ple_row_width;
    hp->ple_dilation = hp->ple_ngram;
    if ((rc = read_int_array(g, KEY("ple.layer_multipliers"), (uint64_t)hp->ple_ngram, hp->ple_mult, err, errlen)))
        return rc;
    if ((rc = read_int_array(g, KEY("ple.head_offsets"), (uint64_t)hp->ple_n_heads, hp->ple_offset, err, errlen)))
        return rc;
    if ((rc = read_int_array(g, KEY("ple.head_vocab_sizes"), (uint64_t)hp->ple_n_heads, hp->ple_vocab, err, errlen)))
        return rc;
    for (int s = 0; s < hp->ple_ngram; s++)
        if (hp->ple_mult[s] <= 0 || hp->ple_mult[s] > INT64_MAX / hp->n_vocab)
            return nb_errf(err, errlen, NB_EFORMAT, "%s[%d]: %lld would overflow a token × multiplier product",
                           KEY("ple.layer_multipliers"), s, (long long)hp->ple_mult[s]);
    for (int h = 0; h < hp->ple_n_heads; h++)
        if (hp->ple_vocab[h] <= 0 || hp->ple_offset[h] < 0)
            return nb_errf(err, errlen, NB_EFORMAT, "PLE head %d: offset %lld, size %lld", h,
                           (long long)hp->ple_offset[h], (long long)hp->ple_vocab[h]);
    return 0;
}

/* The vocabulary size: `qwen4exp.vocab_size` if present, else token_embd's rows. */
static int read_vocab(const gguf_file *g, struct model_hparams *hp, char *err, size_t errlen)
{
    int v = 0, rc;
    if ((rc = opt_int(g, KEY("vocab_size"), &v, err, errlen))) return rc;
    if (v > 0) {
        hp->n_vocab = v;
        return 0;
    }
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    if (!t) return nb_errf(err, errlen, NB_ENOENT, "token_embd.weight: required tensor missing");
    hp->n_vocab = t->ne[1];
    return 0;
}

static int read_arch(const gguf_file *g, char *err, size_t errlen)
{
    const char *arch;
    if (gguf_find_key(g, "general.architecture") < 0)
        return nb_errf(err, errlen, NB_ENOENT, "general.architecture: required key missing");
    int rc = gguf_get_str(g, "general.architecture", &arch, err, errlen);
    if (rc) return rc;
    if (strcmp(arch, MODEL_ARCH) != 0)
        return nb_errf(err, errlen, NB_ENOTSUP, "general.architecture is \"%s\", expected \"%s\"", arch, MODEL_ARCH);
    return 0;
}

/* Every tensor's type must be one the quant table can decode: checked over
 * the whole file before anything is bound, so a file of an unsupported type
 * fails at once, in one line naming the first such tensor and its type. */
static int check_types(const gguf_file *g, char *err, size_t errlen)
{
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const struct quant_traits *qt = quant_traits_of((enum quant_type)t->type);
        if (!qt || !qt->to_float)
            return nb_errf(err, errlen, NB_ENOTSUP, "%s: type %s (%u) cannot be dequantized: Nebula has no decoder for it",
                           t->name, quant_type_name((enum quant_type)t->type), t->type);
    }
    return 0;
}

/* Whether the file holds any tensor of block il (published main files
 * declare the MTP block in block_count and ship its tensors separately). */
static bool has_block(const gguf_file *g, int il)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "blk.%d.", il);
    for (int64_t i = 0; i < gguf_tensor_count(g); i++)
        if (strncmp(gguf_tensor_at(g, i)->name, prefix, (size_t)n) == 0) return true;
    return false;
}

/* The keys whose values must agree between the trunk and a separate MTP
 * file (where both have them): every shape of the MTP block follows from them. */
static const char *const mtp_same_keys[] = {
    KEY("embedding_length"), KEY("hyper_connection.count"), KEY("hyper_connection.low_rank"),
    KEY("attention.head_count"), KEY("attention.head_count_kv"), KEY("attention.key_length"),
    KEY("attention.value_length"), KEY("expert_count"), KEY("expert_used_count"),
    KEY("expert_feed_forward_length"), KEY("expert_shared_feed_forward_length"), KEY("vocab_size"),
};

/* Opens the separate MTP file and checks it belongs to this trunk. */
static int open_mtp(struct model *m, const char *path, char *err, size_t errlen)
{
    char why[768];
    int rc = gguf_open(path, &m->mtp_gguf, why, sizeof why);
    if (rc) return nb_errf(err, errlen, rc, "MTP file %s: %s", path, why);
    const gguf_file *g = m->mtp_gguf;
    int n_block = 0, nextn = 0;
    if (!rc) rc = read_arch(g, why, sizeof why);
    if (!rc) rc = req_int(g, KEY("block_count"), &n_block, why, sizeof why);
    if (!rc) rc = opt_int(g, KEY("nextn_predict_layers"), &nextn, why, sizeof why);
    if (!rc && nextn != 1)
        rc = nb_errf(why, sizeof why, NB_EFORMAT, "%s is %d, an MTP file has 1", KEY("nextn_predict_layers"), nextn);
    if (!rc && n_block - nextn != m->hp.n_layer)
        rc = nb_errf(why, sizeof why, NB_EFORMAT, "its MTP block is blk.%d (%s %d) but the model has %d trunk layers: "
                     "an MTP file of another model", n_block - nextn, KEY("block_count"), n_block, m->hp.n_layer);
    for (size_t k = 0; !rc && k < sizeof mtp_same_keys / sizeof *mtp_same_keys; k++) {
        const char *key = mtp_same_keys[k];
        int64_t a, b;
        if (gguf_find_key(g, key) < 0 || gguf_find_key(m->gguf, key) < 0) continue;
        if ((rc = gguf_get_i64(g, key, &a, why, sizeof why)) || (rc = gguf_get_i64(m->gguf, key, &b, why, sizeof why))) break;
        if (a != b) rc = nb_errf(why, sizeof why, NB_EFORMAT, "%s is %lld, the model's is %lld", key, (long long)a, (long long)b);
    }
    if (!rc && !has_block(g, m->hp.n_layer))
        rc = nb_errf(why, sizeof why, NB_ENOENT, "no blk.%d tensors (the MTP block)", m->hp.n_layer);
    if (!rc) rc = check_types(g, why, sizeof why);
    if (rc) return nb_errf(err, errlen, rc, "MTP file %s: %s", path, why);
    return 0;
}

static int load(struct model *m, const char *mtp_path, char *err, size_t errlen)
{
    int rc, n_block;
    if ((rc = read_arch(m->gguf, err, errlen))) return rc;
    if ((rc = check_types(m->gguf, err, errlen))) return rc;
    if ((rc = read_core(m->gguf, &m->hp, &n_block, err, errlen))) return rc;
    if ((rc = read_gdn_moe(m->gguf, &m->hp, err, errlen))) return rc;
    if ((rc = read_vocab(m->gguf, &m->hp, err, errlen))) return rc;
    if (mtp_path) {
        if ((rc = open_mtp(m, mtp_path, err, errlen))) return rc;
        if (!(m->mtp_path = strdup(mtp_path))) return nb_errf(err, errlen, NB_ENOMEM, "MTP path");
        m->hp.n_nextn = 1;
    } else if (m->hp.n_nextn > 0 && !has_block(m->gguf, m->hp.n_layer)) {
        m->hp.n_nextn = 0;
        m->nextn_declared_absent = true;
    }
    n_block = m->hp.n_layer + m->hp.n_nextn;
    m->layers = calloc((size_t)n_block, sizeof *m->layers);
    if (!m->layers) return nb_errf(err, errlen, NB_ENOMEM, "%d layers", n_block);
    if ((rc = read_layer_kinds(m->gguf, m, n_block, err, errlen))) return rc;
    if ((rc = read_indexer(m->gguf, m, err, errlen))) return rc;
    if ((rc = read_ple(m->gguf, m, err, errlen))) return rc;
    return model_bind_tensors(m, err, errlen);
}

int model_open_mtp(const char *path, const char *mtp_path, struct model **out, char *err, size_t errlen)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m) return nb_errf(err, errlen, NB_ENOMEM, "model");
    int rc = gguf_open(path, &m->gguf, err, errlen);
    if (rc == 0) rc = load(m, mtp_path && *mtp_path ? mtp_path : NULL, err, errlen);
    if (rc) {
        model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int model_open(const char *path, struct model **out, char *err, size_t errlen)
{
    return model_open_mtp(path, NULL, out, err, errlen);
}

void model_mtp_describe(const struct model *m, char *buf, size_t len)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->n_nextn == 0)
        snprintf(buf, len, "no MTP block%s: running without speculative decoding (--mtp FILE adds one)",
                 m->nextn_declared_absent ? " (the file declares one but holds none of its tensors)" : "");
    else
        snprintf(buf, len, "MTP block blk.%d from %s%s", hp->n_layer, m->mtp_path ? m->mtp_path : "the model file",
                 m->nextn_uses_trunk_head ? " (its head mixer is the trunk's)" : "");
}

int model_keep_layers(struct model *m, int n, char *err, size_t errlen)
{
    struct model_hparams *hp = &m->hp;
    if (n < 1 || n > hp->n_layer)
        return nb_errf(err, errlen, NB_EINVAL, "the model has %d layers (give 1 to %d), not %d", hp->n_layer, hp->n_layer, n);
    hp->n_layer = n;
    hp->n_nextn = 0;
    if (hp->ple_layer >= n) {
        hp->ple_layer = -1;
        memset(&m->ple_table, 0, sizeof m->ple_table);
    }
    return 0;
}

void model_close(struct model *m)
{
    if (!m) return;
    free(m->layers);
    free(m->mtp_path);
    if (m->mtp_gguf) gguf_close(m->mtp_gguf);
    if (m->gguf) gguf_close(m->gguf);
    free(m);
}
