/* vocab.c — the vocabulary's tokens as one byte trie (gram_internal.h).
 *
 * Built once per tokenizer: the text tokens sorted by their bytes, then laid
 * out in preorder from the sorted list (each token adds the nodes past its
 * longest common prefix with the one before), so a subtree is a contiguous
 * range and skip[i] is where it ends.  The mask walk (matcher.c) visits the
 * nodes in that order and skips a subtree at the first byte the grammar
 * refuses.  Two tries: every token, and those that are not whole characters
 * of a string's body (gram_internal.h); the others also by their count of
 * characters, for the states inside a string, where their fate is their
 * count alone. */
#include "core/grammar/gram_internal.h"

#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/utf8.h"

#include <stdlib.h>
#include <string.h>

struct sort_ctx {
    const char *blob;
    const uint64_t *off;
};

static _Thread_local const struct sort_ctx *sort_by; /* qsort has no context argument */

static int cmp_bytes(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t nx = sort_by->off[x + 1] - sort_by->off[x], ny = sort_by->off[y + 1] - sort_by->off[y];
    int c = memcmp(sort_by->blob + sort_by->off[x], sort_by->blob + sort_by->off[y], nx < ny ? nx : ny);
    if (c) return c;
    if (nx != ny) return nx < ny ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void trie_free(struct gram_trie *t)
{
    free(t->byte), free(t->depth), free(t->skip), free(t->tok_off), free(t->toks), free(t->node_tok);
}

void gram_vocab_free(gram_vocab *v)
{
    if (!v) return;
    trie_free(&v->all), trie_free(&v->impure);
    free(v->text_upto), free(v->blob), free(v->off), free(v->is_text), free(v);
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }
uint32_t gram_vocab_trie_nodes(const gram_vocab *v) { return v->all.n_nodes; }

/* The trie of ids[0..n) (sorted by spelling here), total_bytes their bytes. */
static int build_trie(const gram_vocab *v, int32_t *ids, int32_t n, uint64_t total_bytes, struct gram_trie *t)
{
    struct sort_ctx sc = {v->blob, v->off};
    sort_by = &sc;
    qsort(ids, (size_t)n, sizeof *ids, cmp_bytes);
    sort_by = NULL;
    t->toks = ids;
    /* At most one node a byte (plus the root). */
    t->byte = malloc(total_bytes + 1), t->depth = malloc((total_bytes + 1) * sizeof *t->depth);
    t->skip = malloc((total_bytes + 1) * sizeof *t->skip), t->tok_off = calloc(total_bytes + 2, sizeof *t->tok_off);
    uint32_t *path = malloc(65536 * sizeof *path);
    if (!t->byte || !t->depth || !t->skip || !t->tok_off || !path) return free(path), NB_ENOMEM;
    /* Preorder from the sorted list; path[d] is the node at depth d of the
     * previous token's spelling.  tok_off counts ids per node first. */
    uint32_t nn = 1, depth = 0; /* path[0..depth] is live */
    t->byte[0] = 0, t->depth[0] = 0, path[0] = 0;
    const char *prev = NULL;
    size_t nprev = 0;
    for (int32_t k = 0; k < n; k++) {
        const char *s = v->blob + v->off[ids[k]];
        size_t len = v->off[ids[k] + 1] - v->off[ids[k]], lcp = 0;
        while (prev && lcp < len && lcp < nprev && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) t->skip[path[depth--]] = nn; /* the previous spelling's nodes past the common prefix end here */
        for (size_t d = lcp; d < len; d++) {
            t->byte[nn] = (uint8_t)s[d], t->depth[nn] = (uint16_t)(d + 1);
            path[++depth] = nn++;
        }
        if (len > t->max_depth) t->max_depth = (uint16_t)len;
        t->tok_off[path[depth] + 1]++;
        prev = s, nprev = len;
    }
    while (depth > 0) t->skip[path[depth--]] = nn;
    t->skip[0] = nn;
    free(path);
    t->n_nodes = nn;
    for (uint32_t i = 0; i < nn; i++) t->tok_off[i + 1] += t->tok_off[i];
    /* The ids are in node order (sorted by spelling, duplicates adjacent). */
    if (!(t->node_tok = malloc((size_t)nn * sizeof *t->node_tok))) return NB_ENOMEM;
    for (uint32_t i = 0; i < nn; i++) t->node_tok[i] = t->tok_off[i + 1] > t->tok_off[i] ? ids[t->tok_off[i]] : v->n_vocab;
    return 0;
}

size_t gram_utf8_multi(const unsigned char *s, size_t n) { return s[0] < 0x80 ? 0 : nb_utf8_len(s, n); }

/* The characters of a text token (gram_internal.h), or -1 when it is not one. */
static long text_chars(const char *s, size_t n)
{
    long chars = 0;
    for (size_t i = 0; i < n; chars++) {
        const unsigned char *p = (const unsigned char *)s + i;
        size_t k = gram_plain(*p) ? 1 : gram_utf8_multi(p, n - i);
        if (!k) return -1;
        i += k;
    }
    return chars;
}

int gram_vocab_new(int32_t n_vocab, const char *const *bytes, const size_t *lens, const int32_t *stop_ids, int n_stop,
                   gram_vocab **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_vocab <= 0 || n_stop < 0 || n_stop > 8) return nb_errf(err, errlen, NB_EINVAL, "gram_vocab_new: bad arguments");
    for (int i = 0; i < n_stop; i++)
        if (stop_ids[i] < 0 || stop_ids[i] >= n_vocab) return nb_errf(err, errlen, NB_EINVAL, "stop id %d is outside the vocabulary", stop_ids[i]);
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    v->n_vocab = n_vocab, v->n_stop = n_stop, v->words = ((size_t)n_vocab + 31) / 32;
    memcpy(v->stop, stop_ids, (size_t)n_stop * sizeof *stop_ids);
    uint64_t total = 0;
    int32_t n_text = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        bool stop = false;
        for (int k = 0; k < n_stop; k++) stop |= stop_ids[k] == i;
        if (bytes[i] && lens[i] && lens[i] < 65535 && !stop) total += lens[i], n_text++;
    }
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->is_text = calloc((size_t)n_vocab, 1);
    v->blob = malloc(total ? total : 1);
    int32_t *all = malloc(((size_t)n_text + 1) * sizeof *all), *impure = malloc(((size_t)n_text + 1) * sizeof *impure);
    if (!v->off || !v->is_text || !v->blob || !all || !impure) {
        free(all), free(impure), gram_vocab_free(v);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    uint64_t at = 0, impure_bytes = 0;
    int32_t k = 0, n_impure = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->off[i] = at;
        bool stop = false;
        for (int s = 0; s < n_stop; s++) stop |= stop_ids[s] == i;
        if (!bytes[i] || !lens[i] || lens[i] >= 65535 || stop) continue;
        memcpy(v->blob + at, bytes[i], lens[i]);
        at += lens[i];
        v->is_text[i] = 1, all[k++] = i;
        long chars = text_chars(bytes[i], lens[i]);
        if (chars >= 0) {
            if (chars > v->max_text) v->max_text = (uint16_t)chars;
        } else {
            impure[n_impure++] = i, impure_bytes += lens[i];
        }
    }
    v->off[n_vocab] = at;
    int rc = build_trie(v, all, n_text, total, &v->all);
    if (rc) free(impure);
    else rc = build_trie(v, impure, n_impure, impure_bytes, &v->impure);
    if (!rc && !(v->text_upto = calloc(((size_t)v->max_text + 1) * v->words, sizeof *v->text_upto))) rc = NB_ENOMEM;
    if (rc) {
        gram_vocab_free(v);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n_vocab; i++) { /* each text token in the row of its count, then rows made cumulative */
        long chars = v->is_text[i] ? text_chars(v->blob + v->off[i], v->off[i + 1] - v->off[i]) : -1;
        if (chars >= 0) v->text_upto[(size_t)chars * v->words + (size_t)(i >> 5)] |= 1u << (i & 31);
    }
    for (size_t L = 1; L <= v->max_text; L++)
        for (size_t w = 0; w < v->words; w++) v->text_upto[L * v->words + w] |= v->text_upto[(L - 1) * v->words + w];
    *out = v;
    return 0;
}

int gram_vocab_from_tokenizer(const tok_tokenizer *tok, int32_t n_vocab, const int32_t *stop_ids, int n_stop,
                              gram_vocab **out, char *err, size_t errlen)
{
    *out = NULL;
    const char **bytes = calloc((size_t)n_vocab, sizeof *bytes);
    size_t *lens = calloc((size_t)n_vocab, sizeof *lens);
    if (!bytes || !lens) return free(bytes), free(lens), nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    const int32_t nt = (int32_t)tok_vocab_size(tok);
    for (int32_t i = 0; i < n_vocab && i < nt; i++) {
        enum tok_type ty = tok_token_type(tok, i);
        if (ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_BYTE) bytes[i] = tok_token_bytes(tok, i, &lens[i]);
    }
    int rc = gram_vocab_new(n_vocab, bytes, lens, stop_ids, n_stop, out, err, errlen);
    free(bytes), free(lens);
    return rc;
}
