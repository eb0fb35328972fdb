/* tokenizer.h — text <-> token ids for byte-level BPE vocabularies ("gpt2"
 * model in GGUF terms), as llama.cpp runs them for the Qwen pre-tokenizers.
 *
 * Encoding is five steps, each exact with respect to Hugging Face (and to
 * llama.cpp where it normalizes alike, see below):
 *   1. control and user-defined tokens are cut out of the raw text whole,
 *      longest token first (control tokens only when parse_special is set);
 *   2. each remaining fragment is normalized to NFC when the tokenizer says
 *      so (the rule is below);
 *   3. each fragment is split into words by the pre-tokenizer's regex,
 *      implemented as a hand-written scanner over code points whose Unicode
 *      categories come from libutf8proc;
 *   4. each word's bytes become the byte tokens of the GPT-2 alphabet;
 *   5. adjacent pairs are merged lowest merge rank first (leftmost on ties).
 * Merge ranks are keyed by the pair of token ids, so encoding never hashes a
 * string.
 *
 * Normalization.  tokenizer.json names the normalizer Hugging Face runs
 * before the split; every Qwen tokenizer.json says {"type": "NFC"}.  GGUF has
 * no standard key for it, so the rule is:
 *   - tokenizer.ggml.normalizer ("nfc" or "none"), which our converter writes
 *     from tokenizer.json, is obeyed when present;
 *   - without it the pre-tokenizer decides: qwen2 and qwen35 mean NFC.  A
 *     GGUF made by llama.cpp has no such key, and llama.cpp normalizes
 *     nothing; we follow the full model's tokenizer, which is Hugging Face's,
 *     so decomposed input ("e" + U+0301) gets the ids transformers gives it.
 * NFC is canonical only: compatibility characters (U+FB01 "ﬁ", "²", full-
 * width forms) stay as they are.  As in Hugging Face, added tokens are cut
 * out of the raw text first and each fragment between them is normalized on
 * its own (Qwen's added tokens are all "normalized": false; one marked
 * "normalized": true would be matched after NFC there and is matched on the
 * raw text here, which differs only where NFC changes the text around it: a
 * decomposed spelling of the token, or a mark that fuses with its edge).  Invalid UTF-8 is kept byte for byte: each valid
 * run around it is normalized on its own.  So decode(encode(s)) is NFC(s)
 * (fragment by fragment, see tok_normalize), and s itself for text already
 * in NFC.
 *
 * Decoding goes through a streaming decoder that emits only complete UTF-8
 * characters, so a chat front end can print as tokens arrive.
 *
 * All functions return 0 or a negative NB_E* code (core/util/err.h) and fill
 * err with a message naming what is wrong.  A loaded tokenizer is immutable:
 * any number of threads may encode and decode with it at once. */
#ifndef NB_TOKENIZER_H
#define NB_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"

typedef struct tok_tokenizer tok_tokenizer;

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,      /* <|im_end|> ...: matched only with parse_special */
    TOK_TYPE_USER_DEFINED = 4, /* <think> ...: always matched, text is literal */
    TOK_TYPE_UNUSED = 5,       /* [PAD123] placeholders */
    TOK_TYPE_BYTE = 6,
};

/* An in-memory vocabulary, as the GGUF keys hold it.  Nothing is kept: the
 * loader copies what it needs. */
struct tok_desc {
    const char *model;          /* must be "gpt2" */
    const char *pre;            /* "qwen2" or "qwen35" */
    const char *const *tokens;  /* n_tokens strings, in the byte-level alphabet for normal tokens */
    uint32_t n_tokens;
    const int32_t *types;       /* n_tokens enum tok_type values, or NULL for all normal */
    const char *const *merges;  /* n_merges "left right" strings, rank = index */
    uint32_t n_merges;
    int32_t bos_id, eos_id, pad_id; /* -1 when absent */
    bool add_bos;
    const char *normalizer;     /* "nfc", "none", or NULL for the pre-tokenizer's default (nfc) */
};

/* Pre-tokenizer names this tokenizer implements, for error messages: "qwen2, qwen35". */
const char *tok_supported_pre(void);
bool tok_pre_is_supported(const char *name);

int tok_load_desc(const struct tok_desc *d, tok_tokenizer **out, char *err, size_t errlen);
/* Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,
 * eos_token_id,padding_token_id,add_bos_token,normalizer} from an open GGUF. */
int tok_load_gguf(const gguf_file *g, tok_tokenizer **out, char *err, size_t errlen);
/* Builds the tokenizer straight from a Hugging Face folder (tokenizer.json and
 * friends), through the same arrays tok_hf_write_gguf_keys would write. */
int tok_load_hf(const char *dir, const char *pre, tok_tokenizer **out, char *err, size_t errlen);
void tok_free(tok_tokenizer *t);

/* Encodes len bytes of text (UTF-8; NUL bytes allowed; invalid bytes are kept
 * and encoded as their byte tokens).  Two-pass contract, like snprintf: the
 * first min(cap, total) ids are written to ids and *n_ids is set to the total;
 * when *n_ids > cap, call again with a buffer of *n_ids (ids may be NULL when
 * cap is 0).  Every id covers at least one byte of the normalized text, and
 * NFC makes a text at most 3 times longer in UTF-8 (UAX #15), so 3 * len ids
 * are always enough (len without normalization).  No BOS is added: callers
 * add tok_bos_id() when tok_add_bos(). */
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t *ids,
               size_t cap, size_t *n_ids, char *err, size_t errlen);
