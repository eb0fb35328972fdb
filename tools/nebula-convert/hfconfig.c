/* hfconfig.c — config.json → struct hf_config (see hfconfig.h).
 *
 * The released checkpoint nests the text model's fields under "text_config"
 * (Qwen4ExpForConditionalGeneration); a text-only checkpoint has them at the
 * top.  Defaults are the ones of transformers' Qwen4ExpTextConfig, so a field
 * absent from the file means what it means to transformers. */
#include "tools/nebula-convert/hfconfig.h"

#include "core/util/err.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_text(const char *path, size_t max_bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max_bytes + 1);
    size_t n = buf ? fread(buf, 1, max_bytes + 1, f) : 0;
    fclose(f);
    if (!buf || n > max_bytes) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* An integer field: absent → def (or an error when def is "required"). */
#define REQUIRED INT64_MIN
static int get_int(const cJSON *o, const char *key, int64_t def, int64_t *out, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (def == REQUIRED) return nb_errf(err, errlen, NB_EFORMAT, "config.json: missing required field \"%s\"", key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: field \"%s\" must be an integer", key);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *o, const char *key, double def, double *out, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v)) return nb_errf(err, errlen, NB_EFORMAT, "config.json: field \"%s\" must be a number", key);
    *out = v->valuedouble;
    return 0;
}

static bool get_bool(const cJSON *o, const char *key, bool def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* Integer or list of integers (eos_token_id may be either). */
static int get_int_list(const cJSON *o, const char *key, int64_t *out, int cap, int *n, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key), *it;
    *n = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v)) {
        out[(*n)++] = (int64_t)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(v)) return nb_errf(err, errlen, NB_EFORMAT, "config.json: \"%s\" must be an integer list", key);
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsNumber(it) || *n >= cap)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: \"%s\" has a bad or extra element", key);
        out[(*n)++] = (int64_t)it->valuedouble;
    }
    return 0;
}

static int64_t pattern_interval(const struct hf_config *c);

static int read_layer_types(const cJSON *t, struct hf_config *c, char *err, size_t errlen)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(t, "layer_types"), *it;
    int64_t interval;
    int rc = get_int(t, "full_attention_interval", 4, &interval, err, errlen);
    if (rc) return rc;
    if (!lt || cJSON_IsNull(lt)) { /* transformers' default pattern: every interval-th layer attends */
        if (interval <= 0) return nb_errf(err, errlen, NB_EFORMAT, "config.json: bad full_attention_interval");
        for (int64_t i = 0; i < c->n_layers; i++) c->is_linear[i] = ((i + 1) % interval) != 0;
    } else {
        int64_t i = 0;
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: layer_types must list %lld layers",
                           (long long)c->n_layers);
        cJSON_ArrayForEach(it, lt)
        {
            if (!cJSON_IsString(it)) return nb_errf(err, errlen, NB_EFORMAT, "config.json: layer_types[%lld]", (long long)i);
            c->is_linear[i++] = strcmp(it->valuestring, "linear_attention") == 0;
        }
    }
    /* GGUF stores a regular pattern as one interval; 0 when irregular. */
    c->full_attention_interval = pattern_interval(c);
    return 0;
}

/* The invariants transformers' Qwen4ExpTextConfig enforces (validate_architecture,
 * 5.17): a configuration it refuses is no model, so the converter refuses it too,
 * naming the rule, rather than writing a file no reference can check. */
static int check_legal(const struct hf_config *c, char *err, size_t errlen)
{
    if (c->hc_count <= 1)
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: hc_count %lld: qwen4_exp requires more than one "
                       "hyper-connection stream", (long long)c->hc_count);
    for (int i = 0; i < c->n_ple; i++)
        if (!c->is_linear[c->ple_layers[i]])
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: ple_layer_ids has layer %lld, a QSA layer: qwen4_exp "
                           "allows PLE on linear_attention (GDN) layers only", (long long)c->ple_layers[i] + 1);
    const int64_t ngram_heads = (c->ngram_size - 1) * c->heads_per_ngram;
    if (c->n_ple && (ngram_heads <= 0 || c->ple_embed_dim % ngram_heads))
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: ple_embed_dim %lld is not a multiple of the %lld n-gram "
                       "heads ((ngram_size - 1) × heads_per_ngram)", (long long)c->ple_embed_dim, (long long)ngram_heads);
    if (c->has_indexer) {
        if (c->idx_kv_heads != 1)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: indexer_kv_heads %lld: qwen4_exp requires 1",
                           (long long)c->idx_kv_heads);
        if (c->idx_ratio <= 0 || c->idx_budget <= 0 || c->idx_budget % c->idx_ratio)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: indexer_budget %lld is not a positive multiple of "
                           "indexer_compress_ratio %lld", (long long)c->idx_budget, (long long)c->idx_ratio);
        if (c->rope_dim > c->idx_head_dim)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: the rotary dims %lld (head_dim × partial_rotary_factor) "
                           "exceed indexer_head_dim %lld", (long long)c->rope_dim, (long long)c->idx_head_dim);
    }
    return 0;
}

