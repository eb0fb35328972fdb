/* load.c — the two ways into tok_load_desc from files: a GGUF's
 * tokenizer.ggml.* keys, and a Hugging Face tokenizer folder (through the
 * same arrays the GGUF converter writes, so both paths tokenize alike).
 *
 * Strings are borrowed, not copied: the GGUF reader indexes its string arrays
 * once, and tok_load_desc makes the tokenizer's own copy. */
#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"

#include <stdlib.h>

/* An optional u32 id key: -1 when absent. */
static int get_optional_id(const gguf_file *g, const char *key, int32_t *id, char *err, size_t errlen)
{
    *id = -1;
    if (gguf_find_key(g, key) < 0) return 0;
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err, errlen);
    if (rc) return rc;
    if (v > INT32_MAX) return nb_errf(err, errlen, NB_EFORMAT, "%s = %u is out of range", key, v);
    *id = (int32_t)v;
    return 0;
}

/* All elements of a string array key; *strs is malloc'ed (the strings are
 * the reader's). */
static int get_str_array(const gguf_file *g, const char *key, bool required, const char ***strs, uint32_t *n, char *err,
                         size_t errlen)
{
    *strs = NULL;
    *n = 0;
    int64_t k = gguf_find_key(g, key);
    if (k < 0) return required ? nb_errf(err, errlen, NB_ENOENT, "GGUF has no %s", key) : 0;
    if (gguf_kv_type(g, k) != GGUF_VT_ARRAY || gguf_kv_arr_type(g, k) != GGUF_VT_STRING)
        return nb_errf(err, errlen, NB_EFORMAT, "%s is not an array of strings", key);
    uint64_t len = gguf_kv_arr_len(g, k);
    if (len > INT32_MAX) return nb_errf(err, errlen, NB_EFORMAT, "%s has %llu elements", key, (unsigned long long)len);
    *strs = malloc((len ? len : 1) * sizeof **strs);
    if (!*strs) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %s", key);
    for (uint64_t i = 0; i < len; i++) {
        int rc = gguf_get_arr_str(g, key, i, &(*strs)[i], err, errlen);
        if (rc) {
            free(*strs);
            *strs = NULL;
            return rc;
        }
    }
    *n = (uint32_t)len;
    return 0;
}

/* tokenizer.ggml.token_type: int32 per token (any integer type accepted). */
static int get_types(const gguf_file *g, uint32_t n_tokens, int32_t **types, char *err, size_t errlen)
{
    *types = NULL;
    const char *key = "tokenizer.ggml.token_type";
    if (gguf_find_key(g, key) < 0) return 0; /* all normal */
    int32_t *t = malloc((n_tokens ? n_tokens : 1) * sizeof *t);
    if (!t) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %s", key);
    for (uint32_t i = 0; i < n_tokens; i++) {
        int64_t v;
        int rc = gguf_get_arr_i64(g, key, i, &v, err, errlen);
        if (rc) {
            free(t);
            return rc;
        }
        t[i] = v < 0 || v > 255 ? -1 : (int32_t)v;
    }
    *types = t;
    return 0;
}

static int read_header_keys(const gguf_file *g, struct tok_desc *d, char *err, size_t errlen)
{
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &d->model, err, errlen);
    if (!rc) rc = gguf_get_str(g, "tokenizer.ggml.pre", &d->pre, err, errlen);
    if (!rc) rc = get_optional_id(g, "tokenizer.ggml.bos_token_id", &d->bos_id, err, errlen);
    if (!rc) rc = get_optional_id(g, "tokenizer.ggml.eos_token_id", &d->eos_id, err, errlen);
    if (!rc) rc = get_optional_id(g, "tokenizer.ggml.padding_token_id", &d->pad_id, err, errlen);
    if (!rc && gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0)
        rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &d->add_bos, err, errlen);
    /* Our own key (tokenizer.h): absent from llama.cpp's files, where the
     * pre-tokenizer's default applies. */
    if (!rc && gguf_find_key(g, "tokenizer.ggml.normalizer") >= 0)
        rc = gguf_get_str(g, "tokenizer.ggml.normalizer", &d->normalizer, err, errlen);
    return rc;
}

int tok_load_gguf(const gguf_file *g, tok_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    struct tok_desc d = { .bos_id = -1, .eos_id = -1, .pad_id = -1 };
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    int rc = read_header_keys(g, &d, err, errlen);
    if (!rc) rc = get_str_array(g, "tokenizer.ggml.tokens", true, &tokens, &d.n_tokens, err, errlen);
    if (!rc) rc = get_str_array(g, "tokenizer.ggml.merges", false, &merges, &d.n_merges, err, errlen);
    if (!rc) rc = get_types(g, d.n_tokens, &types, err, errlen);
    if (!rc) {
        d.tokens = tokens, d.merges = merges, d.types = types;
        rc = tok_load_desc(&d, out, err, errlen);
    }
    free(tokens);
    free(merges);
    free(types);
    return rc;
}

int tok_load_hf(const char *dir, const char *pre, tok_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    struct tok_hf_vocab v;
    int rc = tok_hf_vocab_read(dir, &v, err, errlen);
    if (rc) return rc;
    struct tok_desc d = {
        .model = "gpt2", .pre = pre,
        .tokens = (const char *const *)v.tokens, .n_tokens = v.n_tokens, .types = v.types,
        .merges = (const char *const *)v.merges, .n_merges = v.n_merges,
        .bos_id = v.special_ids[TOK_SP_BOS], .eos_id = v.special_ids[TOK_SP_EOS], .pad_id = v.special_ids[TOK_SP_PAD],
        .add_bos = v.add_special[TOK_SP_BOS] == 1, .normalizer = v.normalizer,
    };
    rc = tok_load_desc(&d, out, err, errlen);
    tok_hf_vocab_free(&v);
    return rc;
}
