/* hf_vocab.c — a Hugging Face tokenizer folder turned into the GGUF
 * tokenizer metadata, the way llama.cpp's converter writes it for gpt2-type
 * (byte-level BPE) vocabularies, so a GGUF we convert tokenizes exactly like
 * one llama.cpp converted.
 *
 * The rules reproduced (convert_hf_to_gguf.py get_vocab_base, gguf-py
 * SpecialVocab):
 *   - tokens ordered by id over model.vocab and added_tokens; the count is
 *     config.json's vocab_size when given, ids without a token become
 *     "[PAD{id}]" of type unused;
 *   - an added token is control when it is marked special or is spelled like
 *     one (<|...|>, <｜...｜>, <unused...>, <pad>, <mask>, <2mass>, [@BOS@]),
 *     else user-defined (with U+2581 turned into a space); the rest normal;
 *   - merges as "left right"; in the pair form a space inside a part is
 *     written as U+0120;
 *   - special ids from tokenizer_config.json's *_token strings (the id of the
 *     first added token with that content; bos falls back to cls, eos to sep),
 *     then config.json's *_token_id for those still unset; add_*_token flags;
 *   - chat_template from tokenizer_config.json, else chat_template.jinja,
 *     else chat_template.json.
 * Added by us (llama.cpp has no such key): tokenizer.ggml.normalizer, "nfc"
 * or "none" from tokenizer.json's normalizer; any other normalizer is
 * refused, since ignoring it would change the ids.
 * Not reproduced: re-encoding non-normalized added tokens through
 * transformers (an identity for the Qwen vocabularies), and guessing the
 * add_*_token flags from a TemplateProcessing post-processor. */
#include <cJSON.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"
#include "core/util/mapfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const special_names[TOK_SP_COUNT] = { "bos", "eos", "unk", "sep", "pad", "cls", "mask" };

/* Largest vocabulary accepted, 16 times the largest published one (Gemma's
 * 262,144): ids are array indices, so without a bound a 30-byte file saying
 * {"a": 2147483647} would make us allocate 16 GiB. */
#define HF_MAX_TOKENS (1u << 22)

/* ---------- small helpers ---------- */

/* dir/name, whole and NUL-terminated; NB_ENOENT when it does not exist. */
static int read_text_file(const char *dir, const char *name, char **out, size_t *len, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return nb_read_file(path, out, len, err, errlen);
}

/* The JSON value that fills text[0..len) (no NUL needed), or NULL.  Like
 * serde_json, which reads these files for Hugging Face, anything but
 * whitespace after the value is an error (cJSON would ignore it). */
static cJSON *parse_whole(const char *text, size_t len)
{
    const char *end = NULL;
    cJSON *json = text && len ? cJSON_ParseWithLengthOpts(text, len, &end, false) : NULL;
    if (!json) return NULL;
    for (const char *p = end; p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(json);
            return NULL;
        }
    }
    return json;
}

/* Parses dir/name; *json is NULL (and 0 returned) when the file is absent and
 * not required. */
static int read_json(const char *dir, const char *name, bool required, cJSON **json, char *err, size_t errlen)
{
    char *text;
    size_t len;
    *json = NULL;
    int rc = read_text_file(dir, name, &text, &len, err, errlen);
    if (rc == NB_ENOENT && !required) return 0;
    if (rc) return rc;
    *json = parse_whole(text, len);
    free(text);
    if (!*json) return nb_errf(err, errlen, NB_EFORMAT, "%s/%s is not valid JSON", dir, name);
    return 0;
}

/* s with every occurrence of `from` replaced by `to` (malloc'ed). */
static char *replace_all(const char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), count = 0;
    for (const char *p = s; (p = strstr(p, from)); p += nf) count++;
    char *out = malloc(strlen(s) + count * (nt > nf ? nt - nf : 0) + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = s, *hit; ; p = hit + nf) {
        hit = strstr(p, from);
        size_t keep = hit ? (size_t)(hit - p) : strlen(p);
        memcpy(o, p, keep), o += keep;
        if (!hit) break;
        memcpy(o, to, nt), o += nt;
    }
    *o = '\0';
    return out;
}

static bool starts_ends(const char *s, const char *pre, const char *suf)
{
    size_t n = strlen(s), np = strlen(pre), ns = strlen(suf);
    return n >= np + ns && !strncmp(s, pre, np) && !strcmp(s + n - ns, suf);
}

