/* grammar.h — structured output: a JSON schema → a grammar over bytes → a
 * mask over the vocabulary for each sampling step.
 *
 * Three objects, each made once where it is cheapest:
 *   - gram_grammar: a context-free grammar over bytes (rules of alternatives
 *     of byte sets and rule references), compiled from a JSON schema
 *     (schema.c) — or "any JSON object" for response_format json_object.
 *     Immutable; the HTTP thread compiles it, so a schema the compiler does
 *     not support is a 400 before the request is queued.
 *   - gram_vocab: every token's bytes in one trie, built once per tokenizer
 *     (vocab.c).  Control, user-defined and unused tokens are not in it:
 *     only the stop ids, once the value is complete, are ever allowed of them.
 *   - gram_matcher: one generation's position in the grammar (matcher.c).  A
 *     position is a set of parse stacks; the matcher interns each set as a
 *     state of a lazily built DFA over bytes, so a byte already seen from a
 *     state costs one table lookup.  The mask of a state walks the trie once,
 *     skipping a whole subtree at the first byte the grammar refuses; masks
 *     are cached per state (inside a string the state after every token is
 *     the same one).
 *
 * The grammar a schema compiles to is documented in docs/API.md ("Structured
 * output"): compact or pretty-printed JSON (whitespace runs of at most
 * GRAM_MAX_WS bytes), properties in the schema's order, no property the
 * schema does not name, numbers of at most GRAM_MAX_DIGITS digits a part.
 * Both bounds make every generation end: after the value only a little
 * whitespace and a stop id are allowed. */
#ifndef NB_GRAMMAR_H
#define NB_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#define GRAM_MAX_WS 16       /* bytes of whitespace between two tokens of JSON */
#define GRAM_MAX_DIGITS 16   /* digits of an integer part, of a fraction (exponent: 3) */
#define GRAM_MAX_COUNT 1024  /* the largest minItems/maxItems/minLength/maxLength compiled */
#define GRAM_ANY_DEPTH 6     /* nesting of a value the schema leaves free ("any JSON") */

typedef struct gram_grammar gram_grammar;
typedef struct gram_vocab gram_vocab;
typedef struct gram_matcher gram_matcher;
typedef struct tok_tokenizer tok_tokenizer;

/* ---------- grammars (schema.c) ---------- */

/* A JSON schema → its grammar.  0, NB_ENOTSUP with a message naming the
 * keyword the compiler does not implement and where ("'pattern' at
 * /properties/name is not supported"), NB_EINVAL for a schema that is not
 * one (a type that is not a JSON type, required naming no property), or
 * NB_ENOMEM. */
int gram_from_schema(const cJSON *schema, gram_grammar **out, char *err, size_t errlen);
/* Any JSON object (response_format json_object). */
int gram_any_object(gram_grammar **out, char *err, size_t errlen);
void gram_free(gram_grammar *g);
/* Rules and elements, for tests and the benchmark's table. */
void gram_size(const gram_grammar *g, uint32_t *rules, uint32_t *elements);

/* ---------- the vocabulary's trie (vocab.c) ---------- */

/* n_vocab ids (the model's row width); bytes[i] / lens[i] the bytes of id i,
 * bytes[i] NULL for an id that is never generated as text (special, unused,
 * beyond the tokenizer).  stop ids: allowed only where the value is complete. */
int gram_vocab_new(int32_t n_vocab, const char *const *bytes, const size_t *lens, const int32_t *stop_ids, int n_stop,
                   gram_vocab **out, char *err, size_t errlen);
/* The same from a tokenizer: normal and byte tokens are text, the others not. */
int gram_vocab_from_tokenizer(const tok_tokenizer *tok, int32_t n_vocab, const int32_t *stop_ids, int n_stop,
                              gram_vocab **out, char *err, size_t errlen);
void gram_vocab_free(gram_vocab *v);
int32_t gram_vocab_size(const gram_vocab *v);
uint32_t gram_vocab_trie_nodes(const gram_vocab *v);

/* ---------- one generation (matcher.c) ---------- */

/* Both are borrowed and must outlive the matcher. */
int gram_matcher_new(const gram_grammar *g, const gram_vocab *v, gram_matcher **out, char *err, size_t errlen);
void gram_matcher_free(gram_matcher *m);
/* Back to the start of the value. */
void gram_matcher_reset(gram_matcher *m);
/* bits (n_vocab bits, (n_vocab + 31) / 32 words): bit i set when token i may
 * come next.  0, or NB_ENOMEM.  After a stop id nothing is allowed. */
int gram_matcher_mask(gram_matcher *m, uint32_t *bits);
/* Advances by a token.  0, or NB_EINVAL when the grammar refuses it (the
 * matcher is then unchanged). */
int gram_matcher_accept(gram_matcher *m, int32_t id);
/* Advances by bytes (tests; the matcher is unchanged on refusal). */
int gram_matcher_accept_bytes(gram_matcher *m, const char *s, size_t n);
/* The bytes so far are a complete value (a stop id may come). */
bool gram_matcher_complete(const gram_matcher *m);
/* Whether these bytes may come next (the matcher does not move): the
 * token-by-token check the mask's trie walk is tested against. */
bool gram_matcher_allows_bytes(gram_matcher *m, const char *s, size_t n);
/* A stop id was accepted. */
bool gram_matcher_done(const gram_matcher *m);
/* DFA states built so far, and masks made by a walk of the trie (not a
 * cached copy): the benchmark's table. */
uint32_t gram_matcher_states(const gram_matcher *m);
uint64_t gram_matcher_walks(const gram_matcher *m);

/* A grammar accepts s as a whole value (tests and the fuzzer, no vocabulary). */
bool gram_accepts(const gram_grammar *g, const char *s, size_t n);

#endif
