/* test_grammar.c — core/grammar: schemas → grammars (accept / reject byte
 * strings), the unsupported keywords' errors, and the vocabulary mask equal
 * to a brute-force check of every token along random walks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar.h"
#include "core/util/err.h"

static gram_grammar *compile(const char *schema)
{
    cJSON *s = cJSON_Parse(schema);
    cr_assert(s, "bad test schema %s", schema);
    gram_grammar *g = NULL;
    char err[256] = "";
    int rc = gram_from_schema(s, &g, err, sizeof err);
    cJSON_Delete(s);
    cr_assert_eq(rc, 0, "%s: %s", schema, err);
    return g;
}

static void accepts(const gram_grammar *g, const char *text, bool want)
{
    cr_expect_eq(gram_accepts(g, text, strlen(text)), want, "%s should be %s", text, want ? "accepted" : "refused");
}

Test(grammar, scalars)
{
    gram_grammar *g = compile("{\"type\":\"integer\"}");
    accepts(g, "0", true), accepts(g, "-12", true), accepts(g, " 7 ", true), accepts(g, "1234567890123456", true);
    accepts(g, "12345678901234567", false), accepts(g, "01", false), accepts(g, "1.5", false), accepts(g, "", false);
    accepts(g, "-", false), accepts(g, "+1", false), accepts(g, "1e3", false);
    gram_free(g);
    g = compile("{\"type\":\"number\"}");
    accepts(g, "1.5", true), accepts(g, "-0.25e-3", true), accepts(g, "3E+10", true), accepts(g, "1.", false);
    accepts(g, ".5", false), accepts(g, "1e", false), accepts(g, "1e1234", false), accepts(g, "NaN", false);
    gram_free(g);
    g = compile("{\"type\":[\"boolean\",\"null\"]}");
    accepts(g, "true", true), accepts(g, "false", true), accepts(g, "null", true), accepts(g, "nul", false), accepts(g, "0", false);
    gram_free(g);
}

Test(grammar, strings)
{
    gram_grammar *g = compile("{\"type\":\"string\"}");
    accepts(g, "\"\"", true), accepts(g, "\"a b\"", true), accepts(g, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", true);
    accepts(g, "\"\\n\\t\\\"\\\\\\/\\u00e9\"", true);
    accepts(g, "\"\\ud83d\"", false); /* a surrogate escape: two escapes would be one character */
    accepts(g, "\"a\nb\"", false), accepts(g, "\"\\x\"", false), accepts(g, "\"\xc3\"", false), accepts(g, "\"\xed\xa0\x80\"", false);
    accepts(g, "\"\xc0\xaf\"", false), accepts(g, "\"abc", false), accepts(g, "abc", false);
    gram_free(g);
    g = compile("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    accepts(g, "\"a\"", false), accepts(g, "\"ab\"", true), accepts(g, "\"\xc3\xa9\\n\xe2\x82\xac\"", true), accepts(g, "\"abcd\"", false);
    gram_free(g);
}

Test(grammar, objects)
{
    gram_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                              "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}");
    accepts(g, "{\"b\":\"x\"}", true), accepts(g, "{\"a\":1,\"b\":\"x\"}", true), accepts(g, "{\"a\":1,\"b\":\"x\",\"c\":true}", true);
    accepts(g, "{\n  \"a\": 1,\n  \"b\": \"x\"\n}", true), accepts(g, "{\"b\":\"x\",\"c\":false}", true);
    accepts(g, "{}", false), accepts(g, "{\"a\":1}", false), accepts(g, "{\"b\":\"x\",\"a\":1}", false); /* schema order */
    accepts(g, "{\"b\":\"x\",}", false), accepts(g, "{\"b\":\"x\",\"d\":1}", false), accepts(g, "{\"b\":\"x\"} x", false);
    gram_free(g);
    g = compile("{\"type\":\"object\",\"additionalProperties\":false}");
    accepts(g, "{}", true), accepts(g, "{ }", true), accepts(g, "{\"a\":1}", false);
    gram_free(g);
    g = compile("{\"type\":\"object\"}");
    accepts(g, "{\"k\":[1,{\"x\":null}],\"s\":\"t\"}", true), accepts(g, "[]", false), accepts(g, "{\"k\"}", false);
    gram_free(g);
}