static int read_text_fields(const cJSON *t, struct hf_config *c, char *err, size_t errlen)
{
    int rc = 0;
    int64_t ple_ids[HF_MAX_PLE];
#define I(key, def, dst) if (!rc) rc = get_int(t, key, def, dst, err, errlen)
    I("vocab_size", REQUIRED, &c->vocab_size);
    I("hidden_size", REQUIRED, &c->hidden_size);
    I("num_hidden_layers", REQUIRED, &c->n_layers);
    I("num_attention_heads", REQUIRED, &c->n_head);
    I("num_key_value_heads", REQUIRED, &c->n_head_kv);
    I("head_dim", 256, &c->head_dim);
    I("max_position_embeddings", 32768, &c->max_pos);
    I("linear_conv_kernel_dim", 4, &c->lin_conv_kernel);
    I("linear_key_head_dim", 128, &c->lin_k_head_dim);
    I("linear_value_head_dim", 128, &c->lin_v_head_dim);
    I("linear_num_key_heads", 16, &c->lin_n_k_heads);
    I("linear_num_value_heads", 32, &c->lin_n_v_heads);
    I("num_experts", 512, &c->n_experts);
    I("num_experts_per_tok", 10, &c->n_experts_used);
    I("moe_intermediate_size", 512, &c->expert_ff);
    I("shared_expert_intermediate_size", 512, &c->shared_ff);
    I("hc_count", 4, &c->hc_count);
    I("hc_lowrank", 320, &c->hc_lowrank);
    I("ple_embed_dim", c->hidden_size, &c->ple_embed_dim);
    I("ple_conv_kernel_size", 4, &c->ple_conv_kernel);
    I("ngram_size", 3, &c->ngram_size);
    I("heads_per_ngram", 8, &c->heads_per_ngram);
    I("ngram_vocab_size_base", 20000000, &c->ngram_vocab_base);
    I("make_ngram_vocab_size_divisible_by", 128, &c->ngram_divisor);
    I("seed", 1234, &c->ngram_seed);
    I("split_ngram_parts", 512, &c->split_ngram_parts);
    I("indexer_n_heads", 0, &c->idx_heads);
    I("indexer_kv_heads", 0, &c->idx_kv_heads);
    I("indexer_head_dim", 0, &c->idx_head_dim);
    I("indexer_budget", 0, &c->idx_budget);
    I("indexer_compress_ratio", 0, &c->idx_ratio);
    I("mtp_num_hidden_layers", 0, &c->mtp_layers);
    I("bos_token_id", -1, &c->bos);
    I("pad_token_id", -1, &c->pad);
#undef I
    if (rc) return rc;
    if (c->n_layers <= 0 || c->n_layers > HF_MAX_LAYERS)
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: num_hidden_layers %lld out of range [1, %d]",
                       (long long)c->n_layers, HF_MAX_LAYERS);
    if ((rc = get_num(t, "rms_norm_eps", 1e-6, &c->rms_eps, err, errlen))) return rc;
    c->tie_embeddings = get_bool(t, "tie_word_embeddings", false);
    c->norm_topk = get_bool(t, "norm_topk_prob", true);
    c->has_indexer = c->idx_heads > 0;

    const cJSON *gate = cJSON_GetObjectItemCaseSensitive(t, "output_gate_type");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(t, "hidden_act");
    const char *g = cJSON_IsString(gate) ? gate->valuestring : cJSON_IsString(act) ? act->valuestring : "silu";
    if (strcmp(g, "sigmoid") && strcmp(g, "silu"))
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: output_gate_type \"%s\" is not sigmoid or silu", g);
    c->gate_sigmoid = strcmp(g, "sigmoid") == 0;

    /* RoPE: rope_parameters (transformers 5) or the older top-level fields. */
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    const cJSON *ro = cJSON_IsObject(rp) ? rp : t;
    if ((rc = get_num(ro, "rope_theta", 1e7, &c->rope_theta, err, errlen))) return rc;
    if ((rc = get_num(ro, "partial_rotary_factor", 1.0, &c->partial_rotary, err, errlen))) return rc;
    c->rope_dim = (int64_t)((double)c->head_dim * c->partial_rotary);
    if ((rc = get_int_list(ro, "mrope_section", c->mrope_section, 4, &c->n_mrope_section, err, errlen))) return rc;

    if ((rc = read_layer_types(t, c, err, errlen))) return rc;

    int n;
    if ((rc = get_int_list(t, "ple_layer_ids", ple_ids, HF_MAX_PLE, &n, err, errlen))) return rc;
    c->n_ple = n;
    for (int i = 0; i < n; i++) {
        if (ple_ids[i] < 1 || ple_ids[i] > c->n_layers)
            return nb_errf(err, errlen, NB_EFORMAT, "config.json: ple_layer_ids[%d] = %lld is not in [1, %lld]", i,
                           (long long)ple_ids[i], (long long)c->n_layers);
        c->ple_layers[i] = ple_ids[i] - 1; /* 1-based in config.json, 0-based everywhere else */
    }
    if ((rc = get_int_list(t, "eos_token_id", c->eos, 8, &c->n_eos, err, errlen))) return rc;
    c->ple_eos = c->n_eos ? c->eos[0] : -1;
    if (c->n_ple && c->ple_eos < 0)
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: eos_token_id is required when PLE layers are set");
    return check_legal(c, err, errlen);
}

