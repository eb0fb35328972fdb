/* decoder.c — streaming detokenizer: ids in, complete UTF-8 characters out.
 *
 * A byte-level token can end in the middle of a character (an emoji is often
 * split over two or three tokens), so printing each token's bytes as they
 * come would show broken characters.  The decoder appends each token's bytes
 * to the (at most 3-byte) incomplete tail left by the previous one, emits
 * every complete character, and holds the new incomplete tail back.  A
 * sequence that can never become a character (a stray continuation byte, a
 * lead byte followed by a non-continuation) comes out as one U+FFFD per
 * maximal ill-formed subpart, as Unicode recommends, so the output is always
 * valid UTF-8; for ids that encode valid text it is exactly that text. */
#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"

#include <stdlib.h>
#include <string.h>

struct tok_decoder {
    const tok_tokenizer *t;
    bool render_special;
    uint8_t held[4];
    size_t n_held;
    uint8_t *in;  /* held tail + the token's bytes */
    char *out;    /* room for 3 bytes per input byte (each may become U+FFFD) */
    size_t in_cap, out_len;
};

static const char replacement[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

int tok_decoder_new(const tok_tokenizer *t, bool render_special, tok_decoder **out, char *err, size_t errlen)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return nb_errf(err, errlen, NB_ENOMEM, "out of memory for a decoder");
    (*out)->t = t;
    (*out)->render_special = render_special;
    return 0;
}

void tok_decoder_free(tok_decoder *d)
{
    if (!d) return;
    free(d->in);
    free(d->out);
    free(d);
}

/* Number of bytes of the character a lead byte starts, 0 if it cannot start
 * one; *lo..*hi is the allowed range of the second byte. */
static size_t lead_length(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80, *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F; /* no surrogates */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F; /* nothing above U+10FFFF */
        return 4;
    }
    return 0;
}

static void put(tok_decoder *d, const void *p, size_t n)
{
    memcpy(d->out + d->out_len, p, n);
    d->out_len += n;
}

/* Emits the complete characters of s[0..n); returns how many trailing bytes
 * form a valid but incomplete prefix (to be held). */
static size_t emit_complete(tok_decoder *d, const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t lo, hi;
        size_t need = lead_length(s[i], &lo, &hi);
        if (need == 0) {
            put(d, replacement, 3);
            i++;
            continue;
        }
        size_t k = 1;
        while (k < need && i + k < n) {
            uint8_t b = s[i + k];
            bool ok = k == 1 ? b >= lo && b <= hi : (b & 0xC0) == 0x80;
            if (!ok) break;
            k++;
        }
        if (k == need) put(d, s + i, need);
        else if (i + k == n) return k; /* ran out of bytes: hold the prefix */
        else put(d, replacement, 3);   /* broken sequence: the bad byte starts anew */
        i += k;
    }
    return 0;
}

int tok_decoder_push(tok_decoder *d, int32_t id, const char **text, size_t *len, char *err, size_t errlen)
{
    *text = "";
    *len = 0;
    size_t plen;
    const char *piece = tok_token_bytes(d->t, id, &plen);
    if (!piece) return nb_errf(err, errlen, NB_EINVAL, "token id %d is out of range (vocabulary of %u)", id,
                               tok_vocab_size(d->t));
    if (!d->render_special && d->t->types[id] != TOK_TYPE_NORMAL && d->t->types[id] != TOK_TYPE_USER_DEFINED) plen = 0;
    size_t n = d->n_held + plen;
    if (n > d->in_cap) {
        uint8_t *in = realloc(d->in, n);
        char *out = in ? realloc(d->out, 3 * n) : NULL;
        if (in) d->in = in;
        if (!out) return nb_errf(err, errlen, NB_ENOMEM, "out of memory decoding token %d", id);
        d->out = out;
        d->in_cap = n;
    }
    if (n == 0) return 0;
    memcpy(d->in, d->held, d->n_held);
    memcpy(d->in + d->n_held, piece, plen);
    d->out_len = 0;
    size_t keep = emit_complete(d, d->in, n);
    memcpy(d->held, d->in + n - keep, keep);
    d->n_held = keep;
    *text = d->out;
    *len = d->out_len;
    return 0;
}

void tok_decoder_flush(tok_decoder *d, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (!d->n_held) return;
    d->n_held = 0;
    *text = replacement;
    *len = 3;
}
