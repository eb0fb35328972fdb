/* encode.c — text to ids: special-token partition, NFC, pre-split, BPE merges.
 *
 * Partition: as llama.cpp does it, each special token in turn (longest text
 * first) cuts every still-raw fragment at each of its occurrences, so a longer
 * token always wins over a shorter one it contains or overlaps.  The cut is
 * made on the raw text, and each raw fragment is normalized afterwards on its
 * own, which is the order Hugging Face follows for added tokens marked
 * "normalized": false (normalize.c says how).
 *
 * BPE: a word starts as one symbol per byte (the byte's token).  Candidate
 * merges of adjacent symbols sit in a binary heap ordered by (rank, position);
 * the best one is taken, the two symbols fuse (a linked list keeps the order),
 * and the two new neighbour pairs are pushed.  Stale heap entries are skipped
 * when popped by checking that both symbols still hold the ids the entry was
 * made from.  This is O(n log n) per word, so a megabyte without spaces costs
 * no more per byte than prose does. */
#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"

#include <stdlib.h>
#include <string.h>

struct fragment {
    size_t off, len;
    int32_t id; /* a special token, or -1 for raw text */
};

struct heap_entry {
    uint32_t rank;
    int32_t left;            /* symbol index of the left side */
    int32_t left_id, right_id, merged;
};

/* A piece of a word being merged; symbols form a linked list in text order. */
struct symbol {
    int32_t id; /* -1 once absorbed by its left neighbour (or a byte the vocab lacks) */
    int32_t prev, next;
};

/* Per-call scratch; grown as needed, freed at the end of tok_encode. */
struct encoder {
    const tok_tokenizer *t;
    int32_t *out;
    size_t cap, n;
    struct symbol *sym;
    size_t sym_cap;
    struct heap_entry *heap;
    size_t heap_n, heap_cap;
    struct tok_nfc_buf nfc; /* the normalized fragment, when normalization changes it */
};

