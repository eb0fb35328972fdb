/* matcher.c — a generation's position in a grammar, as a lazily built DFA.
 *
 * A position is a set of parse stacks (the grammar is ambiguous where a
 * schema says anyOf, where whitespace is optional, where a property may be
 * left out).  A stack frame is (pos, parent): the element to match next and
 * the frame to return to; frames are hash-consed in one arena, so stacks
 * share their tails and a stack is a frame id.  A set of stacks, sorted, is
 * interned too: it is a DFA state, and its transition on a byte is computed
 * once (advance every stack whose top byte set holds the byte, then expand
 * rule references and alternative ends until every stack's top is a byte
 * set — or the accept frame, when a stack emptied) and kept in a 256-entry
 * row.  Right recursion (a string's characters, an array's items) returns to
 * the same frame, so the state inside a string is the same state after every
 * byte: the DFA stays small and the per-state mask cache hits.
 *
 * The mask of a state walks the vocabulary's trie in preorder with one DFA
 * state per depth: a refused byte skips the node's whole subtree.  Where
 * every character leads to the same next state, as in a string's body, the
 * tokens made of whole characters (printable ASCII but '"' and '\\', valid
 * UTF-8 of 2-4 bytes) need no walk: they are allowed up to the count of
 * characters the chain of such states reaches, one precomputed bitmap, and
 * only the other tokens' trie is walked.  "Every character" is checked on
 * one byte of each byte class of the grammar (bytes no byte set tells apart
 * have the same transitions), so the check is exact and small.  Stop ids
 * are allowed in an accepting state only.  The arena and the DFA are bounded;
 * between two tokens, when they have grown past half their bound, they are
 * rebuilt from the current state alone. */
#include "core/grammar/gram_internal.h"

#include "core/util/err.h"
#include "core/util/grow.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define ACCEPT 0u                 /* frame 0: the stack emptied, the value is complete */
#define T_UNKNOWN (-1)
#define T_DEAD (-2)
#define T_FAIL (-3)
#define T_MIXED (-4)              /* text_next: the characters do not all lead to one state */
#define MAX_PATTERNS 4096
#define MAX_STATES (1 << 15)      /* 32 MB of transition rows */
#define MAX_FRAMES (1 << 22)
#define MAX_EXPAND_DEPTH 8192
#define MASK_CACHE_BYTES (64u << 20)

struct frame {
    uint32_t pos, parent;
};

struct dstate {
    uint32_t off, n;  /* its frames: pool[off .. off + n), sorted */
    uint32_t *mask;   /* cached, or NULL */
    int32_t text_next; /* text_next's answer, T_UNKNOWN until asked */
};