/* convert_hf_to_gguf.py does_token_look_special */
static bool looks_special(const char *s)
{
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]") ||
           starts_ends(s, "<|", "|>") || starts_ends(s, "<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || starts_ends(s, "<unused", ">");
}

/* An integer JSON value in [0, INT32_MAX], or -1. */
static int32_t json_id(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX || v->valuedouble != (double)(int32_t)v->valuedouble)
        return -1;
    return (int32_t)v->valuedouble;
}

/* ---------- tokens and types ---------- */

struct hf_src {
    const char *dir;
    cJSON *tok, *tcfg, *cfg; /* tokenizer.json, tokenizer_config.json, config.json (last two may be NULL) */
    const cJSON *vocab, *added, *merges;
};

static int check_model(struct hf_src *s, char *err, size_t errlen)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(s->tok, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *fallback = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    if (!cJSON_IsObject(model)) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json has no model");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE"))
        return nb_errf(err, errlen, NB_ENOTSUP, "tokenizer model type \"%s\" is not BPE", type->valuestring);
    if (cJSON_IsTrue(fallback))
        return nb_errf(err, errlen, NB_ENOTSUP, "BPE with byte_fallback is a llama-type (SentencePiece) vocabulary, not gpt2");
    s->vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    s->merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    s->added = cJSON_GetObjectItemCaseSensitive(s->tok, "added_tokens");
    if (!cJSON_IsObject(s->vocab)) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json: model.vocab is not an object");
    return 0;
}

/* config.json's vocab_size (or text_config's), else the largest id + 1. */
static int vocab_size(const struct hf_src *s, int32_t max_id, uint32_t *n, char *err, size_t errlen)
{
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(s->cfg, "vocab_size");
    if (!vs) vs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->cfg, "text_config"), "vocab_size");
    int64_t size = vs ? json_id(vs) : (int64_t)max_id + 1;
    if (size <= 0) return nb_errf(err, errlen, NB_EFORMAT, vs ? "config.json: bad vocab_size" : "tokenizer.json has no tokens");
    if (max_id >= size)
        return nb_errf(err, errlen, NB_EFORMAT, "token id %d is not below config.json's vocab_size %lld", max_id,
                       (long long)size);
    if (size > HF_MAX_TOKENS)
        return nb_errf(err, errlen, NB_EFORMAT, "a vocabulary of %lld tokens is more than the %u accepted", (long long)size,
                       HF_MAX_TOKENS);
    *n = (uint32_t)size;
    return 0;
}

/* Puts text at id (a later entry for the same id replaces an earlier one). */
static int set_token(struct tok_hf_vocab *v, int32_t id, const char *text, char *err, size_t errlen)
{
    char *p = strdup(text);
    if (!p) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for the vocabulary");
    free(v->tokens[id]);
    v->tokens[id] = p;
    return 0;
}

static int32_t max_token_id(const struct hf_src *s)
{
    int32_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, s->vocab) if (json_id(e) > max_id) max_id = json_id(e);
    cJSON_ArrayForEach(e, s->added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        if (id > max_id) max_id = id;
    }
    return max_id;
}

/* Added tokens over the vocabulary; types[] gets CONTROL / USER_DEFINED for them. */
static int place_added(const struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, s->added) {
        int32_t id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (id < 0 || !cJSON_IsString(content))
            return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json: an added token lacks an id or content");
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        int rc = set_token(v, id, content->valuestring, err, errlen);
        if (rc) return rc;
        if (special || looks_special(content->valuestring)) {
            v->types[id] = TOK_TYPE_CONTROL;
            continue;
        }
        char *text = replace_all(v->tokens[id], "\xE2\x96\x81", " "); /* user-defined spaces pre-normalized */
        if (!text) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for the vocabulary");
        free(v->tokens[id]);
        v->tokens[id] = text;
        v->types[id] = TOK_TYPE_USER_DEFINED;
    }
    return 0;
}