Test(grammar, arrays_enum_anyof_ref)
{
    gram_grammar *g = compile("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}");
    accepts(g, "[]", false), accepts(g, "[1]", true), accepts(g, "[1, 2 ,3]", true), accepts(g, "[1,2,3,4]", false), accepts(g, "[1,]", false);
    gram_free(g);
    g = compile("{\"enum\":[\"red\",3,null,{\"a\":[true]}]}");
    accepts(g, "\"red\"", true), accepts(g, "3", true), accepts(g, "null", true), accepts(g, "{\"a\":[true]}", true);
    accepts(g, "\"blue\"", false), accepts(g, "4", false);
    gram_free(g);
    g = compile("{\"type\":\"string\",\"enum\":[\"x\",1]}"); /* only the values of the type */
    accepts(g, "\"x\"", true), accepts(g, "1", false);
    gram_free(g);
    g = compile("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"const\":\"k\"},\"maxItems\":2}]}");
    accepts(g, "5", true), accepts(g, "[\"k\",\"k\"]", true), accepts(g, "[\"k\",\"j\"]", false), accepts(g, "true", false);
    gram_free(g);
    g = compile("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}");
    accepts(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}", true), accepts(g, "{\"v\":1,\"kids\":[{}]}", false);
    gram_free(g);
}

static void refused(const char *schema, int code, const char *needle)
{
    cJSON *s = cJSON_Parse(schema);
    cr_assert(s);
    gram_grammar *g = NULL;
    char err[256] = "";
    int rc = gram_from_schema(s, &g, err, sizeof err);
    cJSON_Delete(s);
    cr_expect_eq(rc, code, "%s: rc %d (%s)", schema, rc, err);
    cr_expect(strstr(err, needle), "%s: the message \"%s\" does not name %s", schema, err, needle);
    cr_expect_null(g);
}

Test(grammar, unsupported_keywords_are_named)
{
    refused("{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", NB_ENOTSUP, "'patternProperties'");
    refused("{\"type\":\"string\",\"pattern\":\"^a+$\"}", NB_ENOTSUP, "'pattern'");
    refused("{\"properties\":{\"x\":{\"type\":\"number\",\"minimum\":3}}}", NB_ENOTSUP, "'minimum' is not supported at /properties/x");
    refused("{\"$ref\":\"https://example.com/s.json\"}", NB_ENOTSUP, "'$ref'");
    refused("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}", NB_ENOTSUP, "cycle");
    refused("{\"type\":\"strin\"}", NB_EINVAL, "'type'");
    refused("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", NB_ENOTSUP, "'x'");
    refused("{\"type\":\"array\",\"maxItems\":100000}", NB_ENOTSUP, "'maxItems' over");
    refused("{\"type\":\"string\",\"format\":\"date\"}", NB_ENOTSUP, "'format'");
    refused("{\"oneOf\":[{\"type\":\"string\"}]}", NB_ENOTSUP, "'oneOf'");
    refused("false", NB_ENOTSUP, "false");
}

/* ---------- the mask against brute force ---------- */

static uint64_t rng = 0x1234567;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)rng;
}

/* A vocabulary of every byte, JSON-ish pieces and random strings, with a few
 * ids that are not text and two stop ids. */
static gram_vocab *make_vocab(int32_t n, char ***words_out, size_t **lens_out)
{
    static const char *const pieces[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", "},", "],", "[{", " \"",
                                         "\n  ", "12", "0.", "e+", "-1", "\\n", "\\u00", "\":\"", "\"]}",
                                         "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80\"", "\xe6\x97", "\xa5x", "\xed\xa0\x80",
                                         "\xf4\x8f\xbf\xbf", "\xc0\xaf", "a\x7f", NULL};
    char **w = calloc((size_t)n, sizeof *w);
    size_t *len = calloc((size_t)n, sizeof *len);
    int32_t i = 0;
    for (; i < 256; i++) w[i] = malloc(1), w[i][0] = (char)i, len[i] = 1;
    for (int k = 0; pieces[k] && i < n; k++, i++) w[i] = strdup(pieces[k]), len[i] = strlen(pieces[k]);
    static const char alpha[] = "{}[]\":, \n0123456789.eE+-abtrufnl\\\xc3\xa9";
    for (; i < n; i++) {
        if (i % 97 == 0) continue; /* not text */
        len[i] = 1 + rnd() % 6;
        w[i] = malloc(len[i]);
        for (size_t k = 0; k < len[i]; k++) w[i][k] = alpha[rnd() % (sizeof alpha - 1)];
    }
    int32_t stops[2] = {n - 1, n - 2};
    gram_vocab *v = NULL;
    char err[128];
    cr_assert_eq(gram_vocab_new(n, (const char *const *)w, len, stops, 2, &v, err, sizeof err), 0, "%s", err);
    *words_out = w, *lens_out = len;
    return v;
}

