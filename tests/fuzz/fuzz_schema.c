/* fuzz_schema.c — libFuzzer target for core/grammar's schema compiler and
 * matcher.
 *
 * The input is a JSON schema (any bytes: those that are not JSON stop at
 * cJSON).  For every schema:
 *   - the compiler returns 0 with a grammar, or NB_ENOTSUP / NB_EINVAL /
 *     NB_ENOMEM with a non-empty message and no grammar — never a crash,
 *     whatever the nesting, the counts or the $refs;
 *   - a grammar's matcher starts (or says why not), and a walk of up to 48
 *     tokens over a small vocabulary (every byte, JSON pieces) keeps the
 *     matcher's own promises: each step's mask holds a token unless the
 *     walk is done, the token picked (by the input's own bytes) from the
 *     mask is accepted, a token outside the mask is refused, and when a
 *     stop id was accepted the bytes so far are a whole value;
 *   - the input's bytes themselves, matched as a value of the grammar, give
 *     an answer (accepted or not) without a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar.h"
#include "core/util/err.h"

#define N_VOCAB 300

static gram_vocab *vocab;
static char *words[N_VOCAB];
static size_t lens[N_VOCAB];

static void make_vocab(void)
{
    static const char *const pieces[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", "},", "],", "[{", " \"", "\n  ",
                                         "12", "0.", "e+", "-1", "\\n", "\\u00e9", "\":\"", "\"]}", "[]", "{}", "\"\"",
                                         "caf\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\xe6\x97", "\xa5", "\xed\xa0\x80", NULL};
    int i = 0;
    for (; i < 256; i++) words[i] = malloc(1), words[i][0] = (char)i, lens[i] = 1;
    for (int k = 0; pieces[k] && i < N_VOCAB - 2; k++, i++) words[i] = strdup(pieces[k]), lens[i] = strlen(pieces[k]);
    int32_t stop = N_VOCAB - 1;
    if (gram_vocab_new(N_VOCAB, (const char *const *)words, lens, &stop, 1, &vocab, NULL, 0)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab) make_vocab();
    cJSON *schema = cJSON_ParseWithLength((const char *)data, size);
    if (!schema) return 0;
    gram_grammar *g = NULL;
    char err[256] = "";
    int rc = gram_from_schema(schema, &g, err, sizeof err);
    cJSON_Delete(schema);
    if (rc) {
        if ((rc != NB_ENOTSUP && rc != NB_EINVAL && rc != NB_ENOMEM) || !err[0] || g) abort();
        return 0;
    }
    if (!g) abort();
    (void)gram_accepts(g, (const char *)data, size);
    gram_matcher *m;
    if (gram_matcher_new(g, vocab, &m, err, sizeof err)) {
        if (!err[0]) abort();
        gram_free(g);
        return 0;
    }
    uint32_t bits[(N_VOCAB + 31) / 32];
    char text[48 * 8];
    size_t n_text = 0;
    for (size_t step = 0; step < 48 && !gram_matcher_done(m); step++) {
        if (gram_matcher_mask(m, bits)) break; /* out of memory */
        int32_t allowed[N_VOCAB], n = 0, refused = -1;
        for (int32_t id = 0; id < N_VOCAB; id++) {
            if (bits[id >> 5] >> (id & 31) & 1) allowed[n++] = id;
            else if (refused < 0 && id < N_VOCAB - 1 && words[id]) refused = id;
        }
        if (!n) abort(); /* every byte is a token: a value not yet complete can always go on */
        if (refused >= 0 && gram_matcher_accept(m, refused) != NB_EINVAL) abort();
        int32_t pick = allowed[data[step % size] % (uint32_t)n];
        if (gram_matcher_accept(m, pick)) abort();
        if (pick < N_VOCAB - 1) memcpy(text + n_text, words[pick], lens[pick]), n_text += lens[pick];
    }
    if (gram_matcher_done(m) && !gram_accepts(g, text, n_text)) abort();
    gram_matcher_free(m);
    gram_free(g);
    return 0;
}
