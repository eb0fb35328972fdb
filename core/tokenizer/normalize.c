/* normalize.c — Unicode NFC before the split, as tokenizer.json's
 * {"type": "NFC"} normalizer does it in Hugging Face tokenizers.
 *
 * The one idea: NFC is only ever needed around code points that can change
 * or move under it, and almost all text has few.  Most code points are
 * "inert" (a cheap range test, see cp_is_inert): NFC never reaches across
 * one, so a text is cut before each of them, and only the short stretches
 * that hold something else go through libutf8proc (canonical decomposition
 * and reordering, then canonical composition that respects the composition
 * exclusions: UTF8PROC_STABLE | UTF8PROC_COMPOSE, what utf8proc_NFC does).
 * A text with no such stretch is not even copied.
 *
 * Input need not be valid UTF-8 (tok_encode keeps invalid bytes as their
 * byte tokens).  An invalid byte is copied as it is and cuts the text like an
 * inert code point: that is exactly NFC of the text with each invalid byte
 * read as a starter that composes with nothing (as U+FFFD would be), which
 * blocks both reordering and composition across it.
 *
 * U+11A7 is cut out the same way, for a bug in the libutf8proc we build with
 * (2.8; fixed upstream by JuliaStrings/utf8proc#317 in late 2025): it
 * composes an LV syllable with U+11A7 as if that were a trailing consonant,
 * which swallows the U+11A7.  Unicode's
 * trailing consonants start at U+11A8; U+11A7 is a starter that composes
 * with nothing, so cutting the text there is exact too. */
#include <utf8proc.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"

#include <stdlib.h>
#include <string.h>

/* A code point with NFC_Quick_Check = Yes and canonical combining class 0:
 * it never reorders and never joins a character before it, so NFC of a text
 * is NFC of the pieces cut before each such code point, and a piece that is
 * that code point alone is already in NFC (UAX #15's quick check and stable
 * code points).  Only a few dense ranges are listed; anything else takes the
 * exact path.  (Many of them, like 'e' or U+304B, can be the first half of a
 * composition: that happens only with a second half after them, which is
 * never inert and is normalized together with them.)  The unit tests check
 * every listed code point against libutf8proc's tables. */
static bool cp_is_inert(int32_t cp)
{
    if (cp < 0x300) return true;                 /* ASCII, Latin-1, Latin Extended-A/B, IPA, spacing modifiers */
    if (cp < 0x2010) return (cp >= 0x400 && cp <= 0x482) || (cp >= 0x48A && cp <= 0x52F); /* Cyrillic letters */
    if (cp < 0x3000)
        return cp <= 0x2027 || (cp >= 0x2030 && cp <= 0x205E) /* dashes, quotes, bullets */
               || (cp >= 0x2190 && cp <= 0x2328) || (cp >= 0x232B && cp <= 0x2ADB) /* arrows, math, */
               || (cp >= 0x2ADD && cp <= 0x2BFF);  /* box drawing, shapes, dingbats: not U+2329/232A/2ADC */
    if (cp < 0xA000)
        return (cp <= 0x3029) || (cp >= 0x3030 && cp <= 0x303F) /* CJK punctuation, not the tone marks U+302A-F */
               || (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) /* kana, not U+3099/309A */
               || (cp >= 0x4E00);                                  /* CJK Unified Ideographs */
    return (cp >= 0xAC00 && cp <= 0xD7A3)     /* Hangul syllables (an LV + T pair is caught by the T) */
           || (cp >= 0xFF01 && cp <= 0xFF60)  /* full-width forms (only NFKC folds them) */
           || (cp >= 0x1F300 && cp <= 0x1FAFF); /* emoji and their skin-tone modifiers */
}

/* A code point that ends any stretch NFC looks at and is copied as it is: an
 * invalid byte (cp < 0), or U+11A7 (see the top of the file). */
static bool cp_is_blocker(int32_t cp) { return cp < 0 || cp == 0x11A7; }

bool tok_nfc_is_inert(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        if (s[i] < 0x80) { /* ASCII fast path: most text is mostly ASCII */
            i++;
            continue;
        }
        int32_t cp;
        i += tok_utf8_decode(s + i, len - i, &cp);
        if (!cp_is_blocker(cp) && !cp_is_inert(cp)) return false;
    }
    return true;
}

bool tok_nfc_copy(struct tok_nfc_buf *b, const void *s, size_t len)
{
    if (len == 0) return true; /* b->bytes may still be NULL: no pointer arithmetic on it */
    if (!tok_grow((void **)&b->bytes, &b->cap, b->len + len, 1)) return false;
    memcpy(b->bytes + b->len, s, len);
    b->len += len;
    return true;
}

/* NFC of a stretch of valid UTF-8 (no blocker in it), appended to b. */
static int nfc_stretch(struct tok_nfc_buf *b, const uint8_t *s, size_t len)
{
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    utf8proc_ssize_t n = utf8proc_decompose(s, (utf8proc_ssize_t)len, b->cps, (utf8proc_ssize_t)b->cps_cap, opt);
    if (n > (utf8proc_ssize_t)b->cps_cap) { /* told the size it needs: grow and decompose again */
        if (!tok_grow((void **)&b->cps, &b->cps_cap, (size_t)n, sizeof *b->cps)) return NB_ENOMEM;
        n = utf8proc_decompose(s, (utf8proc_ssize_t)len, b->cps, (utf8proc_ssize_t)b->cps_cap, opt);
    }
    if (n >= 0) n = utf8proc_normalize_utf32(b->cps, n, opt);
    /* The stretch was validated by tok_utf8_decode, which is as strict as
     * libutf8proc; a refusal here would mean the two disagree. */
    if (n < 0) return n == UTF8PROC_ERROR_NOMEM ? NB_ENOMEM : NB_EFORMAT;
    if (!tok_grow((void **)&b->bytes, &b->cap, b->len + 4 * (size_t)n, 1)) return NB_ENOMEM;
    for (utf8proc_ssize_t i = 0; i < n; i++) b->len += tok_utf8_encode((uint32_t)b->cps[i], (char *)b->bytes + b->len);
    return 0;
}

/* Everything is copied except the stretches around code points that are not
 * inert: such a stretch starts at the last cut before it (an inert code point
 * it may compose with, or just after a blocker) and ends at the next cut. */
int tok_nfc_append(struct tok_nfc_buf *b, const uint8_t *s, size_t len)
{
    size_t copied = 0, cut = 0; /* bytes already in b; the last place NFC cannot reach across */
    for (size_t i = 0; i < len;) {
        int32_t cp;
        size_t k = tok_utf8_decode(s + i, len - i, &cp);
        if (cp_is_blocker(cp) || cp_is_inert(cp)) {
            cut = cp_is_blocker(cp) ? i + k : i;
            i += k;
            continue;
        }
        size_t end = i + k;
        while (end < len) {
            k = tok_utf8_decode(s + end, len - end, &cp);
            if (cp_is_blocker(cp) || cp_is_inert(cp)) break;
            end += k;
        }
        if (!tok_nfc_copy(b, s + copied, cut - copied)) return NB_ENOMEM;
        int rc = nfc_stretch(b, s + cut, end - cut);
        if (rc) return rc;
        copied = cut = i = end;
    }
    return tok_nfc_copy(b, s + copied, len - copied) ? 0 : NB_ENOMEM;
}

void tok_nfc_buf_free(struct tok_nfc_buf *b)
{
    free(b->bytes);
    free(b->cps);
    memset(b, 0, sizeof *b);
}
