/* tokenizer.c — building a tokenizer from a vocabulary (in-memory arrays, a
 * GGUF's tokenizer.ggml.* keys, or a Hugging Face folder), and the lookups.
 *
 * Everything is built in one linear pass per table, so a 248k-token vocabulary
 * with ~250k merges loads in tens of milliseconds: token texts go into one
 * arena with a hash table (text -> id) beside it; each merge "a b" is turned
 * into the ids of a, b and a+b once, and stored in a second hash table keyed
 * by the id pair.  Decoded byte pieces of all tokens are precomputed so that
 * decoding is a copy. */
#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- hashing ---------- */

static uint32_t hash_bytes(const char *s, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint64_t pair) { return (uint32_t)((pair * 0x9E3779B97F4A7C15ull) >> 32); }

static uint32_t table_mask_for(uint32_t n)
{
    uint32_t size = 16;
    while (size < 2 * (uint64_t)n) size <<= 1; /* load factor <= 1/2 */
    return size - 1;
}

int32_t tok_lookup_text(const tok_tokenizer *t, const char *text, size_t len)
{
    for (uint32_t i = hash_bytes(text, len) & t->text_mask;; i = (i + 1) & t->text_mask) {
        int32_t id = t->text_slots[i];
        if (id < 0) return -1;
        const char *s = t->text_arena + t->text_off[id];
        if (!strncmp(s, text, len) && s[len] == '\0') return id;
    }
}

const struct tok_merge_slot *tok_lookup_merge(const tok_tokenizer *t, int32_t left, int32_t right)
{
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t i = hash_pair(pair) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct tok_merge_slot *m = &t->merge_slots[i];
        if (m->pair == pair) return m;
        if (m->pair == TOK_EMPTY_PAIR) return NULL;
    }
}

/* ---------- building ---------- */

static int build_texts(tok_tokenizer *t, const struct tok_desc *d, char *err, size_t errlen)
{
    size_t total = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        if (!d->tokens[i]) return nb_errf(err, errlen, NB_EINVAL, "token %u has no text", i);
        total += strlen(d->tokens[i]) + 1;
    }
    t->text_arena = malloc(total);
    t->text_off = malloc(d->n_tokens * sizeof *t->text_off);
    t->types = malloc(d->n_tokens);
    t->text_mask = table_mask_for(d->n_tokens);
    t->text_slots = malloc(((size_t)t->text_mask + 1) * sizeof *t->text_slots);
    if (!t->text_arena || !t->text_off || !t->types || !t->text_slots)
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %u tokens", d->n_tokens);
    memset(t->text_slots, 0xFF, ((size_t)t->text_mask + 1) * sizeof *t->text_slots);

    size_t off = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        size_t len = strlen(d->tokens[i]);
        int32_t type = d->types ? d->types[i] : TOK_TYPE_NORMAL;
        if (type < TOK_TYPE_UNDEFINED || type > TOK_TYPE_BYTE)
            return nb_errf(err, errlen, NB_EFORMAT, "token %u (\"%s\") has unknown type %d", i, d->tokens[i], type);
        memcpy(t->text_arena + off, d->tokens[i], len + 1);
        t->text_off[i] = off;
        t->types[i] = (uint8_t)type;
        off += len + 1;
        /* A text that appears twice maps to its last id, as in llama.cpp. */
        uint32_t slot = hash_bytes(d->tokens[i], len) & t->text_mask;
        for (;; slot = (slot + 1) & t->text_mask) {
            int32_t id = t->text_slots[slot];
            if (id < 0 || !strcmp(t->text_arena + t->text_off[id], d->tokens[i])) break;
        }
        t->text_slots[slot] = (int32_t)i;
    }
    return 0;
}

/* The bytes of a normal token: each code point of its text is one byte of
 * the GPT-2 alphabet (a code point outside it is kept as its UTF-8). */
static size_t decode_byte_level(const char *text, char *out)
{
    const uint8_t *s = (const uint8_t *)text;
    size_t len = strlen(text), n = 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t k = tok_utf8_decode(s + i, len - i, &cp);
        int b = cp >= 0 ? tok_cp_to_byte((uint32_t)cp) : -1;
        if (b >= 0) out[n++] = (char)b;
        else memcpy(out + n, s + i, k), n += k;
        i += k;
    }
    return n;
}

static int build_pieces(tok_tokenizer *t, char *err, size_t errlen)
{
    size_t total = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) total += strlen(t->text_arena + t->text_off[i]);
    t->piece_arena = malloc(total + 1);
    t->piece_off = malloc(((size_t)t->n_tokens + 1) * sizeof *t->piece_off);
    if (!t->piece_arena || !t->piece_off) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for token pieces");
    size_t off = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        const char *text = t->text_arena + t->text_off[i];
        t->piece_off[i] = off;
        switch (t->types[i]) {
        case TOK_TYPE_NORMAL:
            off += decode_byte_level(text, t->piece_arena + off);
            break;
        case TOK_TYPE_CONTROL: case TOK_TYPE_USER_DEFINED: case TOK_TYPE_UNKNOWN:
            memcpy(t->piece_arena + off, text, strlen(text));
            off += strlen(text);
            break;
        default: /* unused, byte (not produced by gpt2 vocabs), undefined: no text */
            break;
        }
    }
    t->piece_off[t->n_tokens] = off;
    return 0;
}