int hf_config_load(const char *dir, struct hf_config *c, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return hf_config_load_file(path, c, err, errlen);
}

/* The interval of a regular GDN/attention pattern, 0 when irregular. */
static int64_t pattern_interval(const struct hf_config *c)
{
    for (int64_t iv = 1; iv <= c->n_layers; iv++) {
        bool ok = true;
        for (int64_t i = 0; i < c->n_layers && ok; i++) ok = c->is_linear[i] == (((i + 1) % iv) != 0);
        if (ok) return iv;
    }
    return 0;
}

int hf_config_truncate(struct hf_config *c, int64_t n, char *err, size_t errlen)
{
    if (n < 1 || n > c->n_layers)
        return nb_errf(err, errlen, NB_EINVAL, "--layers %lld: the config has %lld layers", (long long)n, (long long)c->n_layers);
    c->n_layers = n;
    int k = 0;
    for (int i = 0; i < c->n_ple; i++)
        if (c->ple_layers[i] < n) c->ple_layers[k++] = c->ple_layers[i];
    c->n_ple = k;
    c->full_attention_interval = pattern_interval(c);
    return 0;
}

int hf_config_load_file(const char *path, struct hf_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char *text = read_text(path, 16 << 20);
    if (!text) return nb_errf(err, errlen, NB_EIO, "cannot read %s", path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return nb_errf(err, errlen, NB_EFORMAT, "%s: not a JSON object", path);
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    int rc = 0;
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "qwen4_exp") && strcmp(mt->valuestring, "qwen4_exp_text"))
        rc = nb_errf(err, errlen, NB_ENOTSUP, "%s: model_type \"%s\" is not qwen4_exp", path, mt->valuestring);
    c->conditional_generation = cJSON_IsObject(tc) ||
                                (cJSON_IsString(arch) && strstr(arch->valuestring, "ConditionalGeneration"));
    if (!rc) rc = read_text_fields(cJSON_IsObject(tc) ? tc : root, c, err, errlen);
    if (!rc) rc = get_int(root, "image_token_id", -1, &c->image_token_id, err, errlen);
    if (!rc && c->mtp_layers == 0 && cJSON_IsObject(tc)) /* some exports keep it at the top */
        rc = get_int(root, "mtp_num_hidden_layers", 0, &c->mtp_layers, err, errlen);
    cJSON_Delete(root);
    return rc;
}