struct gram_matcher {
    const gram_grammar *g;
    const gram_vocab *v;
    struct frame *fr;
    int64_t n_fr, cap_fr;
    uint32_t *fr_hash;     /* open addressing, frame id + 1; 0 empty */
    uint64_t fr_hcap;
    uint32_t *pool;
    int64_t n_pool, cap_pool;
    struct dstate *st;
    int64_t n_st, cap_st;
    int32_t *trans;        /* cap_st × 256 */
    uint32_t *st_hash;
    uint64_t st_hcap;
    uint32_t *scratch;     /* frames of the state being made */
    int64_t n_scratch, cap_scratch;
    uint32_t *walk;        /* a state per trie depth */
    uint32_t *scratch_bits; /* mask_words + 1: the walk's bits, with the sink bit n_vocab */
    struct char_pattern {   /* a text character as the grammar sees it: one byte of each byte class in turn */
        uint8_t b[4], len;
    } *pat;
    uint32_t n_pat;         /* 0: too many patterns, the shortcut is off */
    size_t mask_words, cache_bytes;
    int32_t start, cur;
    uint64_t walks;
    bool done, fail;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static bool rehash_frames(gram_matcher *m)
{
    uint64_t cap = m->fr_hcap ? m->fr_hcap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    for (int64_t i = 0; i < m->n_fr; i++) {
        uint64_t k = mix((uint64_t)m->fr[i].pos << 32 | m->fr[i].parent) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = (uint32_t)i + 1;
    }
    free(m->fr_hash);
    m->fr_hash = h, m->fr_hcap = cap;
    return true;
}

/* The frame (pos, parent), made once. */
static uint32_t frame(gram_matcher *m, uint32_t pos, uint32_t parent)
{
    if ((uint64_t)(m->n_fr + 1) * 2 > m->fr_hcap && !rehash_frames(m)) return m->fail = true, ACCEPT;
    uint64_t k = mix((uint64_t)pos << 32 | parent) & (m->fr_hcap - 1);
    for (; m->fr_hash[k]; k = (k + 1) & (m->fr_hcap - 1)) {
        const struct frame *f = &m->fr[m->fr_hash[k] - 1];
        if (f->pos == pos && f->parent == parent) return m->fr_hash[k] - 1;
    }
    if (m->n_fr >= MAX_FRAMES || nb_grow((void **)&m->fr, &m->cap_fr, m->n_fr, sizeof *m->fr, 1024)) return m->fail = true, ACCEPT;
    m->fr[m->n_fr] = (struct frame){pos, parent};
    m->fr_hash[k] = (uint32_t)m->n_fr + 1;
    return (uint32_t)m->n_fr++;
}

static void add(gram_matcher *m, uint32_t id)
{
    if (nb_grow((void **)&m->scratch, &m->cap_scratch, m->n_scratch, sizeof *m->scratch, 64)) m->fail = true;
    else m->scratch[m->n_scratch++] = id;
}

/* Every stack that continues at element pos with parent below, made to have
 * a byte set (or nothing: ACCEPT) on top, into scratch. */
static void expand(gram_matcher *m, uint32_t pos, uint32_t parent, int depth)
{
    if (m->fail) return;
    if (depth > MAX_EXPAND_DEPTH) {
        m->fail = true; /* left recursion, which the compiler never makes */
        return;
    }
    const gram_grammar *g = m->g;
    const struct gram_elem e = g->el[pos];
    if (e.kind == G_SET) return add(m, frame(m, pos, parent));
    if (e.kind == G_END) {
        if (parent == NONE) return add(m, ACCEPT);
        const struct frame f = m->fr[parent];
        return expand(m, f.pos, f.parent, depth + 1);
    }
    /* A reference last in its alternative returns straight to the parent:
     * no frame for an empty continuation, so right recursion does not grow. */
    uint32_t below = g->el[pos + 1].kind == G_END ? parent : frame(m, pos + 1, parent);
    for (uint32_t a = g->rule_alt[e.arg]; a < g->rule_alt[e.arg + 1]; a++) expand(m, g->alt_start[a], below, depth + 1);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t set_hash(const uint32_t *ids, int64_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) h = mix(h ^ ids[i]);
    return h;
}

static bool rehash_states(gram_matcher *m)
{
    uint64_t cap = m->st_hcap ? m->st_hcap * 2 : 256;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return false;
    for (int64_t i = 0; i < m->n_st; i++) {
        uint64_t k = set_hash(m->pool + m->st[i].off, m->st[i].n) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = (uint32_t)i + 1;
    }
    free(m->st_hash);
    m->st_hash = h, m->st_hcap = cap;
    return true;
}

/* scratch as a state: T_DEAD when empty, T_FAIL out of memory or past the bound. */
static int32_t intern(gram_matcher *m)
{
    if (m->fail) return T_FAIL;
    if (!m->n_scratch) return T_DEAD;
    qsort(m->scratch, (size_t)m->n_scratch, sizeof *m->scratch, cmp_u32);
    int64_t n = 1;
    for (int64_t i = 1; i < m->n_scratch; i++)
        if (m->scratch[i] != m->scratch[n - 1]) m->scratch[n++] = m->scratch[i];
    m->n_scratch = n;
    if ((uint64_t)(m->n_st + 1) * 2 > m->st_hcap && !rehash_states(m)) return T_FAIL;
    uint64_t k = set_hash(m->scratch, n) & (m->st_hcap - 1);
    for (; m->st_hash[k]; k = (k + 1) & (m->st_hcap - 1)) {
        const struct dstate *s = &m->st[m->st_hash[k] - 1];
        if (s->n == n && !memcmp(m->pool + s->off, m->scratch, (size_t)n * sizeof *m->scratch)) return (int32_t)m->st_hash[k] - 1;
    }
    if (m->n_st >= MAX_STATES) return T_FAIL;
    int64_t old_cap = m->cap_st;
    if (nb_grow((void **)&m->st, &m->cap_st, m->n_st, sizeof *m->st, 64)) return T_FAIL;
    if (m->cap_st != old_cap) {
        int32_t *t = realloc(m->trans, (size_t)m->cap_st * 256 * sizeof *t);
        if (!t) return m->cap_st = old_cap, T_FAIL; /* st keeps its larger block: harmless */
        m->trans = t;
    }
    while (m->n_pool + n > m->cap_pool)
        if (nb_grow((void **)&m->pool, &m->cap_pool, m->cap_pool, sizeof *m->pool, 1024)) return T_FAIL;
    memcpy(m->pool + m->n_pool, m->scratch, (size_t)n * sizeof *m->pool);
    m->st[m->n_st] = (struct dstate){(uint32_t)m->n_pool, (uint32_t)n, NULL, T_UNKNOWN};
    m->n_pool += n;
    for (int i = 0; i < 256; i++) m->trans[m->n_st * 256 + i] = T_UNKNOWN;
    m->st_hash[k] = (uint32_t)m->n_st + 1;
    return (int32_t)m->n_st++;
}

/* The transition of state s on byte b, computed the first time. */
static int32_t step(gram_matcher *m, int32_t s, unsigned char b)
{
    int32_t t = m->trans[(int64_t)s * 256 + b];
    if (t != T_UNKNOWN) return t;
    m->n_scratch = 0;
    const struct dstate st = m->st[s];
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t id = m->pool[st.off + i];
        if (id == ACCEPT) continue;
        const struct frame f = m->fr[id];
        if (gram_set_has(m->g->sets[m->g->el[f.pos].arg], b)) expand(m, f.pos + 1, f.parent, 0);
    }
    t = intern(m);
    if (t == T_FAIL) return T_FAIL;
    m->trans[(int64_t)s * 256 + b] = t;
    return t;
}