/* "a b" -> the ids of a, b and a+b, or an error naming the missing part. */
static int parse_merge(const tok_tokenizer *t, uint32_t rank, const char *merge, int32_t ids[3], char *buf,
                       size_t buflen, char *err, size_t errlen)
{
    size_t len = merge ? strlen(merge) : 0;
    const char *space = len > 1 ? memchr(merge + 1, ' ', len - 1) : NULL;
    if (!space || len >= buflen)
        return nb_errf(err, errlen, NB_EFORMAT, "merge %u (\"%s\") is not \"left right\"", rank, merge ? merge : "");
    size_t left_len = (size_t)(space - merge), right_len = len - left_len - 1;
    memcpy(buf, merge, left_len);
    memcpy(buf + left_len, space + 1, right_len);
    buf[left_len + right_len] = '\0';
    ids[0] = tok_lookup_text(t, merge, left_len);
    ids[1] = tok_lookup_text(t, space + 1, right_len);
    ids[2] = tok_lookup_text(t, buf, left_len + right_len);
    const char *missing = ids[0] < 0 ? "its left part" : ids[1] < 0 ? "its right part" : ids[2] < 0 ? "its result" : NULL;
    if (missing)
        return nb_errf(err, errlen, NB_EFORMAT, "merge %u (\"%s\"): %s is not in the vocabulary", rank, merge, missing);
    return 0;
}

static int build_merges(tok_tokenizer *t, const struct tok_desc *d, char *err, size_t errlen)
{
    t->merge_mask = table_mask_for(d->n_merges);
    t->merge_slots = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merge_slots);
    size_t max_len = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        size_t len = strlen(t->text_arena + t->text_off[i]);
        if (len > max_len) max_len = len;
    }
    char *buf = malloc(2 * max_len + 2);
    if (!t->merge_slots || !buf) {
        free(buf);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for %u merges", d->n_merges);
    }
    for (size_t i = 0; i <= t->merge_mask; i++) t->merge_slots[i].pair = TOK_EMPTY_PAIR;
    int rc = 0;
    for (uint32_t r = 0; r < d->n_merges; r++) {
        int32_t ids[3] = { -1, -1, -1 };
        rc = parse_merge(t, r, d->merges[r], ids, buf, 2 * max_len + 2, err, errlen);
        if (rc) break;
        uint64_t pair = (uint64_t)(uint32_t)ids[0] << 32 | (uint32_t)ids[1];
        uint32_t slot = hash_pair(pair) & t->merge_mask;
        while (t->merge_slots[slot].pair != TOK_EMPTY_PAIR && t->merge_slots[slot].pair != pair)
            slot = (slot + 1) & t->merge_mask;
        if (t->merge_slots[slot].pair == pair) continue; /* a repeated merge keeps its first rank */
        t->merge_slots[slot] = (struct tok_merge_slot){ pair, r, ids[2] };
    }
    free(buf);
    t->n_merges = d->n_merges;
    return rc;
}

struct special_entry {
    size_t len;
    int32_t id;
};

static int by_length_desc(const void *a, const void *b)
{
    const struct special_entry *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Tokens cut out of the raw text before the split, longest first (ties by id,
 * so the order does not depend on the sort). */
static int build_specials(tok_tokenizer *t, char *err, size_t errlen)
{
    struct special_entry *e = malloc(t->n_tokens * sizeof *e);
    t->specials = malloc(t->n_tokens * sizeof *t->specials);
    if (!e || !t->specials) {
        free(e);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for special tokens");
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        uint8_t ty = t->types[i];
        size_t len = strlen(t->text_arena + t->text_off[i]);
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) && len)
            e[n++] = (struct special_entry){ len, (int32_t)i };
    }
    qsort(e, n, sizeof *e, by_length_desc);
    for (uint32_t i = 0; i < n; i++) t->specials[i] = e[i].id;
    t->n_specials = n;
    free(e);
    return 0;
}

static int check_special_id(const struct tok_desc *d, const char *what, int32_t id, char *err, size_t errlen)
{
    if (id < -1 || (id >= 0 && (uint32_t)id >= d->n_tokens))
        return nb_errf(err, errlen, NB_EFORMAT, "%s %d is out of range (vocabulary of %u)", what, id, d->n_tokens);
    return 0;
}

/* "nfc" / "none" as given, or the default: every pre-tokenizer we implement
 * is a Qwen one, and every Qwen tokenizer.json declares NFC (tokenizer.h). */