/* tok_encode into a malloc'ed array of exactly the ids' count (the two
 * passes done here): *ids (free() it) and *n_ids.  On error *ids is NULL and
 * the message is in err (NB_ENOMEM: "out of memory"). */
int tok_encode_alloc(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                     size_t *n_ids, char *err, size_t errlen);

/* The bytes tok_encode's ids stand for: the special tokens it would cut out
 * (same parse_special), as they are, and the text between them normalized.
 * The concatenated tok_token_bytes of tok_encode's ids are exactly these
 * bytes (for a vocabulary with all 256 byte tokens).  *out is malloc'ed
 * (free() it; NUL-terminated, *out_len excludes the NUL). */
int tok_normalize(const tok_tokenizer *t, const char *text, size_t len, bool parse_special, char **out,
                  size_t *out_len, char *err, size_t errlen);

uint32_t tok_vocab_size(const tok_tokenizer *t);
const char *tok_pre_name(const tok_tokenizer *t);
const char *tok_normalizer_name(const tok_tokenizer *t); /* "nfc" or "none" */
/* The token's text as stored in the vocabulary (byte-level alphabet for
 * normal tokens); NULL when id is out of range. */
const char *tok_token_text(const tok_tokenizer *t, int32_t id);
enum tok_type tok_token_type(const tok_tokenizer *t, int32_t id); /* TOK_TYPE_UNDEFINED if out of range */
/* The bytes a token stands for (normal: byte-level decoded; control and
 * user-defined: their text; unused: nothing).  Points into the tokenizer;
 * NULL for an id out of range. */
const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
/* Id of the token whose vocabulary text is exactly text, or -1. */
int32_t tok_id_of(const tok_tokenizer *t, const char *text);

int32_t tok_bos_id(const tok_tokenizer *t); /* -1 when absent */
int32_t tok_eos_id(const tok_tokenizer *t);
int32_t tok_pad_id(const tok_tokenizer *t);
int32_t tok_im_start_id(const tok_tokenizer *t); /* <|im_start|>, -1 when absent */
int32_t tok_im_end_id(const tok_tokenizer *t);   /* <|im_end|>, -1 when absent */
bool tok_add_bos(const tok_tokenizer *t);

/* ---------- streaming decoder ---------- */

typedef struct tok_decoder tok_decoder;

/* render_special: control tokens produce their text (else nothing). */
int tok_decoder_new(const tok_tokenizer *t, bool render_special, tok_decoder **out, char *err, size_t errlen);
void tok_decoder_free(tok_decoder *d);
/* Takes one id and returns the complete UTF-8 characters now available
 * (possibly none); an incomplete multi-byte tail is held for the next call.
 * Output is always valid UTF-8: a byte sequence that can never complete a
 * character becomes U+FFFD.  *text points into the decoder, valid until the
 * next call. */
int tok_decoder_push(tok_decoder *d, int32_t id, const char **text, size_t *len, char *err, size_t errlen);
/* End of stream: a held incomplete tail comes out as U+FFFD; the decoder is
 * then ready for a new stream. */
void tok_decoder_flush(tok_decoder *d, const char **text, size_t *len);

/* ---------- Hugging Face tokenizer.json -> GGUF metadata ---------- */

/* The tokenizer.ggml.* arrays exactly as llama.cpp's converter derives them
 * for a gpt2-type (byte-level BPE) tokenizer.json: tokens ordered by id, gaps
 * filled with "[PAD{id}]" (type unused), added tokens control (special, or
 * spelled like <|...|>) or user-defined, merges as "a b" strings. */
struct tok_hf_vocab {
    uint32_t n_tokens;
    char **tokens;
    int32_t *types;
    uint32_t n_merges;
    char **merges;
    /* special ids, -1 when unset: bos eos unk sep pad cls mask */
    int32_t special_ids[7];
    /* add_bos_token, add_eos_token, ...: -1 unset, 0 false, 1 true (same order) */
    int8_t add_special[7];
    const char *normalizer; /* "nfc" or "none" (a static string), from tokenizer.json's normalizer */
    char *chat_template; /* NULL when absent */
    uint32_t n_named_templates; /* chat_template given as a list of {name, template} */
    char **template_names;
    char **templates;
};

enum { TOK_SP_BOS, TOK_SP_EOS, TOK_SP_UNK, TOK_SP_SEP, TOK_SP_PAD, TOK_SP_CLS, TOK_SP_MASK, TOK_SP_COUNT };

/* Reads dir/tokenizer.json (required), dir/tokenizer_config.json,
 * dir/config.json (vocab_size, *_token_id) and dir/chat_template.jinja.
 * tokenizer.json's normalizer must be NFC or none (null, absent, or a
 * Sequence of those): any other would change the ids, so it is refused. */
int tok_hf_vocab_read(const char *dir, struct tok_hf_vocab *v, char *err, size_t errlen);
/* The same from the text of a tokenizer.json alone (len bytes, no NUL
 * needed): no config files, so the vocabulary size is the largest id + 1 and
 * no special ids or chat template are set. */
int tok_hf_vocab_parse(const char *json, size_t len, struct tok_hf_vocab *v, char *err, size_t errlen);
void tok_hf_vocab_free(struct tok_hf_vocab *v);
/* Writes tokenizer.ggml.* (model "gpt2", pre = pre_name, normalizer) and
 * tokenizer.chat_template into a GGUF writer, from the files in dir. */
int tok_hf_write_gguf_keys(gguf_writer *w, const char *dir, const char *pre_name, char *err, size_t errlen);

#endif
