/* grammars.c — structured output's matchers, kept between requests.
 *
 * A matcher's DFA and its mask cache depend only on the grammar and the
 * vocabulary, not on the request, so a client that sends the same schema
 * again (the usual case: an application has one schema per call site) finds
 * every state it visits already built and every mask already made.  The
 * cache holds COORD_GRAMMARS entries keyed by the response_format's text
 * (api_format.c's key); each owns its grammar, compiled here again from the
 * key, so it outlives the request that brought it.  An entry is lent to one
 * request at a time (the queue's next request may be submitted while one
 * runs); a request that finds its entry lent, or every entry lent, gets a
 * matcher of its own over its own grammar, freed when it ends.  Main thread
 * only, like the request queue. */
#include "coordinator/coord.h"

#include "core/util/err.h"
#include "core/util/log.h"

#include <stdlib.h>
#include <string.h>

/* The vocabulary's trie, built at the first constrained request. */
static int vocab(struct coord *c, int32_t n_vocab, const int32_t *stop_ids, int n_stop, char *err, size_t errlen)
{
    if (!c->tok) return nb_errf(err, errlen, NB_EINVAL, "structured output needs the model's tokenizer");
    if (c->gram_vocab) return 0;
    return gram_vocab_from_tokenizer(c->tok, n_vocab, stop_ids, n_stop, &c->gram_vocab, err, errlen);
}

/* The key's grammar: "json_object", or "json_schema:" and the schema's JSON text. */
static int compile_key(const char *key, gram_grammar **g, char *err, size_t errlen)
{
    if (!strcmp(key, "json_object")) return gram_any_object(g, err, errlen);
    if (strncmp(key, "json_schema:", 12)) return nb_errf(err, errlen, NB_EINVAL, "bad grammar key");
    cJSON *s = cJSON_Parse(key + 12);
    if (!s) return nb_errf(err, errlen, NB_EINVAL, "the grammar key's schema does not parse");
    int rc = gram_from_schema(s, g, err, errlen);
    cJSON_Delete(s);
    return rc;
}

static void drop(struct coord_grammar *e)
{
    gram_matcher_free(e->m);
    gram_free(e->g);
    free(e->key);
    memset(e, 0, sizeof *e);
}

int coord_grammar_take(struct coord *c, const struct coord_request_spec *s, int32_t n_vocab, const int32_t *stop_ids, int n_stop,
                       gram_matcher **m, int *slot, char *err, size_t errlen)
{
    *m = NULL, *slot = -1;
    int rc = vocab(c, n_vocab, stop_ids, n_stop, err, errlen);
    if (rc) return rc;
    struct coord_grammar *free_e = NULL;
    bool found = false;
    for (int i = 0; s->grammar_key && i < COORD_GRAMMARS && !found; i++) {
        struct coord_grammar *e = &c->grammars[i];
        if (!e->key || strcmp(e->key, s->grammar_key)) continue;
        found = true;
        if (e->lent) break; /* lent to another request: this one gets a matcher of its own */
        e->lent = true, e->used = ++c->grammar_clock;
        *m = e->m, *slot = i;
        nb_log("structured output: the kept matcher (%u DFA states, %llu masks walked so far)", gram_matcher_states(e->m),
               (unsigned long long)gram_matcher_walks(e->m));
        return 0;
    }
    for (int i = 0; s->grammar_key && !found && i < COORD_GRAMMARS; i++) { /* an empty entry, else the least recently used */
        struct coord_grammar *e = &c->grammars[i];
        if (!e->lent && (!free_e || (free_e->key && (!e->key || e->used < free_e->used)))) free_e = e;
    }
    if (free_e) {
        drop(free_e);
        if (!(free_e->key = strdup(s->grammar_key))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        rc = compile_key(s->grammar_key, &free_e->g, err, errlen);
        if (!rc) rc = gram_matcher_new(free_e->g, c->gram_vocab, &free_e->m, err, errlen);
        if (!rc) {
            free_e->lent = true, free_e->used = ++c->grammar_clock;
            *m = free_e->m, *slot = (int)(free_e - c->grammars);
            return 0;
        }
        nb_log("structured output: the key's grammar cannot be kept (%s): a matcher of the request's own", err);
        drop(free_e);
    } else if (s->grammar_key) {
        nb_log("structured output: a matcher of the request's own (the cache's entries are lent)");
    }
    return gram_matcher_new(s->grammar, c->gram_vocab, m, err, errlen);
}

void coord_grammar_give(struct coord *c, gram_matcher *m, int slot)
{
    if (slot >= 0 && slot < COORD_GRAMMARS && c->grammars[slot].m == m) c->grammars[slot].lent = false;
    else gram_matcher_free(m);
}

void coord_grammars_free(struct coord *c)
{
    for (int i = 0; i < COORD_GRAMMARS; i++) drop(&c->grammars[i]);
    gram_vocab_free(c->gram_vocab);
    c->gram_vocab = NULL;
}