static void emit(struct encoder *e, int32_t id)
{
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

bool tok_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

/* ---------- heap of merge candidates, smallest (rank, left) on top ---------- */

static bool entry_less(const struct heap_entry *a, const struct heap_entry *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static bool heap_push(struct encoder *e, struct heap_entry x)
{
    if (!tok_grow((void **)&e->heap, &e->heap_cap, e->heap_n + 1, sizeof *e->heap)) return false;
    size_t i = e->heap_n++;
    while (i > 0 && entry_less(&x, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = x;
    return true;
}

static struct heap_entry heap_pop(struct encoder *e)
{
    struct heap_entry top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && entry_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!entry_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* ---------- BPE over one word ---------- */

/* Pushes the merge of symbol left with its right neighbour, if there is one. */
static bool push_pair(struct encoder *e, int32_t left)
{
    if (left < 0) return true;
    int32_t right = e->sym[left].next;
    if (right < 0 || e->sym[left].id < 0 || e->sym[right].id < 0) return true;
    const struct tok_merge_slot *m = tok_lookup_merge(e->t, e->sym[left].id, e->sym[right].id);
    if (!m) return true;
    return heap_push(e, (struct heap_entry){ m->rank, left, e->sym[left].id, e->sym[right].id, m->merged });
}

static bool entry_is_current(const struct encoder *e, const struct heap_entry *x)
{
    int32_t right = e->sym[x->left].next;
    return right >= 0 && e->sym[x->left].id == x->left_id && e->sym[right].id == x->right_id;
}

static int bpe_word(struct encoder *e, const uint8_t *w, size_t n)
{
    if (n == 1) {
        if (e->t->byte_id[w[0]] >= 0) emit(e, e->t->byte_id[w[0]]);
        return 0;
    }
    if (n > INT32_MAX || !tok_grow((void **)&e->sym, &e->sym_cap, n, sizeof *e->sym)) return NB_ENOMEM;
    for (size_t i = 0; i < n; i++)
        e->sym[i] = (struct symbol){ e->t->byte_id[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1 };
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!push_pair(e, (int32_t)i)) return NB_ENOMEM;
    while (e->heap_n) {
        struct heap_entry x = heap_pop(e);
        if (!entry_is_current(e, &x)) continue;
        int32_t left = x.left, right = e->sym[left].next, after = e->sym[right].next;
        e->sym[left].id = x.merged;
        e->sym[right].id = -1;
        e->sym[left].next = after;
        if (after >= 0) e->sym[after].prev = left;
        if (!push_pair(e, e->sym[left].prev) || !push_pair(e, left)) return NB_ENOMEM;
    }
    for (int32_t i = 0; i >= 0; i = e->sym[i].next) /* symbol 0 is never absorbed */
        if (e->sym[i].id >= 0) emit(e, e->sym[i].id);
    return 0;
}

static int encode_raw(struct encoder *e, const uint8_t *s, size_t len)
{
    for (size_t pos = 0; pos < len;) {
        size_t n = tok_pretok_word(e->t->pre, s, len, pos);
        int rc = bpe_word(e, s + pos, n);
        if (rc) return rc;
        pos += n;
    }
    return 0;
}

/* A raw fragment as the split sees it: s itself, or its NFC in e->nfc. */
static int normalize_fragment(struct encoder *e, const uint8_t **s, size_t *len)
{
    if (!e->t->nfc || tok_nfc_is_inert(*s, *len)) return 0;
    e->nfc.len = 0;
    int rc = tok_nfc_append(&e->nfc, *s, *len);
    if (rc) return rc;
    *s = e->nfc.bytes;
    *len = e->nfc.len;
    return 0;
}

static int encode_fragment(struct encoder *e, const uint8_t *s, size_t len)
{
    int rc = normalize_fragment(e, &s, &len);
    return rc ? rc : encode_raw(e, s, len);
}

/* The message for a failed encode or normalize of len bytes. */
static int encode_error(int rc, size_t len, char *err, size_t errlen)
{
    if (rc == NB_ENOMEM) return nb_errf(err, errlen, rc, "out of memory encoding %zu bytes", len);
    return nb_errf(err, errlen, rc, "libutf8proc refused to normalize valid UTF-8 in %zu bytes of text", len);
}

/* ---------- special-token partition ---------- */

struct fragments {
    struct fragment *v;
    size_t n, cap;
};

static bool frag_add(struct fragments *f, size_t off, size_t len, int32_t id)
{
    if (!tok_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v)) return false;
    f->v[f->n++] = (struct fragment){ off, len, id };
    return true;
}

/* Cuts every raw fragment of *cur at each occurrence of token id (text of
 * tlen bytes); the result goes to *next, which is then swapped with *cur. */
static bool cut_token(const char *text, struct fragments *cur, struct fragments *next, int32_t id, const char *tt,
                      size_t tlen)
{
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        struct fragment f = cur->v[i];
        if (f.id >= 0 || f.len < tlen) {
            if (!frag_add(next, f.off, f.len, f.id)) return false;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        const char *hit;
        while (pos < end && (hit = memmem(text + pos, end - pos, tt, tlen))) {
            size_t at = (size_t)(hit - text);
            if ((at > pos && !frag_add(next, pos, at - pos, -1)) || !frag_add(next, at, tlen, id)) return false;
            pos = at + tlen;
        }
        if (pos < end && !frag_add(next, pos, end - pos, -1)) return false;
    }
    struct fragments tmp = *cur;
    *cur = *next;
    *next = tmp;
    return true;
}

static bool partition(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, struct fragments *cur)
{
    struct fragments next = { 0 };
    bool ok = len == 0 || frag_add(cur, 0, len, -1);
    for (uint32_t k = 0; ok && k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && t->types[id] != TOK_TYPE_USER_DEFINED) continue;
        const char *tt = t->text_arena + t->text_off[id];
        ok = cut_token(text, cur, &next, id, tt, strlen(tt));
    }
    free(next.v);
    return ok;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t *ids, size_t cap,
               size_t *n_ids, char *err, size_t errlen)
{
    *n_ids = 0;
    if (!t || (!text && len) || (!ids && cap)) return nb_errf(err, errlen, NB_EINVAL, "tok_encode: bad arguments");
    struct encoder e = { .t = t, .out = ids, .cap = cap };
    struct fragments frags = { 0 };
    int rc = partition(t, text, len, parse_special, &frags) ? 0 : NB_ENOMEM;
    for (size_t i = 0; i < frags.n && !rc; i++) {
        if (frags.v[i].id >= 0) emit(&e, frags.v[i].id);
        else rc = encode_fragment(&e, (const uint8_t *)text + frags.v[i].off, frags.v[i].len);
    }
    free(frags.v);
    free(e.sym);
    free(e.heap);
    tok_nfc_buf_free(&e.nfc);
    if (rc) return encode_error(rc, len, err, errlen);
    *n_ids = e.n;
    return 0;
}

int tok_normalize(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, char **out,
                  size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    if (!t || (!text && len)) return nb_errf(err, errlen, NB_EINVAL, "tok_normalize: bad arguments");
    struct encoder e = { .t = t };
    struct tok_nfc_buf b = { 0 };
    struct fragments frags = { 0 };
    int rc = partition(t, text, len, parse_special, &frags) ? 0 : NB_ENOMEM;
    for (size_t i = 0; i < frags.n && !rc; i++) {
        const uint8_t *s = (const uint8_t *)text + frags.v[i].off;
        size_t n = frags.v[i].len;
        if (frags.v[i].id < 0) rc = normalize_fragment(&e, &s, &n);
        if (!rc && !tok_nfc_copy(&b, s, n)) rc = NB_ENOMEM;
    }
    if (!rc && !tok_nfc_copy(&b, "", 1)) rc = NB_ENOMEM; /* the NUL, not counted */
    free(frags.v);
    tok_nfc_buf_free(&e.nfc);
    if (rc) {
        tok_nfc_buf_free(&b);
        return encode_error(rc, len, err, errlen);
    }
    *out = (char *)b.bytes;
    *out_len = b.len - 1;
    return 0;
}

int tok_encode_alloc(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                     size_t *n_ids, char *err, size_t errlen)
{
    size_t cap = len + 16; /* most texts; NFC may lengthen one, then the second pass */
    int32_t *v = malloc(cap * sizeof *v);
    int rc = v ? tok_encode(t, text, len, parse_special, v, cap, n_ids, err, errlen) : NB_ENOMEM;
    if (!rc && *n_ids > cap) {
        int32_t *more = realloc(v, *n_ids * sizeof *more);
        if (more) v = more;
        rc = more ? tok_encode(t, text, len, parse_special, v, *n_ids, n_ids, err, errlen) : NB_ENOMEM;
    }
    if (rc == NB_ENOMEM) nb_errf(err, errlen, rc, "out of memory");
    if (rc) {
        free(v);
        v = NULL;
        *n_ids = 0;
    }
    *ids = v;
    return rc;
}