static int collect_tokens(const struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    int rc = vocab_size(s, max_token_id(s), &v->n_tokens, err, errlen);
    if (rc) return rc;
    v->tokens = calloc(v->n_tokens, sizeof *v->tokens);
    v->types = calloc(v->n_tokens, sizeof *v->types);
    if (!v->tokens || !v->types) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %u tokens", v->n_tokens);
    const cJSON *e;
    cJSON_ArrayForEach(e, s->vocab) {
        int32_t id = json_id(e);
        if (id < 0) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json: token \"%s\" has a bad id", e->string);
        if ((rc = set_token(v, id, e->string, err, errlen))) return rc;
        v->types[id] = TOK_TYPE_NORMAL;
    }
    if ((rc = place_added(s, v, err, errlen))) return rc;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (v->tokens[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        if ((rc = set_token(v, (int32_t)i, pad, err, errlen))) return rc;
        v->types[i] = TOK_TYPE_UNUSED;
    }
    return 0;
}

/* ---------- normalizer ---------- */

/* tokenizer.json's normalizer as tok_desc names it: "none", "nfc", or NULL
 * for one we do not run.  Absent and null mean none; a Sequence is NFC if
 * any member is and every member is NFC or none (NFC twice is NFC). */
static const char *normalizer_kind(const cJSON *n)
{
    if (!n || cJSON_IsNull(n)) return "none";
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (!cJSON_IsString(type)) return NULL;
    if (!strcmp(type->valuestring, "NFC")) return "nfc";
    const cJSON *members = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    if (strcmp(type->valuestring, "Sequence") || !cJSON_IsArray(members)) return NULL;
    const char *kind = "none";
    const cJSON *e;
    cJSON_ArrayForEach(e, members) { /* depth is bounded by cJSON's nesting limit */
        const char *k = normalizer_kind(e);
        if (!k) return NULL;
        if (!strcmp(k, "nfc")) kind = "nfc";
    }
    return kind;
}

static int read_normalizer(const struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(s->tok, "normalizer");
    v->normalizer = normalizer_kind(n);
    if (v->normalizer) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    return nb_errf(err, errlen, NB_ENOTSUP, "tokenizer.json: normalizer \"%s\" is not supported (only NFC, or none)",
                   cJSON_IsString(type) ? type->valuestring : "(without a type)");
}

/* ---------- merges ---------- */

/* ["a", "b"] -> "a b", with spaces inside a part written as U+0120. */
static char *join_pair(const cJSON *pair)
{
    const cJSON *a = cJSON_GetArrayItem(pair, 0), *b = cJSON_GetArrayItem(pair, 1);
    if (cJSON_GetArraySize(pair) != 2 || !cJSON_IsString(a) || !cJSON_IsString(b)) return NULL;
    char *ea = replace_all(a->valuestring, " ", "\xC4\xA0"), *eb = replace_all(b->valuestring, " ", "\xC4\xA0");
    char *out = ea && eb ? malloc(strlen(ea) + strlen(eb) + 2) : NULL;
    if (out) sprintf(out, "%s %s", ea, eb);
    free(ea);
    free(eb);
    return out;
}

static int collect_merges(const struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    if (!s->merges) return 0;
    if (!cJSON_IsArray(s->merges)) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json: model.merges is not an array");
    int n = cJSON_GetArraySize(s->merges);
    v->merges = calloc(n ? (size_t)n : 1, sizeof *v->merges);
    if (!v->merges) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %d merges", n);
    const cJSON *e;
    cJSON_ArrayForEach(e, s->merges) {
        char *m = cJSON_IsString(e) ? strdup(e->valuestring) : cJSON_IsArray(e) ? join_pair(e) : NULL;
        if (!m) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json: merge %u is neither \"a b\" nor [\"a\", \"b\"]",
                               v->n_merges);
        v->merges[v->n_merges++] = m;
    }
    return 0;
}

/* ---------- special tokens ---------- */

/* A *_token entry: a string, or an object with a content string. */
static const char *token_content(const cJSON *entry)
{
    if (cJSON_IsString(entry)) return entry->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(entry, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int32_t added_id_of(const cJSON *added, const char *content)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, content))
            return json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
    }
    return -1;
}

static void specials_from_tokenizer_config(const struct hf_src *s, struct tok_hf_vocab *v)
{
    const char *content[TOK_SP_COUNT];
    char key[32];
    for (int k = 0; k < TOK_SP_COUNT; k++) {
        snprintf(key, sizeof key, "%s_token", special_names[k]);
        content[k] = token_content(cJSON_GetObjectItemCaseSensitive(s->tcfg, key));
        snprintf(key, sizeof key, "add_%s_token", special_names[k]);
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(s->tcfg, key);
        if (cJSON_IsBool(add)) v->add_special[k] = cJSON_IsTrue(add);
    }
    if (!content[TOK_SP_BOS] || !*content[TOK_SP_BOS]) content[TOK_SP_BOS] = content[TOK_SP_CLS];
    if (!content[TOK_SP_EOS] || !*content[TOK_SP_EOS]) content[TOK_SP_EOS] = content[TOK_SP_SEP];
    for (int k = 0; k < TOK_SP_COUNT; k++)
        if (content[k] && v->special_ids[k] < 0) v->special_ids[k] = added_id_of(s->added, content[k]);
}