static bool accepting(const gram_matcher *m, int32_t s) { return m->st[s].n && m->pool[m->st[s].off] == ACCEPT; }

static void clear(gram_matcher *m)
{
    for (int64_t i = 0; i < m->n_st; i++) free(m->st[i].mask);
    m->n_fr = 1, m->n_st = 0, m->n_pool = 0, m->cache_bytes = 0;
    memset(m->fr_hash, 0, m->fr_hcap * sizeof *m->fr_hash);
    memset(m->st_hash, 0, m->st_hcap * sizeof *m->st_hash);
}

static int32_t start_state(gram_matcher *m)
{
    m->n_scratch = 0;
    for (uint32_t a = m->g->rule_alt[m->g->root]; a < m->g->rule_alt[m->g->root + 1]; a++) expand(m, m->g->alt_start[a], NONE, 0);
    return intern(m);
}

/* The DFA from the current state alone: its stacks are copied out (top
 * first), everything is cleared, and they are interned again. */
static int rebuild(gram_matcher *m)
{
    const struct dstate cur = m->st[m->cur];
    int64_t total = 0;
    for (uint32_t i = 0; i < cur.n; i++)
        for (uint32_t f = m->pool[cur.off + i]; f != ACCEPT && f != NONE; f = m->fr[f].parent) total++;
    uint32_t *pos = malloc(((size_t)total + cur.n) * sizeof *pos), *len = malloc((cur.n + 1) * sizeof *len);
    if (!pos || !len) return free(pos), free(len), NB_ENOMEM;
    int64_t at = 0;
    bool acc = false;
    for (uint32_t i = 0; i < cur.n; i++) {
        uint32_t f = m->pool[cur.off + i], n = 0;
        if (f == ACCEPT) acc = true;
        for (; f != ACCEPT && f != NONE; f = m->fr[f].parent) pos[at + n++] = m->fr[f].pos;
        len[i] = n, at += n;
    }
    clear(m);
    m->start = start_state(m);
    m->n_scratch = 0;
    at = 0;
    for (uint32_t i = 0; i < cur.n; i++) {
        uint32_t below = NONE;
        for (uint32_t k = len[i]; k-- > 0;) below = frame(m, pos[at + k], below);
        if (len[i]) add(m, below);
        at += len[i];
    }
    if (acc) add(m, ACCEPT);
    free(pos), free(len);
    int32_t s = intern(m);
    if (s < 0 || m->start < 0) return m->fail = true, NB_ENOMEM;
    m->cur = s;
    return 0;
}

/* Bytes in the same class are in the same byte sets of the grammar, so every
 * transition treats them alike: one byte of a class stands for all of it. */
