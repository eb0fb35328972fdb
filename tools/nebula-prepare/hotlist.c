/* hotlist.c — reading, checking and writing hotlist.tsv.
 *
 * A hotlist says, per layer and expert, how often the router picked the
 * expert on a prompt campaign and with what mean weight; placement ranks
 * by it.  The format is TSV: "layer expert count mean_weight", one row per
 * expert of every layer that has routed experts (trunk and MTP, `layer` is
 * the GGUF block index), an optional header row with those names, and '#'
 * comment lines.  A hotlist that misses or repeats an expert, names a layer
 * the model does not have, or carries a weight outside [0, 1] is refused
 * with the line number: a placement built on a wrong hotlist is silently
 * slow, which is worse than an error.  Without a campaign the neutral
 * hotlist (all zero) is written, and placement falls back to expert order. */
#include "tools/nebula-prepare/prepare.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util/err.h"

void hotlist_free(struct hotlist *h)
{
    free(h->count);
    free(h->weight);
    memset(h, 0, sizeof *h);
}

/* Splits a line into up to `max` whitespace-separated fields (in place). */
static int split_fields(char *line, char **f, int max)
{
    int n = 0;
    for (char *p = line; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') *p++ = 0;
        if (!*p) break;
        if (n == max) return max + 1;
        f[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
    }
    return n;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    if (!isdigit((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *v = x;
    return true;
}

int hotlist_parse(struct hotlist *h, const struct expert_layout *x, const char *text, size_t n, const char *name,
                  char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->n_layers = x->n_layers;
    h->n_expert = x->n_layers ? x->layers[0].n_expert : 0;
    size_t cells = (size_t)h->n_layers * h->n_expert;
    h->count = calloc(cells ? cells : 1, sizeof *h->count);
    h->weight = calloc(cells ? cells : 1, sizeof *h->weight);
    uint32_t *seen_line = calloc(cells ? cells : 1, sizeof *seen_line);
    char *copy = malloc(n + 1);
    int rc = 0;
    if (!h->count || !h->weight || !seen_line || !copy) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (!rc) {
        memcpy(copy, text, n);
        copy[n] = 0;
        if (strlen(copy) != n) rc = nb_errf(err, errlen, NB_EINVAL, "%s: contains a NUL byte (not a text file)", name);
    }
    bool header_allowed = true;
    uint32_t lineno = 0;
    for (char *line = copy, *next; !rc && line && *line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *f[5];
        int nf = split_fields(line, f, 4);
        if (nf == 0 || f[0][0] == '#') continue;
        if (header_allowed && nf == 4 && strcasecmp(f[0], "layer") == 0 && strcasecmp(f[1], "expert") == 0 &&
            strcasecmp(f[2], "count") == 0 && strcasecmp(f[3], "mean_weight") == 0) {
            header_allowed = false;
            continue;
        }
        header_allowed = false;
        if (nf != 4) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: expected 4 columns (layer, expert, count, mean_weight), got %d",
                         name, lineno, nf > 4 ? 5 : nf);
            break;
        }
        uint64_t block, expert, count;
        char *end;
        errno = 0;
        double w = strtod(f[3], &end);
        if (!parse_u64(f[0], &block) || !parse_u64(f[1], &expert) || !parse_u64(f[2], &count)) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: layer, expert and count must be non-negative integers", name, lineno);
            break;
        }
        if (errno || *end || end == f[3] || !isfinite(w) || w < 0 || w > 1) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: mean_weight \"%s\" is not a number in [0, 1]", name, lineno, f[3]);
            break;
        }
        int layer = -1;
        for (int i = 0; i < x->n_layers; i++)
            if ((uint64_t)x->layers[i].block == block) layer = i;
        if (layer < 0) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: layer %llu has no routed experts in this model", name, lineno,
                         (unsigned long long)block);
            break;
        }
        if (expert >= h->n_expert) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: expert %llu out of range (the model has %u per layer)", name,
                         lineno, (unsigned long long)expert, h->n_expert);
            break;
        }
        size_t c = (size_t)layer * h->n_expert + expert;
        if (seen_line[c]) {
            rc = nb_errf(err, errlen, NB_EINVAL, "%s:%u: layer %llu expert %llu listed twice (first on line %u)", name,
                         lineno, (unsigned long long)block, (unsigned long long)expert, seen_line[c]);
            break;
        }
        seen_line[c] = lineno;
        h->count[c] = count;
        h->weight[c] = w;
    }
    size_t missing = 0, first_missing = 0;
    for (size_t c = 0; !rc && c < cells; c++)
        if (!seen_line[c] && !missing++) first_missing = c;
    if (!rc && missing)
        rc = nb_errf(err, errlen, NB_EINVAL,
                     "%s: %zu of %zu layer/expert rows missing (first: layer %d expert %zu); every expert of every "
                     "layer must be listed once",
                     name, missing, cells, x->layers[first_missing / h->n_expert].block, first_missing % h->n_expert);
    h->neutral = true;
    for (size_t c = 0; !rc && c < cells; c++)
        if (h->count[c]) h->neutral = false;
    free(seen_line);
    free(copy);
    if (rc) hotlist_free(h);
    return rc;
}

char *hotlist_neutral_text(const struct expert_layout *x, size_t *n)
{
    size_t cap = 256;
    for (int i = 0; i < x->n_layers; i++) cap += (size_t)x->layers[i].n_expert * 24;
    char *t = malloc(cap);
    if (!t) return NULL;
    size_t len = (size_t)snprintf(t, cap,
                                  "# neutral hotlist written by nebula-prepare: no campaign was measured, every count\n"
                                  "# and weight is 0, so placement keeps expert order. Measure one with `nebula hotlist`.\n"
                                  "layer\texpert\tcount\tmean_weight\n");
    for (int i = 0; i < x->n_layers; i++)
        for (uint32_t e = 0; e < x->layers[i].n_expert; e++)
            len += (size_t)snprintf(t + len, cap - len, "%d\t%u\t0\t0\n", x->layers[i].block, e);
    *n = len;
    return t;
}