static void specials_from_config(const struct hf_src *s, struct tok_hf_vocab *v)
{
    const cJSON *text_config = cJSON_GetObjectItemCaseSensitive(s->cfg, "text_config");
    char key[32];
    for (int k = 0; k < TOK_SP_COUNT; k++) {
        snprintf(key, sizeof key, "%s_token_id", special_names[k]);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(s->cfg, key);
        if (!id) id = cJSON_GetObjectItemCaseSensitive(text_config, key);
        if (v->special_ids[k] < 0 && id) v->special_ids[k] = json_id(id);
    }
}

/* ---------- chat template ---------- */

/* One {name, template} of a template list; "default" is the main template. */
static int add_named_template(struct tok_hf_vocab *v, const cJSON *choice, char *err, size_t errlen)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(choice, "template");
    if (!cJSON_IsString(name) || !*name->valuestring || !cJSON_IsString(tmpl)) return 0;
    char *n = strdup(name->valuestring), *t = strdup(tmpl->valuestring);
    char **names = realloc(v->template_names, (v->n_named_templates + 1) * sizeof *names);
    if (names) v->template_names = names;
    char **tmpls = names ? realloc(v->templates, (v->n_named_templates + 1) * sizeof *tmpls) : NULL;
    if (tmpls) v->templates = tmpls;
    if (!n || !t || !names || !tmpls) {
        free(n);
        free(t);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for chat templates");
    }
    for (char *c = n; *c; c++) /* as the GGUF writer does: only [A-Za-z0-9] survive in a name */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
    if (!strcmp(n, "default")) {
        free(n);
        free(v->chat_template);
        v->chat_template = t;
        return 0;
    }
    v->template_names[v->n_named_templates] = n;
    v->templates[v->n_named_templates++] = t;
    return 0;
}

