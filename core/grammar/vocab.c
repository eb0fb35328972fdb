/* vocab.c — the vocabulary's tokens as one byte trie (gram_internal.h).
 *
 * Built once per tokenizer: the text tokens sorted by their bytes, then laid
 * out in preorder from the sorted list (each token adds the nodes past its
 * longest common prefix with the one before), so a subtree is a contiguous
 * range and skip[i] is where it ends.  The mask walk (matcher.c) visits the
 * nodes in that order and skips a subtree at the first byte the grammar
 * refuses. */
#include "core/grammar/gram_internal.h"

#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"

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

void gram_vocab_free(gram_vocab *v)
{
    if (!v) return;
    free(v->byte), free(v->depth), free(v->skip), free(v->tok_off), free(v->toks), free(v->node_tok);
    free(v->blob), free(v->off), free(v->is_text), free(v);
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }
uint32_t gram_vocab_trie_nodes(const gram_vocab *v) { return v->n_nodes; }

int gram_vocab_new(int32_t n_vocab, const char *const *bytes, const size_t *lens, const int32_t *stop_ids, int n_stop,
                   gram_vocab **out, char *err, size_t errlen)
{
    *out = NULL;
    if (n_vocab <= 0 || n_stop < 0 || n_stop > 8) return nb_errf(err, errlen, NB_EINVAL, "gram_vocab_new: bad arguments");
    for (int i = 0; i < n_stop; i++)
        if (stop_ids[i] < 0 || stop_ids[i] >= n_vocab) return nb_errf(err, errlen, NB_EINVAL, "stop id %d is outside the vocabulary", stop_ids[i]);
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    v->n_vocab = n_vocab, v->n_stop = n_stop;
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
    v->toks = malloc(((size_t)n_text + 1) * sizeof *v->toks);
    /* At most one node a byte (plus the root). */
    v->byte = malloc(total + 1), v->depth = malloc((total + 1) * sizeof *v->depth);
    v->skip = malloc((total + 1) * sizeof *v->skip), v->tok_off = calloc(total + 2, sizeof *v->tok_off);
    if (!v->off || !v->is_text || !v->blob || !v->toks || !v->byte || !v->depth || !v->skip || !v->tok_off) {
        gram_vocab_free(v);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    uint64_t at = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->off[i] = at;
        bool stop = false;
        for (int s = 0; s < n_stop; s++) stop |= stop_ids[s] == i;
        if (!bytes[i] || !lens[i] || lens[i] >= 65535 || stop) continue;
        memcpy(v->blob + at, bytes[i], lens[i]);
        at += lens[i];
        v->is_text[i] = 1, v->toks[k++] = i;
    }
    v->off[n_vocab] = at;
    struct sort_ctx sc = {v->blob, v->off};
    sort_by = &sc;
    qsort(v->toks, (size_t)n_text, sizeof *v->toks, cmp_bytes);
    sort_by = NULL;
    /* Preorder from the sorted list; path[d] is the node at depth d of the
     * previous token's spelling.  tok_off counts ids per node first. */
    uint32_t *path = malloc(65536 * sizeof *path);
    if (!path) {
        gram_vocab_free(v);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    uint32_t n = 1, depth = 0; /* path[0..depth] is live */
    v->byte[0] = 0, v->depth[0] = 0, path[0] = 0;
    const char *prev = NULL;
    size_t nprev = 0;
    for (int32_t t = 0; t < n_text; t++) {
        const char *s = v->blob + v->off[v->toks[t]];
        size_t len = v->off[v->toks[t] + 1] - v->off[v->toks[t]], lcp = 0;
        while (prev && lcp < len && lcp < nprev && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) v->skip[path[depth--]] = n; /* the previous spelling's nodes past the common prefix end here */
        for (size_t d = lcp; d < len; d++) {
            v->byte[n] = (uint8_t)s[d], v->depth[n] = (uint16_t)(d + 1);
            path[++depth] = n++;
        }
        if (len > v->max_depth) v->max_depth = (uint16_t)len;
        v->tok_off[path[depth] + 1]++;
        prev = s, nprev = len;
    }
    while (depth > 0) v->skip[path[depth--]] = n;
    v->skip[0] = n;
    free(path);
    v->n_nodes = n;
    for (uint32_t i = 0; i < n; i++) v->tok_off[i + 1] += v->tok_off[i];
    if (!(v->node_tok = malloc((size_t)n * sizeof *v->node_tok))) {
        gram_vocab_free(v);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < n; i++) v->node_tok[i] = v->tok_off[i + 1] > v->tok_off[i] ? v->toks[v->tok_off[i]] : n_vocab;
    /* The ids are already in node order (sorted by spelling, duplicates adjacent). */
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
