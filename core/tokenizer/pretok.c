/* pretok.c — the pre-tokenizer: splits a text fragment into the words that
 * BPE then merges within, plus the UTF-8 and byte-level alphabet helpers.
 *
 * The Qwen split regex (qwen2; qwen35 reads [\p{L}\p{M}] where it says \p{L},
 * and adds \p{M} to the punctuation exclusion):
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 *
 * is not run as a regex: at each position the alternatives are tried in order
 * by a small hand-written scanner over code points, which reproduces the
 * regex's leftmost-alternative, greedy semantics (including the backtracking
 * consequences: `\s*[\r\n]+` ends at the last newline of a whitespace run,
 * `\s+(?!\S)` leaves the run's last space to the next word).  Categories come
 * from libutf8proc; \s is Unicode White_Space (Zs, Zl, Zp and the controls
 * U+0009..U+000D, U+0085).  A byte that is not valid UTF-8 counts as a
 * character of no category (like U+FFFD would, in the punctuation class). */
#include <utf8proc.h>

#include "core/tokenizer/tok_internal.h"

#include <string.h>

/* ---------- byte-level alphabet ---------- */

/* Bytes that are printable Latin-1 stand for themselves; the other 68 are
 * shifted, in byte order, to U+0100..U+0143. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 shifted bytes are 0x00..0x20, 0x7F..0xA0 and 0xAD, in that order. */
uint32_t tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256 + b;
    if (b <= 0xA0) return 256 + 33 + (b - 0x7F);
    return 256 + 67; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

/* ---------- UTF-8 ---------- */

size_t tok_utf8_decode(const uint8_t *s, size_t len, int32_t *cp)
{
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t n;
    uint32_t v, lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, v = b0 & 0x1F;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, v = b0 & 0x0F, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, v = b0 & 0x07, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else goto invalid;
    if (len < n || s[1] < lo || s[1] > hi) goto invalid;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) goto invalid;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = (int32_t)v;
    return n;
invalid:
    *cp = -1;
    return 1;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---------- character classes ---------- */

enum { CL_LETTER = 1, CL_MARK = 2, CL_NUMBER = 4, CL_SPACE = 8 };

static unsigned cp_class(int32_t cp)
{
    if (cp < 0) return 0;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return CL_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return CL_MARK;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return CL_NUMBER;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return CL_SPACE;
    case UTF8PROC_CATEGORY_CC: /* the White_Space controls */
        return (cp >= 0x09 && cp <= 0x0D) || cp == 0x85 ? CL_SPACE : 0;
    default:
        return 0;
    }
}

/* One character of the fragment: its code point (-1 invalid byte, -2 past the
 * end), class and byte length (0 past the end). */
struct ch {
    int32_t cp;
    unsigned cls;
    size_t n;
};

struct scan {
    const uint8_t *s;
    size_t len;
    unsigned word;  /* classes a word is made of: letters (+ marks for qwen35) */
    unsigned nopunct; /* classes excluded from the punctuation run */
};

static struct ch char_at(const struct scan *sc, size_t pos)
{
    struct ch c = { -2, 0, 0 };
    if (pos >= sc->len) return c;
    c.n = tok_utf8_decode(sc->s + pos, sc->len - pos, &c.cp);
    c.cls = cp_class(c.cp);
    return c;
}

static bool is_punct(const struct scan *sc, struct ch c) { return c.n > 0 && !(c.cls & sc->nopunct); }
static bool is_newline(struct ch c) { return c.cp == '\r' || c.cp == '\n'; }
static int32_t ascii_lower(int32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

/* End of the run of characters starting at pos whose class is in cls. */
static size_t run_of_class(const struct scan *sc, size_t pos, unsigned cls)
{
    for (struct ch c = char_at(sc, pos); c.n && (c.cls & cls); c = char_at(sc, pos)) pos += c.n;
    return pos;
}

static size_t run_of_punct(const struct scan *sc, size_t pos)
{
    for (struct ch c = char_at(sc, pos); is_punct(sc, c); c = char_at(sc, pos)) pos += c.n;
    return pos;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d): length of the match at pos, 0 if none. */
static size_t match_contraction(const struct scan *sc, size_t pos)
{
    if (sc->s[pos] != '\'') return 0;
    struct ch c1 = char_at(sc, pos + 1);
    int32_t a = ascii_lower(c1.cp);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + c1.n;
    if (a != 'r' && a != 'v' && a != 'l') return 0;
    int32_t b = ascii_lower(char_at(sc, pos + 1 + c1.n).cp);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* [^\r\n\p{L}\p{N}]?\p{L}+ (with the word class of the pre-tokenizer). */
static size_t match_word(const struct scan *sc, size_t pos, struct ch c)
{
    if (c.cls & sc->word) return run_of_class(sc, pos, sc->word) - pos;
    if (is_newline(c) || (c.cls & (CL_LETTER | CL_NUMBER))) return 0;
    if (!(char_at(sc, pos + c.n).cls & sc->word)) return 0;
    return run_of_class(sc, pos + c.n, sc->word) - pos;
}

/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
static size_t match_punct(const struct scan *sc, size_t pos, struct ch c)
{
    size_t p = pos;
    if (c.cp == ' ' && is_punct(sc, char_at(sc, pos + 1))) p++;
    else if (!is_punct(sc, c)) return 0;
    p = run_of_punct(sc, p);
    for (struct ch n = char_at(sc, p); is_newline(n); n = char_at(sc, p)) p += n.n;
    return p - pos;
}

/* \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t match_space(const struct scan *sc, size_t pos)
{
    size_t p = pos, last = pos, after_newline = 0, count = 0;
    for (struct ch c = char_at(sc, p); c.n && (c.cls & CL_SPACE); c = char_at(sc, p)) {
        last = p;
        p += c.n;
        count++;
        if (is_newline(c)) after_newline = p;
    }
    if (count == 0) return 0;
    if (after_newline) return after_newline - pos;
    /* A run followed by a non-space gives up its last space to that word. */
    if (count > 1 && p < sc->len) return last - pos;
    return p - pos;
}

size_t tok_pretok_word(enum tok_pre_kind pre, const uint8_t *s, size_t len, size_t pos)
{
    struct scan sc = { s, len, CL_LETTER, CL_LETTER | CL_NUMBER | CL_SPACE };
    if (pre == TOK_PRE_QWEN35) {
        sc.word = CL_LETTER | CL_MARK;
        sc.nopunct |= CL_MARK;
    }
    struct ch c = char_at(&sc, pos);
    size_t n;
    if ((n = match_contraction(&sc, pos))) return n;
    if ((n = match_word(&sc, pos, c))) return n;
    if (c.cls & CL_NUMBER) return c.n;
    if ((n = match_punct(&sc, pos, c))) return n;
    if ((n = match_space(&sc, pos))) return n;
    return c.n; /* not reached: every character is in one class above */
}

bool tok_pre_from_name(const char *name, enum tok_pre_kind *kind)
{
    if (!name) return false;
    if (!strcmp(name, "qwen2")) *kind = TOK_PRE_QWEN2;
    else if (!strcmp(name, "qwen35")) *kind = TOK_PRE_QWEN35;
    else return false;
    return true;
}

const char *tok_supported_pre(void) { return "qwen2, qwen35"; }

bool tok_pre_is_supported(const char *name)
{
    enum tok_pre_kind k;
    return tok_pre_from_name(name, &k);
}
