/* fuzz_hf_tokenizer_json.c — libFuzzer target for the Hugging Face
 * tokenizer.json reader (tok_hf_vocab_parse) and, behind it, the vocabulary
 * loader (tok_load_desc).
 *
 * Any input either fails with a message or gives a vocabulary whose arrays
 * are whole: every id has a token text and a known type, every merge a text
 * (whether it reads "left right" is the loader's check), the normalizer is
 * one we run.  A vocabulary small enough to load quickly
 * is then loaded as a qwen35 tokenizer with that normalizer; if it loads
 * (or fails, again with a message), a few fixed texts are encoded and
 * decoded, and every id must be in range.  libFuzzer hands us an exact-size
 * heap copy without a NUL, so AddressSanitizer sees any overread. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer/tokenizer.h"

/* Loading builds hash tables over every token: keep each run fast (the
 * reader's own limit, checked by the parse, is far larger). */
enum { MAX_LOADED_TOKENS = 1 << 16 };

static void check_vocab(const struct tok_hf_vocab *v)
{
    if (v->n_tokens == 0 || !v->tokens || !v->types) abort();
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (!v->tokens[i]) abort();
        (void)strlen(v->tokens[i]);
        if (v->types[i] < TOK_TYPE_NORMAL || v->types[i] > TOK_TYPE_UNUSED) abort();
    }
    for (uint32_t i = 0; i < v->n_merges; i++) { /* "left right" is checked by the loader, not the reader */
        if (!v->merges[i]) abort();
        (void)strlen(v->merges[i]);
    }
    if (!v->normalizer || (strcmp(v->normalizer, "nfc") && strcmp(v->normalizer, "none"))) abort();
    for (int k = 0; k < TOK_SP_COUNT; k++)
        if (v->special_ids[k] != -1 || v->add_special[k] != -1) abort(); /* no config files: nothing set */
    if (v->chat_template || v->n_named_templates) abort();
}

static void exercise(const tok_tokenizer *t)
{
    static const char *const texts[] = {
        "Hello world", "e\xCC\x81 <|im_end|> \xF0\x9F\x98\x80", "a b  c\n\n", "\xFF\xC3", "",
    };
    tok_decoder *d;
    if (tok_decoder_new(t, true, &d, NULL, 0)) abort();
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        size_t len = strlen(texts[k]), n, plen;
        int32_t ids[64];
        char err[256];
        if (tok_encode(t, texts[k], len, true, ids, 64, &n, err, sizeof err) || n > 3 * len) abort();
        const char *piece;
        for (size_t i = 0; i < n; i++)
            if (tok_decoder_push(d, ids[i], &piece, &plen, err, sizeof err)) abort(); /* id out of range */
        tok_decoder_flush(d, &piece, &plen);
    }
    tok_decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tok_hf_vocab v;
    char err[512] = "";
    if (tok_hf_vocab_parse((const char *)data, size, &v, err, sizeof err)) {
        if (!err[0]) abort(); /* every error explains itself */
        return 0;
    }
    check_vocab(&v);
    if (v.n_tokens <= MAX_LOADED_TOKENS) {
        struct tok_desc desc = {
            .model = "gpt2", .pre = "qwen35", .normalizer = v.normalizer,
            .tokens = (const char *const *)v.tokens, .n_tokens = v.n_tokens, .types = v.types,
            .merges = (const char *const *)v.merges, .n_merges = v.n_merges, .bos_id = -1, .eos_id = -1, .pad_id = -1,
        };
        tok_tokenizer *t;
        err[0] = '\0';
        if (tok_load_desc(&desc, &t, err, sizeof err) == 0) {
            exercise(t);
            tok_free(t);
        } else if (!err[0]) {
            abort();
        }
    }
    tok_hf_vocab_free(&v);
    return 0;
}