static int pick_normalizer(const struct tok_desc *d, bool *nfc, char *err, size_t errlen)
{
    if (!d->normalizer || !strcmp(d->normalizer, "nfc")) *nfc = true;
    else if (!strcmp(d->normalizer, "none")) *nfc = false;
    else return nb_errf(err, errlen, NB_ENOTSUP, "unknown normalizer \"%s\" (supported: nfc, none)", d->normalizer);
    return 0;
}

static int check_desc(const struct tok_desc *d, enum tok_pre_kind *pre, char *err, size_t errlen)
{
    if (!d->model || strcmp(d->model, "gpt2"))
        return nb_errf(err, errlen, NB_ENOTSUP, "tokenizer model \"%s\" is not supported (only \"gpt2\", byte-level BPE)",
                       d->model ? d->model : "(none)");
    if (!tok_pre_from_name(d->pre, pre))
        return nb_errf(err, errlen, NB_ENOTSUP, "unknown pre-tokenizer \"%s\" (supported: %s)", d->pre ? d->pre : "(none)",
                       tok_supported_pre());
    if (d->n_tokens == 0 || d->n_tokens > INT32_MAX || !d->tokens)
        return nb_errf(err, errlen, NB_EFORMAT, "vocabulary has %u tokens", d->n_tokens);
    if (d->n_merges && !d->merges) return nb_errf(err, errlen, NB_EINVAL, "%u merges but no merge array", d->n_merges);
    int rc = check_special_id(d, "bos_token_id", d->bos_id, err, errlen);
    if (!rc) rc = check_special_id(d, "eos_token_id", d->eos_id, err, errlen);
    if (!rc) rc = check_special_id(d, "padding_token_id", d->pad_id, err, errlen);
    return rc;
}

static void build_byte_ids(tok_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char utf8[4];
        size_t n = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), utf8);
        t->byte_id[b] = tok_lookup_text(t, utf8, n);
    }
}

int tok_load_desc(const struct tok_desc *d, tok_tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    enum tok_pre_kind pre;
    bool nfc = true;
    int rc = check_desc(d, &pre, err, errlen);
    if (!rc) rc = pick_normalizer(d, &nfc, err, errlen);
    if (rc) return rc;
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    t->pre = pre;
    t->nfc = nfc;
    snprintf(t->pre_name, sizeof t->pre_name, "%s", d->pre);
    t->n_tokens = d->n_tokens;
    rc = build_texts(t, d, err, errlen);
    if (!rc) rc = build_pieces(t, err, errlen);
    if (!rc) rc = build_merges(t, d, err, errlen);
    if (!rc) rc = build_specials(t, err, errlen);
    if (rc) {
        tok_free(t);
        return rc;
    }
    build_byte_ids(t);
    t->bos = d->bos_id, t->eos = d->eos_id, t->pad = d->pad_id, t->add_bos = d->add_bos;
    t->im_start = tok_id_of(t, "<|im_start|>");
    t->im_end = tok_id_of(t, "<|im_end|>");
    *out = t;
    return 0;
}

void tok_free(tok_tokenizer *t)
{
    if (!t) return;
    free(t->text_arena);
    free(t->text_off);
    free(t->types);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->text_slots);
    free(t->merge_slots);
    free(t->specials);
    free(t);
}

/* ---------- lookups ---------- */

uint32_t tok_vocab_size(const tok_tokenizer *t) { return t->n_tokens; }
const char *tok_pre_name(const tok_tokenizer *t) { return t->pre_name; }
const char *tok_normalizer_name(const tok_tokenizer *t) { return t->nfc ? "nfc" : "none"; }

static bool id_ok(const tok_tokenizer *t, int32_t id) { return id >= 0 && (uint32_t)id < t->n_tokens; }

const char *tok_token_text(const tok_tokenizer *t, int32_t id)
{
    return id_ok(t, id) ? t->text_arena + t->text_off[id] : NULL;
}

enum tok_type tok_token_type(const tok_tokenizer *t, int32_t id)
{
    return id_ok(t, id) ? (enum tok_type)t->types[id] : TOK_TYPE_UNDEFINED;
}

const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len)
{
    if (!id_ok(t, id)) {
        *len = 0;
        return NULL;
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece_arena + t->piece_off[id];
}

int32_t tok_id_of(const tok_tokenizer *t, const char *text) { return tok_lookup_text(t, text, strlen(text)); }

int32_t tok_bos_id(const tok_tokenizer *t) { return t->bos; }
int32_t tok_eos_id(const tok_tokenizer *t) { return t->eos; }
int32_t tok_pad_id(const tok_tokenizer *t) { return t->pad; }
int32_t tok_im_start_id(const tok_tokenizer *t) { return t->im_start; }
int32_t tok_im_end_id(const tok_tokenizer *t) { return t->im_end; }
bool tok_add_bos(const tok_tokenizer *t) { return t->add_bos; }
