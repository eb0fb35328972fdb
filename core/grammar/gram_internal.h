/* gram_internal.h — the grammar's representation, shared by the files of
 * core/grammar/ (not part of grammar.h).
 *
 * A grammar is rules; a rule is alternatives; an alternative is a sequence of
 * elements ending with G_END.  All alternatives lie in one flat element
 * array, so a parse stack's frame is just an element index (the next thing
 * to match) and the frame below it.  A byte set is 256 bits. */
#ifndef NB_GRAM_INTERNAL_H
#define NB_GRAM_INTERNAL_H

#include "core/grammar/grammar.h"

enum { G_END = 0, G_SET = 1, G_REF = 2 };

struct gram_elem {
    uint32_t kind : 2;
    uint32_t arg : 30;  /* G_SET: byte set index; G_REF: rule */
};

struct gram_grammar {
    struct gram_elem *el;
    uint32_t n_el;
    uint32_t *alt_start; /* element index of each alternative, grouped by rule */
    uint32_t *rule_alt;  /* n_rules + 1: the alternatives of rule r are alt_start[rule_alt[r] .. rule_alt[r + 1]) */
    uint32_t n_rules;
    uint64_t (*sets)[4];
    uint32_t n_sets;
    uint32_t root;
};

static inline bool gram_set_has(const uint64_t set[4], unsigned char b) { return set[b >> 6] >> (b & 63) & 1; }

/* A trie of tokens (vocab.c), in preorder: node 0 is the root (the empty
 * prefix); node i extends its parent (the last node before it of depth
 * depth[i] - 1) by byte[i]; its subtree is i .. skip[i] - 1, so a walk that
 * finds byte[i] refused jumps to skip[i]; the ids spelled by node i are
 * toks[tok_off[i] .. tok_off[i + 1]); node_tok[i] is the first of them, or
 * n_vocab when none (a bit past the vocabulary, so the walk sets a bit at
 * every node without a branch on whether a token ends there). */
struct gram_trie {
    uint32_t n_nodes;
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *skip, *tok_off;
    int32_t *toks, *node_tok;
    uint16_t max_depth;
};

/* The plain bytes: printable ASCII but '"' and '\\' — one character each
 * of a JSON string's body. */
static inline bool gram_plain(unsigned char b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }

/* The vocabulary (vocab.c): every text token in `all`; a token is "text"
 * when its bytes are whole characters, each a plain byte or a valid UTF-8
 * sequence of 2-4 bytes; the other tokens are also in `impure`, and the text
 * ones by their count of characters: text_upto[L] (words words each) = those
 * of at most L characters.  In a state where every character leads to the
 * same next state (a string's body), a text token's fate is its count of
 * characters: the mask is text_upto[L] and a walk of the smaller impure
 * trie (matcher.c). */
struct gram_vocab {
    int32_t n_vocab;
    struct gram_trie all, impure;
    uint32_t *text_upto; /* (max_text + 1) × words */
    uint16_t max_text;
    size_t words;
    int32_t stop[8];
    int n_stop;
    char *blob;          /* every text token's bytes, for gram_matcher_accept */
    uint64_t *off;       /* n_vocab + 1 offsets into blob */
    uint8_t *is_text;    /* n_vocab: 1 when the token is in the trie */
};

/* The length of the valid UTF-8 character of 2-4 bytes at s (n bytes
 * left), or 0 (vocab.c). */
size_t gram_utf8_multi(const unsigned char *s, size_t n);

/* ---------- the builder (build.c) ---------- */

struct gram_build;
struct gram_build *gb_new(void);
void gb_free(struct gram_build *b);
bool gb_failed(const struct gram_build *b);  /* out of memory, or over the size limit */
uint32_t gb_rule(struct gram_build *b);       /* a new rule, no alternatives yet */
uint32_t gb_alt(struct gram_build *b, uint32_t rule); /* a new (empty = epsilon) alternative of rule */
void gb_set(struct gram_build *b, uint32_t alt, const uint64_t set[4]);
void gb_range(struct gram_build *b, uint32_t alt, unsigned lo, unsigned hi); /* one byte in [lo, hi] */
void gb_lit(struct gram_build *b, uint32_t alt, const char *s, size_t n);    /* these bytes in order */
void gb_ref(struct gram_build *b, uint32_t alt, uint32_t rule);
/* The grammar whose start is rule root (b is consumed either way). */
int gb_finish(struct gram_build *b, uint32_t root, gram_grammar **out, char *err, size_t errlen);

#endif