static int set_template(struct tok_hf_vocab *v, const cJSON *ct, char *err, size_t errlen)
{
    if (cJSON_IsString(ct)) {
        v->chat_template = strdup(ct->valuestring);
        return v->chat_template ? 0 : nb_errf(err, errlen, NB_ENOMEM, "out of memory for the chat template");
    }
    if (!cJSON_IsArray(ct)) return 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ct) {
        int rc = add_named_template(v, e, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

/* Like SpecialVocab: only looked for when tokenizer_config.json exists. */
static int read_chat_template(const struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(s->tcfg, "chat_template");
    if (ct) return set_template(v, ct, err, errlen);
    char *jinja;
    int rc = read_text_file(s->dir, "chat_template.jinja", &jinja, NULL, err, errlen);
    if (!rc) {
        v->chat_template = jinja;
        return 0;
    }
    if (rc != NB_ENOENT) return rc;
    cJSON *json;
    if ((rc = read_json(s->dir, "chat_template.json", false, &json, err, errlen))) return rc;
    rc = set_template(v, cJSON_GetObjectItemCaseSensitive(json, "chat_template"), err, errlen);
    cJSON_Delete(json);
    return rc;
}

/* ---------- public ---------- */

void tok_hf_vocab_free(struct tok_hf_vocab *v)
{
    for (uint32_t i = 0; v->tokens && i < v->n_tokens; i++) free(v->tokens[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    for (uint32_t i = 0; i < v->n_named_templates; i++) free(v->template_names[i]), free(v->templates[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    free(v->template_names);
    free(v->templates);
    memset(v, 0, sizeof *v);
}

static void vocab_init(struct tok_hf_vocab *v)
{
    memset(v, 0, sizeof *v);
    memset(v->special_ids, 0xFF, sizeof v->special_ids);
    memset(v->add_special, 0xFF, sizeof v->add_special);
}

/* What tokenizer.json alone says: tokens, types, merges, normalizer. */
static int from_tokenizer_json(struct hf_src *s, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    int rc = check_model(s, err, errlen);
    if (!rc) rc = read_normalizer(s, v, err, errlen);
    if (!rc) rc = collect_tokens(s, v, err, errlen);
    if (!rc) rc = collect_merges(s, v, err, errlen);
    return rc;
}

int tok_hf_vocab_read(const char *dir, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    vocab_init(v);
    struct hf_src s = { .dir = dir };
    int rc = read_json(dir, "tokenizer.json", true, &s.tok, err, errlen);
    if (!rc) rc = read_json(dir, "tokenizer_config.json", false, &s.tcfg, err, errlen);
    if (!rc) rc = read_json(dir, "config.json", false, &s.cfg, err, errlen);
    if (!rc) rc = from_tokenizer_json(&s, v, err, errlen);
    if (!rc && s.tcfg) {
        specials_from_tokenizer_config(&s, v);
        rc = read_chat_template(&s, v, err, errlen);
    }
    if (!rc) specials_from_config(&s, v);
    cJSON_Delete(s.tok);
    cJSON_Delete(s.tcfg);
    cJSON_Delete(s.cfg);
    if (rc) tok_hf_vocab_free(v);
    return rc;
}

int tok_hf_vocab_parse(const char *json, size_t len, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    vocab_init(v);
    struct hf_src s = { 0 }; /* no folder: nothing else is read */
    s.tok = parse_whole(json, len);
    if (!s.tok) return nb_errf(err, errlen, NB_EFORMAT, "tokenizer.json is not valid JSON");
    int rc = from_tokenizer_json(&s, v, err, errlen);
    cJSON_Delete(s.tok);
    if (rc) tok_hf_vocab_free(v);
    return rc;
}

static int write_specials(gguf_writer *w, const struct tok_hf_vocab *v)
{
    static const char *const id_keys[TOK_SP_COUNT] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.seperator_token_id", /* sic: llama.cpp's key */
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id", "tokenizer.ggml.mask_token_id",
    };
    static const char *const add_keys[TOK_SP_COUNT] = {
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", NULL, "tokenizer.ggml.add_sep_token",
    };
    int rc = 0;
    for (int k = 0; k < TOK_SP_COUNT && !rc; k++)
        if (v->special_ids[k] >= 0) rc = gguf_w_set_u32(w, id_keys[k], (uint32_t)v->special_ids[k]);
    for (int k = 0; k < TOK_SP_COUNT && !rc; k++)
        if (v->add_special[k] >= 0 && add_keys[k]) rc = gguf_w_set_bool(w, add_keys[k], v->add_special[k] == 1);
    return rc;
}

static int write_templates(gguf_writer *w, const struct tok_hf_vocab *v)
{
    char key[256];
    int rc = 0;
    for (uint32_t i = 0; i < v->n_named_templates && !rc; i++) {
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", v->template_names[i]);
        rc = gguf_w_set_str(w, key, v->templates[i]);
    }
    if (!rc && v->n_named_templates)
        rc = gguf_w_set_arr_str(w, "tokenizer.chat_templates", (const char *const *)v->template_names,
                                v->n_named_templates);
    if (!rc && v->chat_template) rc = gguf_w_set_str(w, "tokenizer.chat_template", v->chat_template);
    return rc;
}

int tok_hf_write_gguf_keys(gguf_writer *w, const char *dir, const char *pre_name, char *err, size_t errlen)
{
    if (!tok_pre_is_supported(pre_name))
        return nb_errf(err, errlen, NB_ENOTSUP, "unknown pre-tokenizer \"%s\" (supported: %s)",
                       pre_name ? pre_name : "(none)", tok_supported_pre());
    struct tok_hf_vocab v;
    int rc = tok_hf_vocab_read(dir, &v, err, errlen);
    if (rc) return rc;
    rc = gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (!rc) rc = gguf_w_set_str(w, "tokenizer.ggml.pre", pre_name);
    if (!rc) rc = gguf_w_set_str(w, "tokenizer.ggml.normalizer", v.normalizer);
    if (!rc) rc = gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, v.n_tokens);
    if (!rc) rc = gguf_w_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v.types, v.n_tokens);
    if (!rc && v.n_merges)
        rc = gguf_w_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, v.n_merges);
    if (!rc) rc = write_specials(w, &v);
    if (!rc) rc = write_templates(w, &v);
    tok_hf_vocab_free(&v);
    if (rc) return nb_errf(err, errlen, rc, "writing tokenizer keys: %s", gguf_writer_error(w));
    return 0;
}