static void brute_force_walks(const char *schema, int walks)
{
    const int32_t n = 3000;
    char **w;
    size_t *len;
    gram_vocab *v = make_vocab(n, &w, &len);
    gram_grammar *g = compile(schema);
    uint32_t *bits = malloc(((size_t)n + 31) / 32 * 4);
    char *prefix = malloc(1 << 16);
    for (int walk = 0; walk < walks; walk++) {
        gram_matcher *m, *b; /* b: the same walk, checked token by token */
        cr_assert_eq(gram_matcher_new(g, v, &m, NULL, 0), 0);
        cr_assert_eq(gram_matcher_new(g, NULL, &b, NULL, 0), 0);
        size_t np = 0;
        for (int step = 0; step < 60 && !gram_matcher_done(m); step++) {
            cr_assert_eq(gram_matcher_mask(m, bits), 0);
            int32_t allowed[3000], n_allowed = 0;
            for (int32_t id = 0; id < n; id++) {
                bool want;
                if (id >= n - 2) want = gram_matcher_complete(m);
                else if (!w[id]) want = false;
                else want = gram_matcher_allows_bytes(b, w[id], len[id]);
                bool got = bits[id >> 5] >> (id & 31) & 1;
                cr_assert_eq(got, want, "%s: walk %d step %d: token %d (%.*s) mask %d, brute force %d", schema, walk, step, id,
                             (int)len[id], w[id] ? w[id] : "", got, want);
                if (got) allowed[n_allowed++] = id;
            }
            cr_assert_gt(n_allowed, 0, "no token allowed at step %d", step);
            int32_t pick = allowed[rnd() % n_allowed];
            cr_assert_eq(gram_matcher_accept(m, pick), 0);
            if (pick < n - 2) {
                cr_assert_eq(gram_matcher_accept_bytes(b, w[pick], len[pick]), 0);
                memcpy(prefix + np, w[pick], len[pick]), np += len[pick];
            }
        }
        if (gram_matcher_done(m)) cr_expect(gram_accepts(g, prefix, np), "a finished walk is a whole value: %.*s", (int)np, prefix);
        int32_t bad = -1;
        for (int32_t id = 0; id < n - 2 && bad < 0; id++)
            if (w[id] && !(bits[id >> 5] >> (id & 31) & 1)) bad = id;
        if (bad >= 0 && !gram_matcher_done(m)) cr_expect_eq(gram_matcher_accept(m, bad), NB_EINVAL, "a masked token is refused");
        gram_matcher_free(m), gram_matcher_free(b);
    }
    free(bits), free(prefix);
    for (int32_t i = 0; i < n; i++) free(w[i]);
    free(w), free(len);
    gram_free(g);
    gram_vocab_free(v);
}

Test(grammar, mask_equals_brute_force_object)
{
    brute_force_walks("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"n\":{\"type\":\"number\"},"
                      "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",true]},\"maxItems\":3}},\"required\":[\"n\"]}",
                      6);
}

Test(grammar, mask_equals_brute_force_any)
{
    brute_force_walks("{\"type\":\"object\"}", 4);
    brute_force_walks("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}]}", 4);
}

Test(grammar, vocab_trie_has_every_text_token)
{
    char **w;
    size_t *len;
    gram_vocab *v = make_vocab(3000, &w, &len);
    cr_expect_eq(gram_vocab_size(v), 3000);
    cr_expect_gt(gram_vocab_trie_nodes(v), 256);
    /* Any JSON value allows '{' and '[' first: the one-byte tokens of both. */
    gram_grammar *g = NULL;
    cr_assert_eq(gram_any_object(&g, NULL, 0), 0);
    gram_matcher *m;
    cr_assert_eq(gram_matcher_new(g, v, &m, NULL, 0), 0);
    uint32_t bits[(3000 + 31) / 32];
    cr_assert_eq(gram_matcher_mask(m, bits), 0);
    cr_expect(bits['{' >> 5] >> ('{' & 31) & 1);
    cr_expect(!(bits['[' >> 5] >> ('[' & 31) & 1), "json_object: an object, not an array");
    cr_expect(!(bits[2999 >> 5] >> (2999 & 31) & 1), "no stop before the value");
    gram_matcher_free(m);
    gram_free(g);
    gram_vocab_free(v);
    for (int i = 0; i < 3000; i++) free(w[i]);
    free(w), free(len);
}

