/* build.c — building a grammar (gram_internal.h) piece by piece.
 *
 * The schema compiler makes rules in the order it meets schemas, and fills
 * an alternative of one rule while it compiles the rules that alternative
 * refers to, so alternatives are kept apart (one growable array each) until
 * gb_finish lays them out rule by rule in one flat array.  Errors are sticky:
 * after an allocation fails (or the grammar outgrows GB_MAX_ELEMS) every call
 * is a no-op and gb_finish reports it, so the compiler checks once. */
#include "core/grammar/gram_internal.h"

#include "core/util/err.h"
#include "core/util/grow.h"

#include <stdlib.h>
#include <string.h>

#define GB_MAX_ELEMS (1u << 22) /* 4M elements: far beyond any schema a request carries */

struct gb_alt {
    uint32_t rule;
    struct gram_elem *el;
    int64_t n, cap;
};

struct gram_build {
    struct gb_alt *alts;
    int64_t n_alts, cap_alts;
    uint32_t n_rules;
    uint64_t (*sets)[4];
    int64_t n_sets, cap_sets;
    uint64_t total;
    bool failed;
};

struct gram_build *gb_new(void) { return calloc(1, sizeof(struct gram_build)); }

void gb_free(struct gram_build *b)
{
    if (!b) return;
    for (int64_t i = 0; i < b->n_alts; i++) free(b->alts[i].el);
    free(b->alts), free(b->sets), free(b);
}

bool gb_failed(const struct gram_build *b) { return b->failed; }

uint32_t gb_rule(struct gram_build *b)
{
    if (b->n_rules >= (1u << 29)) b->failed = true;
    return b->failed ? 0 : b->n_rules++;
}

uint32_t gb_alt(struct gram_build *b, uint32_t rule)
{
    if (b->failed) return 0;
    if (nb_grow((void **)&b->alts, &b->cap_alts, b->n_alts, sizeof *b->alts, 64)) return b->failed = true, 0;
    b->alts[b->n_alts] = (struct gb_alt){.rule = rule};
    return (uint32_t)b->n_alts++;
}

static void push(struct gram_build *b, uint32_t alt, unsigned kind, uint32_t arg)
{
    if (b->failed) return;
    struct gb_alt *a = &b->alts[alt];
    if (++b->total > GB_MAX_ELEMS || nb_grow((void **)&a->el, &a->cap, a->n, sizeof *a->el, 8)) {
        b->failed = true;
        return;
    }
    a->el[a->n++] = (struct gram_elem){.kind = kind, .arg = arg};
}

void gb_set(struct gram_build *b, uint32_t alt, const uint64_t set[4])
{
    if (b->failed) return;
    int64_t i = b->n_sets;
    /* The same few sets come back all the time (a digit, a string's byte): one copy each. */
    for (int64_t j = b->n_sets - 1; j >= 0 && j >= b->n_sets - 64; j--)
        if (!memcmp(b->sets[j], set, sizeof b->sets[j])) i = j;
    if (i == b->n_sets) {
        if (nb_grow((void **)&b->sets, &b->cap_sets, b->n_sets, sizeof *b->sets, 32)) {
            b->failed = true;
            return;
        }
        memcpy(b->sets[b->n_sets++], set, sizeof b->sets[0]);
    }
    push(b, alt, G_SET, (uint32_t)i);
}

void gb_range(struct gram_build *b, uint32_t alt, unsigned lo, unsigned hi)
{
    uint64_t set[4] = {0};
    for (unsigned c = lo; c <= hi && c < 256; c++) set[c >> 6] |= 1ull << (c & 63);
    gb_set(b, alt, set);
}

void gb_lit(struct gram_build *b, uint32_t alt, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) gb_range(b, alt, (unsigned char)s[i], (unsigned char)s[i]);
}

void gb_ref(struct gram_build *b, uint32_t alt, uint32_t rule) { push(b, alt, G_REF, rule); }

int gb_finish(struct gram_build *b, uint32_t root, gram_grammar **out, char *err, size_t errlen)
{
    *out = NULL;
    if (b->failed || root >= b->n_rules) {
        bool big = b->total > GB_MAX_ELEMS;
        gb_free(b);
        return big ? nb_errf(err, errlen, NB_ENOTSUP, "the schema's grammar is too large (over %u elements)", GB_MAX_ELEMS)
                   : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    gram_grammar *g = calloc(1, sizeof *g);
    uint64_t n_el = 0;
    for (int64_t i = 0; i < b->n_alts; i++) n_el += (uint64_t)b->alts[i].n + 1;
    if (g) {
        g->el = malloc((n_el ? n_el : 1) * sizeof *g->el);
        g->alt_start = malloc(((size_t)b->n_alts + 1) * sizeof *g->alt_start);
        g->rule_alt = calloc((size_t)b->n_rules + 1, sizeof *g->rule_alt);
        g->sets = malloc(((size_t)b->n_sets + 1) * sizeof *g->sets);
    }
    if (!g || !g->el || !g->alt_start || !g->rule_alt || !g->sets) {
        gram_free(g), gb_free(b);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    /* Counting sort of the alternatives by rule, in the order they were made. */
    for (int64_t i = 0; i < b->n_alts; i++) g->rule_alt[b->alts[i].rule + 1]++;
    for (uint32_t r = 0; r < b->n_rules; r++) g->rule_alt[r + 1] += g->rule_alt[r];
    uint32_t *fill = calloc((size_t)b->n_rules + 1, sizeof *fill);
    if (!fill) {
        gram_free(g), gb_free(b);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    uint32_t at = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) fill[r] = g->rule_alt[r];
    for (int64_t i = 0; i < b->n_alts; i++) {
        const struct gb_alt *a = &b->alts[i];
        g->alt_start[fill[a->rule]++] = at;
        if (a->n) memcpy(g->el + at, a->el, (size_t)a->n * sizeof *a->el);
        at += (uint32_t)a->n;
        g->el[at++] = (struct gram_elem){.kind = G_END};
    }
    free(fill);
    g->n_el = at, g->n_rules = b->n_rules, g->root = root, g->n_sets = (uint32_t)b->n_sets;
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    gb_free(b);
    *out = g;
    return 0;
}

void gram_free(gram_grammar *g)
{
    if (!g) return;
    free(g->el), free(g->alt_start), free(g->rule_alt), free(g->sets), free(g);
}

void gram_size(const gram_grammar *g, uint32_t *rules, uint32_t *elements)
{
    *rules = g->n_rules, *elements = g->n_el;
}