static void byte_classes(const gram_grammar *g, uint8_t cls[256], uint8_t rep[256], int *n_cls)
{
    uint16_t id[256] = {0}, next[256];
    int n = 1;
    for (uint32_t s = 0; s < g->n_sets && n < 256; s++) { /* split every class by membership in set s */
        int16_t in_map[256], out_map[256];
        memset(in_map, -1, sizeof in_map), memset(out_map, -1, sizeof out_map);
        int m = 0;
        for (int b = 0; b < 256; b++) {
            int16_t *map = gram_set_has(g->sets[s], (unsigned char)b) ? in_map : out_map;
            if (map[id[b]] < 0) map[id[b]] = (int16_t)m++;
            next[b] = (uint16_t)map[id[b]];
        }
        memcpy(id, next, sizeof id), n = m;
    }
    for (int c = 0; c < 256; c++) rep[c] = 0;
    for (int b = 255; b >= 0; b--) cls[b] = (uint8_t)id[b], rep[id[b]] = (uint8_t)b; /* the lowest byte of each */
    *n_cls = n;
}

/* The distinct classes' representatives among bytes lo..hi. */
static int reps_in(const uint8_t cls[256], const uint8_t rep[256], unsigned lo, unsigned hi, uint8_t out[256])
{
    bool seen[256] = {0};
    int n = 0;
    for (unsigned b = lo; b <= hi; b++)
        if (!seen[cls[b]]) seen[cls[b]] = true, out[n++] = rep[cls[b]];
    return n;
}

/* Every text character (a plain byte, or a valid UTF-8 sequence of 2-4
 * bytes) as a sequence of class representatives: checking these checks all
 * characters.  Off (n_pat 0) when there would be more than MAX_PATTERNS. */
static int char_patterns(gram_matcher *m)
{
    uint8_t cls[256], rep[256];
    int n_cls;
    byte_classes(m->g, cls, rep, &n_cls);
    static const unsigned char ranges[][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}}, {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}}, {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}}, {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}}, {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}}};
    static const int lens[] = {2, 3, 3, 3, 3, 4, 4, 4};
    uint8_t r[4][256];
    int nr[4];
    uint64_t total = 0;
    bool seen[256] = {0};
    for (unsigned b = 0; b < 256; b++) total += gram_plain((unsigned char)b) && !seen[cls[b]] ? (seen[cls[b]] = true) : 0;
    for (int c = 0; c < 8; c++) {
        uint64_t k = 1;
        for (int i = 0; i < lens[c]; i++) k *= (uint64_t)reps_in(cls, rep, ranges[c][i][0], ranges[c][i][1], r[i]);
        total += k;
    }
    m->n_pat = 0;
    if (total > MAX_PATTERNS) return 0;
    if (!(m->pat = malloc((size_t)total * sizeof *m->pat))) return NB_ENOMEM;
    memset(seen, 0, sizeof seen);
    for (unsigned b = 0; b < 256; b++)
        if (gram_plain((unsigned char)b) && !seen[cls[b]]) seen[cls[b]] = true, m->pat[m->n_pat++] = (struct char_pattern){{rep[cls[b]]}, 1};
    for (int c = 0; c < 8; c++) {
        for (int i = 0; i < lens[c]; i++) nr[i] = reps_in(cls, rep, ranges[c][i][0], ranges[c][i][1], r[i]);
        int idx[4] = {0};
        for (;;) { /* the product of the positions' representatives, as an odometer */
            struct char_pattern p = {.len = (uint8_t)lens[c]};
            for (int i = 0; i < lens[c]; i++) p.b[i] = r[i][idx[i]];
            m->pat[m->n_pat++] = p;
            int i = lens[c] - 1;
            while (i >= 0 && ++idx[i] == nr[i]) idx[i--] = 0;
            if (i < 0) break;
        }
    }
    return 0;
}