/* ---------- core/gen with a matcher ---------- */

#include "core/gen/gen.h"

#define GV 300
#define THINK_END 297 /* not text */
#define STOP 299

/* Runs a constrained session on random logits that favour bytes the
 * grammar refuses ('x', '<'); returns the ids made. */
static long long run_constrained(gram_matcher *m, int32_t after, float temperature, uint64_t seed, int32_t *out)
{
    struct gen_config cfg = {.prompt = (int32_t[]){1, 2, 3}, .n_prompt = 3, .budget = 400, .n_vocab = GV, .n_stop = 1,
                             .stop_ids = {STOP}, .constrain = m, .constrain_after = after};
    cfg.sp = (struct sampling_params){.temperature = temperature, .top_p = 1.0f, .seed = seed};
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&cfg, &g, err, sizeof err), 0, "%s", err);
    float logits[GV];
    uint64_t x = seed * 7 + 1;
    struct gen_step st;
    struct gen_event ev;
    while (gen_next(g, &st) == GEN_EVAL) {
        cr_assert(!st.argmax_ok, "a constrained step needs the whole row");
        for (int i = 0; i < GV; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, logits[i] = (float)(x % 1000) / 250.0f;
        logits['x'] = logits['<'] = 9.0f;
        logits[THINK_END] = 9.5f; /* above the refused bytes: greedy ends thinking at once */
        cr_assert_eq(gen_prepare(g, err, sizeof err), 0);
        cr_assert_eq(gen_feed(g, logits, NULL, &ev, err, sizeof err), 0, "%s", err);
    }
    struct gen_result r;
    cr_assert_eq(gen_finish(g, &r, err, sizeof err), 0);
    cr_assert_str_eq(r.why, "stop token", "the value ends, then only the stop id is left: %s after %lld", r.why, r.made);
    memcpy(out, r.ids, (size_t)r.made * sizeof *out);
    long long made = r.made;
    gen_free(g);
    return made;
}

Test(grammar, gen_samples_only_what_the_grammar_allows)
{
    char *w[GV] = {0};
    size_t len[GV] = {0};
    for (int i = 0; i < 256; i++) w[i] = malloc(1), w[i][0] = (char)i, len[i] = 1;
    static const char *const pieces[] = {"[1", ", 2", "]", "  ", "x]", "-0", NULL};
    for (int k = 0; pieces[k]; k++) w[256 + k] = strdup(pieces[k]), len[256 + k] = strlen(pieces[k]);
    int32_t stop = STOP;
    gram_vocab *v;
    cr_assert_eq(gram_vocab_new(GV, (const char *const *)w, len, &stop, 1, &v, NULL, 0), 0);
    gram_grammar *g = compile("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":4}");
    gram_matcher *m;
    cr_assert_eq(gram_matcher_new(g, v, &m, NULL, 0), 0);
    int32_t ids[401], again[401];
    for (uint64_t seed = 1; seed <= 8; seed++) {
        for (int think = 0; think < 2; think++) {
            const int32_t after = think ? THINK_END : -1;
            long long n = run_constrained(m, after, seed == 1 ? 0.0f : 1.0f, seed, ids), at = 0;
            if (think) { /* free until THINK_END (never the stop id), the grammar after it */
                while (at < n && ids[at] != THINK_END) cr_assert_neq(ids[at++], STOP, "the turn ended while thinking");
                cr_assert_lt(at, n, "seed %llu: thinking never ended", (unsigned long long)seed);
                at++;
            }
            char text[2048];
            size_t nt = 0;
            for (long long i = at; i < n - 1; i++) {
                cr_assert(w[ids[i]], "id %d is not text", ids[i]);
                memcpy(text + nt, w[ids[i]], len[ids[i]]), nt += len[ids[i]];
            }
            cr_expect(gram_accepts(g, text, nt), "seed %llu think %d: %.*s", (unsigned long long)seed, think, (int)nt, text);
            cr_expect_eq(run_constrained(m, after, seed == 1 ? 0.0f : 1.0f, seed, again), n, "the same ids again (reset)");
            cr_expect(!memcmp(ids, again, (size_t)n * sizeof *ids));
        }
    }
    gram_matcher_free(m);
    gram_free(g);
    gram_vocab_free(v);
    for (int i = 0; i < GV; i++) free(w[i]);
}

