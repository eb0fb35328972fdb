/* tok_internal.h — what the files of core/tokenizer/ share; not a public
 * header (the unit tests include it to check the pre-split directly).
 *
 * The tokenizer is a handful of flat arrays built once at load: token texts
 * and decoded byte pieces in two arenas, an open-addressing table from text
 * to id (used at load and by tok_id_of), and an open-addressing table from a
 * pair of token ids to its merge rank and result, which is all the encoder's
 * hot loop consults. */
#ifndef NB_TOK_INTERNAL_H
#define NB_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/tokenizer/tokenizer.h"

enum tok_pre_kind {
    TOK_PRE_QWEN2,  /* letters \p{L}+, marks fall in the punctuation class */
    TOK_PRE_QWEN35, /* letters [\p{L}\p{M}]+, marks stay with their letters */
};

/* One merge: the pair (left id << 32 | right id), its rank, the merged id. */
struct tok_merge_slot {
    uint64_t pair; /* TOK_EMPTY_PAIR when the slot is free */
    uint32_t rank;
    int32_t merged;
};
#define TOK_EMPTY_PAIR UINT64_MAX

struct tok_tokenizer {
    enum tok_pre_kind pre;
    char pre_name[16];
    uint32_t n_tokens;

    char *text_arena;     /* NUL-terminated token texts */
    size_t *text_off;     /* n_tokens offsets into text_arena */
    uint8_t *types;       /* enum tok_type per token */
    char *piece_arena;    /* decoded bytes of every token, back to back */
    size_t *piece_off;    /* n_tokens + 1 offsets: piece i is [off[i], off[i+1]) */

    int32_t *text_slots;  /* text -> id table, -1 = free; size text_mask + 1 */
    uint32_t text_mask;
    struct tok_merge_slot *merge_slots; /* size merge_mask + 1 */
    uint32_t merge_mask;
    uint32_t n_merges;

    int32_t byte_id[256]; /* the token for each single byte, -1 if the vocab lacks it */
    int32_t *specials;    /* control / user-defined / unknown ids, longest text first */
    uint32_t n_specials;

    int32_t bos, eos, pad, im_start, im_end;
    bool add_bos;
    bool nfc; /* raw fragments are NFC-normalized before the split */
};

/* ---- byte-level alphabet (GPT-2): every byte is a printable code point ---- */

/* Code point standing for byte b. */
uint32_t tok_byte_to_cp(uint8_t b);
/* Byte a code point stands for, or -1 if it is not in the alphabet. */
int tok_cp_to_byte(uint32_t cp);

/* ---- UTF-8 ---- */

/* Decodes one code point at s[0..len) (len > 0).  Returns its length in
 * bytes; *cp is -1 for a byte that does not start a valid sequence (the
 * length is then 1).  Strict: no overlongs, surrogates or values > 0x10FFFF. */
size_t tok_utf8_decode(const uint8_t *s, size_t len, int32_t *cp);
/* Encodes cp (<= 0x10FFFF) into out (4 bytes room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* ---- pre-tokenizer ---- */

bool tok_pre_from_name(const char *name, enum tok_pre_kind *kind);
/* Length in bytes (> 0) of the word starting at s[pos] of a fragment s[0..len)
 * (pos < len), as the pre-tokenizer's regex would match it there. */
size_t tok_pretok_word(enum tok_pre_kind pre, const uint8_t *s, size_t len, size_t pos);

/* ---- normalization (normalize.c) ---- */

/* Scratch of the normalizer: the output bytes and a code point buffer. */
struct tok_nfc_buf {
    uint8_t *bytes;
    size_t len, cap;
    int32_t *cps;
    size_t cps_cap;
};

/* True when s[0..len) is certainly in NFC already (every code point is in
 * a range NFC never touches; invalid bytes count as inert). */
bool tok_nfc_is_inert(const uint8_t *s, size_t len);
/* Appends NFC(s[0..len)) to b: each maximal valid UTF-8 run normalized,
 * invalid bytes copied.  0, NB_ENOMEM, or NB_EFORMAT if libutf8proc refuses
 * a run tok_utf8_decode accepted (it should not). */
int tok_nfc_append(struct tok_nfc_buf *b, const uint8_t *s, size_t len);
/* Appends len bytes as they are; false when out of memory. */
bool tok_nfc_copy(struct tok_nfc_buf *b, const void *s, size_t len);
void tok_nfc_buf_free(struct tok_nfc_buf *b);

/* ---- scratch ---- */

/* Grows *p (elements of elem bytes, *cap of them) to hold need, doubling. */
bool tok_grow(void **p, size_t *cap, size_t need, size_t elem);

/* ---- lookups ---- */

int32_t tok_lookup_text(const tok_tokenizer *t, const char *text, size_t len);
const struct tok_merge_slot *tok_lookup_merge(const tok_tokenizer *t, int32_t left, int32_t right);

#endif