int gram_matcher_new(const gram_grammar *g, const gram_vocab *v, gram_matcher **out, char *err, size_t errlen)
{
    *out = NULL;
    gram_matcher *m = calloc(1, sizeof *m);
    if (!m) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    m->g = g, m->v = v;
    m->mask_words = v ? ((size_t)v->n_vocab + 31) / 32 : 0;
    if (!rehash_frames(m) || !rehash_states(m) || !(m->walk = malloc(((v ? v->all.max_depth : 0) + 1u) * sizeof *m->walk)) ||
        !(m->scratch_bits = malloc((m->mask_words + 1) * sizeof *m->scratch_bits))) {
        gram_matcher_free(m);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    if (v && char_patterns(m)) {
        gram_matcher_free(m);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    m->fr = malloc(1024 * sizeof *m->fr), m->cap_fr = m->fr ? 1024 : 0;
    if (m->fr) m->fr[0] = (struct frame){NONE, NONE}, m->n_fr = 1; /* ACCEPT, never looked up */
    m->start = m->fr ? start_state(m) : T_FAIL;
    if (m->start < 0) {
        const int32_t start = m->start;
        gram_matcher_free(m);
        return start == T_DEAD ? nb_errf(err, errlen, NB_EINVAL, "the grammar matches nothing")
                               : nb_errf(err, errlen, NB_ENOMEM, "the grammar cannot be started (too deep or out of memory)");
    }
    m->cur = m->start;
    *out = m;
    return 0;
}

void gram_matcher_free(gram_matcher *m)
{
    if (!m) return;
    for (int64_t i = 0; i < m->n_st; i++) free(m->st[i].mask);
    free(m->fr), free(m->fr_hash), free(m->pool), free(m->st), free(m->trans), free(m->st_hash), free(m->scratch), free(m->walk), free(m->scratch_bits), free(m->pat);
    free(m);
}

void gram_matcher_reset(gram_matcher *m)
{
    m->cur = m->start, m->done = false;
}

bool gram_matcher_complete(const gram_matcher *m) { return !m->done && accepting(m, m->cur); }
bool gram_matcher_done(const gram_matcher *m) { return m->done; }
uint32_t gram_matcher_states(const gram_matcher *m) { return (uint32_t)m->n_st; }
uint64_t gram_matcher_walks(const gram_matcher *m) { return m->walks; }

/* Between tokens: the DFA rebuilt when it has grown past half its bounds. */
static int keep_small(gram_matcher *m)
{
    if (m->fail) return NB_ENOMEM;
    return m->n_st > MAX_STATES / 2 || m->n_fr > MAX_FRAMES / 2 ? rebuild(m) : 0;
}

int gram_matcher_accept_bytes(gram_matcher *m, const char *s, size_t n)
{
    if (m->done) return NB_EINVAL;
    if (keep_small(m)) return NB_ENOMEM;
    int32_t q = m->cur;
    for (size_t i = 0; i < n && q >= 0; i++) q = step(m, q, (unsigned char)s[i]);
    if (q == T_FAIL) return NB_ENOMEM;
    if (q < 0) return NB_EINVAL;
    m->cur = q;
    return 0;
}

bool gram_matcher_allows_bytes(gram_matcher *m, const char *s, size_t n)
{
    if (m->done || keep_small(m)) return false;
    int32_t q = m->cur;
    for (size_t i = 0; i < n && q >= 0; i++) q = step(m, q, (unsigned char)s[i]);
    return q >= 0;
}

static bool is_stop(const gram_vocab *v, int32_t id)
{
    for (int i = 0; i < v->n_stop; i++)
        if (v->stop[i] == id) return true;
    return false;
}

int gram_matcher_accept(gram_matcher *m, int32_t id)
{
    const gram_vocab *v = m->v;
    if (!v || id < 0 || id >= v->n_vocab || m->done) return NB_EINVAL;
    if (is_stop(v, id)) {
        if (!accepting(m, m->cur)) return NB_EINVAL;
        m->done = true;
        return 0;
    }
    if (!v->is_text[id]) return NB_EINVAL;
    return gram_matcher_accept_bytes(m, v->blob + v->off[id], (size_t)(v->off[id + 1] - v->off[id]));
}

/* The walk of trie tr from state q, ORing its tokens' bits into out
 * (mask_words + 1 words: the sink last).  0 or NB_ENOMEM. */
static int walk_trie(gram_matcher *m, const struct gram_trie *tr, int32_t q, uint32_t *restrict out)
{
    uint32_t *restrict walk = m->walk;
    walk[0] = (uint32_t)q;
    /* Locals, so the stores into out do not make the compiler reload the
     * trie's arrays every node; trans moves only when step() grows it. */
    const uint8_t *restrict byte = tr->byte;
    const uint16_t *restrict depth = tr->depth;
    const uint32_t *restrict skip = tr->skip, *restrict tok_off = tr->tok_off;
    const int32_t *restrict toks = tr->toks, *restrict node_tok = tr->node_tok;
    const int32_t *trans = m->trans;
    const uint32_t n_nodes = tr->n_nodes;
    for (uint32_t i = 1; i < n_nodes;) {
        const uint16_t d = depth[i];
        int32_t t = trans[(int64_t)walk[d - 1] * 256 + byte[i]];
        if (t == T_UNKNOWN) t = step(m, (int32_t)walk[d - 1], byte[i]), trans = m->trans;
        if (t < 0) {
            if (t == T_FAIL) return NB_ENOMEM;
            i = skip[i];
            continue;
        }
        walk[d] = (uint32_t)t;
        out[node_tok[i] >> 5] |= 1u << (node_tok[i] & 31);
        if (tok_off[i + 1] - tok_off[i] > 1) /* ids with the same bytes: rare */
            for (uint32_t k = tok_off[i] + 1; k < tok_off[i + 1]; k++) out[toks[k] >> 5] |= 1u << (toks[k] & 31);
        i++;
    }
    return 0;
}

/* The state every text character leads to from s (T_DEAD: they all die),
 * or T_MIXED when they do not all lead to the same one; computed once a
 * state, over the characters' patterns (char_patterns). */
static int32_t text_next(gram_matcher *m, int32_t s)
{
    if (m->st[s].text_next != T_UNKNOWN) return m->st[s].text_next;
    int32_t u = m->n_pat ? T_UNKNOWN : T_MIXED;
    for (uint32_t p = 0; p < m->n_pat && u != T_MIXED; p++) {
        int32_t t = s;
        for (int k = 0; k < m->pat[p].len && t >= 0; k++) t = step(m, t, m->pat[p].b[k]);
        if (t == T_FAIL) return T_FAIL;
        u = u == T_UNKNOWN || u == t ? t : T_MIXED;
    }
    m->st[s].text_next = u;
    return u;
}

/* Inside a string every character leads on alike: then a text token's fate
 * is its count of characters, and the text tokens allowed are those of at
 * most L, L the characters the state can take.  -1: not such a state (some
 * character leads elsewhere within max_text of q); T_FAIL. */
static int32_t text_reach(gram_matcher *m, int32_t q)
{
    int32_t s = q;
    for (int32_t d = 0; d < m->v->max_text; d++) {
        int32_t u = text_next(m, s);
        if (u == T_FAIL) return T_FAIL;
        if (u == T_MIXED) return -1;
        if (u == T_DEAD) return d;
        s = u;
    }
    return m->v->max_text;
}

int gram_matcher_mask(gram_matcher *m, uint32_t *bits)
{
    const gram_vocab *v = m->v;
    memset(bits, 0, m->mask_words * sizeof *bits);
    if (m->done) return 0;
    if (keep_small(m)) return NB_ENOMEM;
    const int32_t q = m->cur;
    if (m->st[q].mask) {
        memcpy(bits, m->st[q].mask, m->mask_words * sizeof *bits);
        return 0;
    }
    m->walks++;
    uint32_t *out = m->scratch_bits;
    const int32_t L = text_reach(m, q);
    if (L == T_FAIL) return NB_ENOMEM;
    if (L >= 0) memcpy(out, v->text_upto + (size_t)L * v->words, v->words * sizeof *out), out[v->words] = 0;
    else memset(out, 0, (m->mask_words + 1) * sizeof *out);
    if (walk_trie(m, L >= 0 ? &v->impure : &v->all, q, out)) return NB_ENOMEM;
    memcpy(bits, out, m->mask_words * sizeof *bits);
    if (v->n_vocab & 31) bits[m->mask_words - 1] &= (1u << (v->n_vocab & 31)) - 1; /* the sink bit, when it shares the last word */
    if (accepting(m, q))
        for (int i = 0; i < v->n_stop; i++) bits[v->stop[i] >> 5] |= 1u << (v->stop[i] & 31);
    const size_t bytes = m->mask_words * sizeof *bits;
    if (m->cache_bytes + bytes <= MASK_CACHE_BYTES && (m->st[q].mask = malloc(bytes))) {
        memcpy(m->st[q].mask, bits, bytes);
        m->cache_bytes += bytes;
    }
    return 0;
}

bool gram_accepts(const gram_grammar *g, const char *s, size_t n)
{
    gram_matcher *m;
    if (gram_matcher_new(g, NULL, &m, NULL, 0)) return false;
    bool ok = !gram_matcher_accept_bytes(m, s, n) && gram_matcher_complete(m);
    gram_matcher_free(m);
    return ok;
}