Test(grammar, masked_sampling_only_draws_allowed_ids)
{
    float logits[64];
    for (int i = 0; i < 64; i++) logits[i] = (float)i;
    uint32_t allowed[2] = {1u << 3 | 1u << 9, 1u << (40 - 32)};
    struct sampling_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = 3};
    sampler *s = sampling_new(&p, 64);
    for (int i = 0; i < 2000; i++) {
        int32_t id = sampling_sample_masked(s, logits, allowed);
        cr_assert(id == 3 || id == 9 || id == 40, "id %d was not allowed", id);
    }
    uint32_t none[2] = {0, 0};
    cr_expect_eq(sampling_sample_masked(s, logits, none), -1);
    sampling_free(s);
    p.temperature = 0;
    s = sampling_new(&p, 64);
    cr_expect_eq(sampling_sample_masked(s, logits, allowed), 40, "greedy: the best allowed id");
    sampling_free(s);
}

Test(grammar, dfa_rebuilt_from_the_current_state_when_large)
{
    /* 24 strings of exactly 900 characters: every character count is a state, 21,600 in all, over
     * the DFA's half bound (16,384): the matcher must rebuild itself from the current state between
     * two tokens and go on as if nothing happened. */
    char schema[4096] = "{\"type\":\"object\",\"properties\":{", *p = schema + strlen(schema);
    for (int i = 0; i < 24; i++) p += sprintf(p, "%s\"k%d\":{\"type\":\"string\",\"minLength\":900,\"maxLength\":900}", i ? "," : "", i);
    p += sprintf(p, "},\"required\":[");
    for (int i = 0; i < 24; i++) p += sprintf(p, "%s\"k%d\"", i ? "," : "", i);
    sprintf(p, "]}");
    gram_grammar *g = compile(schema);
    char *w[300] = {0};
    size_t len[300] = {0};
    for (int i = 0; i < 256; i++) w[i] = malloc(1), w[i][0] = (char)i, len[i] = 1;
    int32_t stop = 299;
    gram_vocab *v;
    cr_assert_eq(gram_vocab_new(300, (const char *const *)w, len, &stop, 1, &v, NULL, 0), 0);
    gram_matcher *m;
    cr_assert_eq(gram_matcher_new(g, v, &m, NULL, 0), 0);
    uint32_t bits[10];
    char *text = malloc(30000);
    size_t n = 0;
    bool shrank = false;
    uint32_t states = 0;
    for (int i = 0; i < 24; i++) {
        n += (size_t)sprintf(text + n, "%s\"k%d\":\"", i ? "," : "{", i);
        for (int k = 0; k < 900; k++) text[n++] = (char)('a' + (i + k) % 26);
        text[n++] = '"';
    }
    text[n++] = '}';
    int in_string = -1; /* characters of the open string so far, or -1 */
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(gram_matcher_mask(m, bits), 0);
        unsigned char b = (unsigned char)text[i];
        cr_assert(bits[b >> 5] >> (b & 31) & 1, "byte %zu (%c) allowed", i, b);
        if (in_string >= 0 && in_string < 900) cr_assert(!(bits['"' >> 5] >> ('"' & 31) & 1), "no closing quote at %d characters", in_string);
        if (in_string == 900) {
            int allowed = 0;
            for (int id = 0; id < 300; id++) allowed += bits[id >> 5] >> (id & 31) & 1;
            cr_assert(allowed == 1 && (bits['"' >> 5] >> ('"' & 31) & 1), "900 characters: only the closing quote (%d allowed)", allowed);
        }
        if (in_string >= 0) in_string = b == '"' ? -1 : in_string + 1;
        else if (b == '"' && text[i - 1] == ':') in_string = 0;
        cr_assert_eq(gram_matcher_accept(m, b), 0, "byte %zu", i);
        if (gram_matcher_states(m) < states) shrank = true;
        states = gram_matcher_states(m);
    }
    cr_expect(shrank, "the DFA was rebuilt (its state count went down)");
    cr_assert_eq(gram_matcher_mask(m, bits), 0);
    cr_expect(gram_matcher_complete(m) && (bits[299 >> 5] >> (299 & 31) & 1), "the value is complete: the stop id is allowed");
    cr_expect(gram_accepts(g, text, n));
    text[n - 2] = 'x'; /* one character short of 900 in the last string, and no closing quote */
    cr_expect(!gram_accepts(g, text, n));
    gram_matcher_free(m);
    gram_free(g);
    gram_vocab_free(v);
    for (int i = 0; i < 256; i++) free(w[i]);
    free(text);
}
