/* test_tokenizer.c — the tokenizer's pieces that need no reference
 * implementation: the byte-level alphabet, the pre-split (hand-written
 * expected words for the tricky cases), merges on a tiny hand-made
 * vocabulary, special-token matching, NFC before the split (and the rule
 * that picks it), the two-pass encode contract, the streaming decoder on
 * characters split across tokens, and the Hugging Face -> GGUF metadata path.  Parity with an independent tokenizer on the real
 * Qwen vocabulary is tests/tools/test_tokenizer_parity.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

#include "core/tokenizer/tok_internal.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

/* ---------- helpers ---------- */

/* The words of s as the pre-tokenizer splits them, joined with '|'. */
static const char *split(enum tok_pre_kind pre, const char *s)
{
    static char out[512];
    size_t len = strlen(s), o = 0;
    for (size_t pos = 0; pos < len;) {
        size_t n = tok_pretok_word(pre, (const uint8_t *)s, len, pos);
        cr_assert(n > 0 && pos + n <= len, "word length %zu at %zu of \"%s\"", n, pos, s);
        if (pos) out[o++] = '|';
        memcpy(out + o, s + pos, n);
        o += n, pos += n;
    }
    out[o] = '\0';
    return out;
}

/* Plain text -> its byte-level spelling (" world" -> "Ġworld"); 4 rotating buffers. */
static const char *bl(const char *s)
{
    static char bufs[4][128];
    static int next;
    char *out = bufs[next++ & 3];
    size_t o = 0;
    for (const uint8_t *p = (const uint8_t *)s; *p; p++) o += tok_utf8_encode(tok_byte_to_cp(*p), out + o);
    out[o] = '\0';
    return out;
}

/* A vocabulary: the 256 byte tokens (id = byte value), then the given extra
 * tokens (plain text, written in the byte-level alphabet unless typed control
 * or user-defined), with merges given in plain text too. */
struct vocab {
    char *tokens[300];
    int32_t types[300];
    char *merges[32];
    uint32_t n, n_merges;
};

static void vocab_init(struct vocab *v)
{
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        v->tokens[b] = calloc(1, 5);
        tok_utf8_encode(tok_byte_to_cp((uint8_t)b), v->tokens[b]);
        v->types[b] = TOK_TYPE_NORMAL;
    }
    v->n = 256;
}

static int32_t vocab_add(struct vocab *v, const char *plain, int32_t type)
{
    v->tokens[v->n] = strdup(type == TOK_TYPE_NORMAL ? bl(plain) : plain);
    v->types[v->n] = type;
    return (int32_t)v->n++;
}

static void vocab_merge(struct vocab *v, const char *left, const char *right)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s %s", bl(left), bl(right));
    v->merges[v->n_merges++] = strdup(buf);
}

static struct tok_desc vocab_desc(struct vocab *v, const char *pre, const char *normalizer)
{
    return (struct tok_desc){ .model = "gpt2", .pre = pre, .tokens = (const char *const *)v->tokens, .n_tokens = v->n,
                              .types = v->types, .merges = (const char *const *)v->merges, .n_merges = v->n_merges,
                              .bos_id = -1, .eos_id = -1, .pad_id = -1, .normalizer = normalizer };
}

static tok_tokenizer *vocab_load_norm(struct vocab *v, const char *pre, const char *normalizer)
{
    struct tok_desc d = vocab_desc(v, pre, normalizer);
    char err[256];
    tok_tokenizer *t;
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), 0, "%s", err);
    return t;
}

static tok_tokenizer *vocab_load(struct vocab *v, const char *pre) { return vocab_load_norm(v, pre, NULL); }

static void vocab_free(struct vocab *v)
{
    for (uint32_t i = 0; i < v->n; i++) free(v->tokens[i]);
    for (uint32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
}

/* Encodes s; returns the ids as "a b c". */
static const char *enc(const tok_tokenizer *t, const char *s, size_t len, bool special)
{
    static char out[2048];
    int32_t ids[256];
    size_t n;
    char err[256];
    cr_assert_eq(tok_encode(t, s, len, special, ids, 256, &n, err, sizeof err), 0, "%s", err);
    cr_assert(n <= 256);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(out + o, sizeof out - o, i ? " %d" : "%d", ids[i]);
    out[o] = '\0';
    return out;
}

/* ---------- byte-level alphabet ---------- */

Test(tokenizer, byte_alphabet_round_trip)
{
    bool seen[512] = { false };
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)b);
        cr_assert(cp >= 0x21 && cp < 0x144, "byte %d -> U+%04X", b, cp);
        cr_assert(!seen[cp], "U+%04X used twice", cp);
        seen[cp] = true;
        cr_assert_eq(tok_cp_to_byte(cp), b, "U+%04X does not map back to %d", cp, b);
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xFF && b != 0xAD);
        cr_assert_eq(cp == (uint32_t)b, printable, "byte %d", b);
    }
    cr_assert_eq(tok_byte_to_cp(' '), 0x120);  /* Ġ */
    cr_assert_eq(tok_byte_to_cp('\n'), 0x10A); /* Ċ */
    cr_assert_eq(tok_byte_to_cp(0xAD), 0x143);
    cr_assert_eq(tok_cp_to_byte(0x20), -1);
    cr_assert_eq(tok_cp_to_byte(0x7F), -1);
    cr_assert_eq(tok_cp_to_byte(0x144), -1);
    cr_assert_eq(tok_cp_to_byte(0x4E00), -1);
}

static void check_decode(const char *s, size_t len, size_t want_n, int32_t want_cp)
{
    int32_t cp;
    cr_assert_eq(tok_utf8_decode((const uint8_t *)s, len, &cp), want_n, "length of %zu-byte input", len);
    cr_assert_eq(cp, want_cp);
}

Test(tokenizer, utf8_decode_is_strict)
{
    check_decode("\xC3\xA9", 2, 2, 0xE9);
    check_decode("\xF0\x9F\x98\x80", 4, 4, 0x1F600);
    check_decode("\xC0\xAF", 2, 1, -1);         /* overlong */
    check_decode("\xED\xA0\x80", 3, 1, -1);     /* surrogate */
    check_decode("\xF4\x90\x80\x80", 4, 1, -1); /* above U+10FFFF */
    check_decode("\xE6\x97", 2, 1, -1);         /* truncated */
    check_decode("\x80", 1, 1, -1);              /* stray continuation */
}

/* ---------- pre-split ---------- */

Test(tokenizer, split_words_and_spaces)
{
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "Hello world"), "Hello| world");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "  \n\n  x"), "  \n\n| | x");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a  b"), "a| | b");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a   !"), "a|  | !");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a  1"), "a| | |1");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "trailing   "), "trailing|   ");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a\r\n\r\nb"), "a|\r\n\r\n|b");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a \n b"), "a| \n| b");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "\tabc\t\tx"), "\tabc|\t|\tx");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a\xC2\xA0\xC2\xA0" "b"), "a|\xC2\xA0|\xC2\xA0" "b"); /* NBSP is \s */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a\xE2\x80\x8B" "b"), "a|\xE2\x80\x8B" "b");           /* ZWSP is not */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "\r\nabc"), "\r\n|abc");
}

Test(tokenizer, split_digits_contractions_punctuation)
{
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "123abc"), "1|2|3|abc");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "x\xC2\xB2+\xC2\xBD"), "x|\xC2\xB2|+|\xC2\xBD"); /* ² ½ are \p{N} */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "don't"), "don|'t");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "WE'LL I'M she'd"), "WE|'LL| I|'M| she|'d");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "'sabc"), "'s|abc");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "'x"), "'x");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "!!!abc"), "!!!|abc");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "!abc"), "!abc");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "hello!\n\nworld"), "hello|!\n\n|world");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "f(x) = y;"), "f|(x|)| =| y|;");
}

Test(tokenizer, split_cjk_marks_emoji)
{
    const char *jp = "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"; /* 日本語テキスト */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, jp), jp);
    /* e + U+0301: a mark is punctuation for qwen2, part of the word for qwen35 */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "e\xCC\x81"), "e|\xCC\x81");
    cr_assert_str_eq(split(TOK_PRE_QWEN35, "e\xCC\x81"), "e\xCC\x81");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "Cafe\xCC\x81 ok"), "Cafe|\xCC\x81| ok");
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "e\xCC\x81x"), "e|\xCC\x81x"); /* the mark prefixes the next word */
    cr_assert_str_eq(split(TOK_PRE_QWEN35, "e\xCC\x81x y"), "e\xCC\x81x| y");
    cr_assert_str_eq(split(TOK_PRE_QWEN35, "!\xCC\x81"), "!\xCC\x81");
    cr_assert_str_eq(split(TOK_PRE_QWEN35, "   \xCC\x81"), "  | \xCC\x81");
    /* I ❤️ NY: U+FE0F is a mark (Mn) */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "I \xE2\x9D\xA4\xEF\xB8\x8F NY"), "I| \xE2\x9D\xA4\xEF\xB8\x8F| NY");
    cr_assert_str_eq(split(TOK_PRE_QWEN35, "I \xE2\x9D\xA4\xEF\xB8\x8F NY"), "I| \xE2\x9D\xA4|\xEF\xB8\x8F| NY");
    /* 👨‍👩‍👧 and a flag: one symbol run */
    const char *family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
    cr_assert_str_eq(split(TOK_PRE_QWEN35, family), family);
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5!"), "a| \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5!");
    /* an invalid byte counts as a character of no category */
    cr_assert_str_eq(split(TOK_PRE_QWEN2, "a\xFF" "b\xFF"), "a|\xFF" "b|\xFF");
}

Test(tokenizer, pre_names)
{
    enum tok_pre_kind k;
    cr_assert(tok_pre_from_name("qwen2", &k) && k == TOK_PRE_QWEN2);
    cr_assert(tok_pre_from_name("qwen35", &k) && k == TOK_PRE_QWEN35);
    cr_assert(!tok_pre_is_supported("llama3"));
    cr_assert(!tok_pre_is_supported(NULL));
}

/* ---------- merges ---------- */

Test(tokenizer, merges_on_a_tiny_vocab)
{
    struct vocab v;
    vocab_init(&v);
    int32_t he = vocab_add(&v, "he", 1), ll = vocab_add(&v, "ll", 1), llo = vocab_add(&v, "llo", 1);
    int32_t hello = vocab_add(&v, "hello", 1), sw = vocab_add(&v, " w", 1), or = vocab_add(&v, "or", 1);
    int32_t swor = vocab_add(&v, " wor", 1), ld = vocab_add(&v, "ld", 1), sworld = vocab_add(&v, " world", 1);
    vocab_merge(&v, "h", "e"), vocab_merge(&v, "l", "l"), vocab_merge(&v, "ll", "o"), vocab_merge(&v, "he", "llo");
    vocab_merge(&v, " ", "w"), vocab_merge(&v, "o", "r"), vocab_merge(&v, " w", "or"), vocab_merge(&v, "l", "d");
    vocab_merge(&v, " wor", "ld");
    tok_tokenizer *t = vocab_load(&v, "qwen2");
    char want[64];
    snprintf(want, sizeof want, "%d %d", hello, sworld);
    cr_assert_str_eq(enc(t, "hello world", 11, true), want);
    snprintf(want, sizeof want, "%d %d", he, ll);
    cr_assert_str_eq(enc(t, "hell", 4, true), want);
    snprintf(want, sizeof want, "%d %d", ll, 'l'); /* equal ranks: the leftmost pair merges first */
    cr_assert_str_eq(enc(t, "lll", 3, true), want);
    snprintf(want, sizeof want, "%d %d %d", 'w', or, ld); /* "wor" is " w"+"or" only with the space */
    cr_assert_str_eq(enc(t, "world", 5, true), want);
    snprintf(want, sizeof want, "%d %d %d", swor, 'l', 'x');
    cr_assert_str_eq(enc(t, " worlx", 6, true), want);
    (void)llo, (void)sw;
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, merge_rank_decides_not_position)
{
    struct vocab v;
    vocab_init(&v);
    int32_t ab = vocab_add(&v, "ab", 1), bc = vocab_add(&v, "bc", 1);
    vocab_merge(&v, "b", "c"), vocab_merge(&v, "a", "b");
    tok_tokenizer *t = vocab_load(&v, "qwen2");
    char want[64];
    snprintf(want, sizeof want, "%d %d", 'a', bc);
    cr_assert_str_eq(enc(t, "abc", 3, true), want);
    snprintf(want, sizeof want, "%d %d", ab, 'd');
    cr_assert_str_eq(enc(t, "abd", 3, true), want);
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, long_word_and_invalid_bytes)
{
    struct vocab v;
    vocab_init(&v);
    int32_t aa = vocab_add(&v, "aa", 1);
    vocab_merge(&v, "a", "a");
    tok_tokenizer *t = vocab_load(&v, "qwen35");
    size_t n = 100001, got;
    char *text = malloc(n);
    memset(text, 'a', n);
    int32_t *ids = malloc(n * sizeof *ids);
    cr_assert_eq(tok_encode(t, text, n, true, ids, n, &got, NULL, 0), 0);
    cr_assert_eq(got, 50001);
    for (size_t i = 0; i < 50000; i++) cr_assert_eq(ids[i], aa, "id %zu", i);
    cr_assert_eq(ids[50000], 'a');
    /* bytes that are not UTF-8 still encode, as their byte tokens */
    const char bad[] = "x\xFF\xC3(\xE2\x82";
    cr_assert_eq(tok_encode(t, bad, sizeof bad - 1, true, ids, n, &got, NULL, 0), 0);
    cr_assert_eq(got, sizeof bad - 1);
    for (size_t i = 0; i < got; i++) cr_assert_eq(ids[i], (uint8_t)bad[i]);
    free(text);
    free(ids);
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, encode_two_pass_contract)
{
    struct vocab v;
    vocab_init(&v);
    tok_tokenizer *t = vocab_load(&v, "qwen2");
    int32_t ids[4] = { -7, -7, -7, -7 };
    size_t n;
    cr_assert_eq(tok_encode(t, "abcdef", 6, true, NULL, 0, &n, NULL, 0), 0);
    cr_assert_eq(n, 6);
    cr_assert_eq(tok_encode(t, "abcdef", 6, true, ids, 3, &n, NULL, 0), 0);
    cr_assert_eq(n, 6);
    cr_assert(ids[0] == 'a' && ids[1] == 'b' && ids[2] == 'c' && ids[3] == -7);
    cr_assert_eq(tok_encode(t, "", 0, true, ids, 4, &n, NULL, 0), 0);
    cr_assert_eq(n, 0);
    char err[128];
    cr_assert_eq(tok_encode(t, "ab", 2, true, NULL, 4, &n, err, sizeof err), NB_EINVAL);
    tok_free(t);
    vocab_free(&v);
}

/* tok_encode_alloc does both passes itself: a text NFC makes longer than
 * its first guess (U+0958 decomposes to two code points: 3 bytes → 6) comes
 * back whole, equal to the two-pass tok_encode. */
Test(tokenizer, encode_alloc_grows_past_nfc)
{
    struct vocab v;
    vocab_init(&v);
    tok_tokenizer *t = vocab_load_norm(&v, "qwen2", "nfc");
    char text[20 * 3 + 1] = "";
    for (int i = 0; i < 20; i++) strcat(text, "\xE0\xA5\x98");
    size_t len = strlen(text), n = 0, want = 0;
    cr_assert_eq(tok_encode(t, text, len, true, NULL, 0, &want, NULL, 0), 0);
    cr_assert_eq(want, 120, "NFC doubles the bytes: %zu ids", want);
    int32_t *ref = malloc(want * sizeof *ref), *ids = NULL;
    cr_assert_eq(tok_encode(t, text, len, true, ref, want, &want, NULL, 0), 0);
    char err[128];
    cr_assert_eq(tok_encode_alloc(t, text, len, true, &ids, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, want);
    cr_assert_arr_eq(ids, ref, n * sizeof *ids);
    free(ids);
    cr_assert_eq(tok_encode_alloc(t, "", 0, true, &ids, &n, err, sizeof err), 0);
    cr_assert_eq(n, 0);
    free(ids);
    free(ref);
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, load_errors_are_named)
{
    struct vocab v;
    vocab_init(&v);
    vocab_merge(&v, "x", "y"); /* "xy" is not a token */
    struct tok_desc d = vocab_desc(&v, "qwen2", NULL);
    char err[256];
    tok_tokenizer *t;
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "its result is not in the vocabulary"), "%s", err);
    d.n_merges = 0;
    d.pre = "llama-bpe";
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "unknown pre-tokenizer \"llama-bpe\"") && strstr(err, "qwen35"), "%s", err);
    d.pre = "qwen2", d.model = "llama";
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), NB_ENOTSUP);
    d.model = "gpt2", d.eos_id = 999;
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "eos_token_id 999"), "%s", err);
    d.eos_id = -1, d.normalizer = "nfkc";
    cr_assert_eq(tok_load_desc(&d, &t, err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "unknown normalizer \"nfkc\" (supported: nfc, none)"), "%s", err);
    vocab_free(&v);
}

/* ---------- special tokens ---------- */

Test(tokenizer, special_tokens_matched_whole)
{
    struct vocab v;
    vocab_init(&v);
    int32_t im_end = vocab_add(&v, "<|im_end|>", TOK_TYPE_CONTROL);
    int32_t think = vocab_add(&v, "<think>", TOK_TYPE_USER_DEFINED);
    int32_t pair = vocab_add(&v, "<|a|><|b|>", TOK_TYPE_CONTROL), a = vocab_add(&v, "<|a|>", TOK_TYPE_CONTROL);
    int32_t ab = vocab_add(&v, "AB", TOK_TYPE_CONTROL), bcd = vocab_add(&v, "BCD", TOK_TYPE_CONTROL);
    vocab_add(&v, "[PAD9]", TOK_TYPE_UNUSED);
    tok_tokenizer *t = vocab_load(&v, "qwen35");
    cr_assert_eq(tok_im_end_id(t), im_end);
    cr_assert_eq(tok_id_of(t, "<think>"), think);
    char want[128];
    snprintf(want, sizeof want, "%d %d %d", 'x', im_end, 'y');
    cr_assert_str_eq(enc(t, "x<|im_end|>y", 12, true), want);
    /* without parse_special a control token is plain text; user-defined ones still match */
    cr_assert_str_eq(enc(t, "<|im_end|>", 10, false), "60 124 105 109 95 101 110 100 124 62");
    snprintf(want, sizeof want, "%d", think);
    cr_assert_str_eq(enc(t, "<think>", 7, false), want);
    /* the longest token wins, even where a shorter one starts further left */
    snprintf(want, sizeof want, "%d %d", pair, a);
    cr_assert_str_eq(enc(t, "<|a|><|b|><|a|>", 15, true), want);
    snprintf(want, sizeof want, "%d %d", 'A', bcd);
    cr_assert_str_eq(enc(t, "ABCD", 4, true), want);
    snprintf(want, sizeof want, "%d %d", ab, 'C');
    cr_assert_str_eq(enc(t, "ABC", 3, true), want);
    /* unused placeholders are never matched */
    cr_assert_str_eq(enc(t, "[PAD9]", 6, true), "91 80 65 68 57 93");
    tok_free(t);
    vocab_free(&v);
}

/* ---------- normalization ---------- */

/* tok_normalize of s (parse_special on unless told); 4 rotating buffers. */
static const char *norm_sp(const tok_tokenizer *t, const char *s, size_t len, bool special)
{
    static char bufs[4][256];
    static int next;
    char *out = bufs[next++ & 3], *got, err[256];
    size_t n;
    cr_assert_eq(tok_normalize(t, s, len, special, &got, &n, err, sizeof err), 0, "%s", err);
    cr_assert(n < sizeof bufs[0] && got[n] == '\0');
    memcpy(out, got, n + 1);
    free(got);
    return out;
}

static const char *norm(const tok_tokenizer *t, const char *s) { return norm_sp(t, s, strlen(s), true); }

/* Every code point tok_nfc_is_inert lets through unnormalized must be one
 * NFC cannot touch, by libutf8proc's own tables: combining class 0, its own
 * NFC, and (the first code point of its decomposition) never found after the
 * first position of any canonical decomposition, i.e. never the second half
 * of a composition. */
Test(tokenizer, nfc_inert_code_points_are_quick_check_yes)
{
    static bool follows[0x110000];
    for (int32_t c = 0; c < 0x110000; c++) {
        utf8proc_int32_t d[32];
        int boundclass = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE, &boundclass);
        cr_assert(n >= 1 && n <= 32, "U+%04X decomposes into %zd", c, (ssize_t)n);
        for (utf8proc_ssize_t i = 1; i < n; i++) follows[d[i]] = true;
    }
    size_t inert = 0;
    for (int32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        char u[4];
        size_t len = tok_utf8_encode((uint32_t)c, u);
        if (!tok_nfc_is_inert((const uint8_t *)u, len)) continue;
        inert++;
        utf8proc_int32_t d[32];
        int boundclass = 0;
        utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE, &boundclass);
        cr_assert_eq(utf8proc_get_property(c)->combining_class, 0, "U+%04X", c);
        cr_assert(!follows[d[0]], "U+%04X can join the character before it", c);
        utf8proc_int32_t one = c;
        cr_assert_eq(utf8proc_normalize_utf32(&one, 1, UTF8PROC_STABLE | UTF8PROC_COMPOSE), 1);
        cr_assert_eq(one, c, "U+%04X", c);
    }
    cr_assert_gt(inert, 33000); /* the fast path covers ASCII, Latin, CJK, Hangul, kana */
    cr_assert(follows[0x301] && follows[0x11A8] && follows[0x3099] && follows[0x0BBE], "second halves are seen");
}

Test(tokenizer, nfc_composes_reorders_and_keeps_compatibility_characters)
{
    struct vocab v;
    vocab_init(&v);
    tok_tokenizer *t = vocab_load(&v, "qwen2");
    cr_assert_str_eq(tok_normalizer_name(t), "nfc"); /* the default for the Qwen pre-tokenizers */
    cr_assert_str_eq(norm(t, "Cafe\xCC\x81"), "Caf\xC3\xA9");
    cr_assert_str_eq(norm(t, "a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81"); /* below before above: U+1EA1 U+0301 */
    cr_assert_str_eq(norm(t, "a\xCC\xA3\xCC\x81"), "\xE1\xBA\xA1\xCC\x81");
    cr_assert_str_eq(norm(t, "\xCC\x81\xCC\xA7"), "\xCC\xA7\xCC\x81");        /* marks reorder with no base too */
    cr_assert_str_eq(norm(t, "\xE2\x84\xAA"), "K");                           /* KELVIN SIGN, a singleton */
    cr_assert_str_eq(norm(t, "\xE2\x84\xAB"), "\xC3\x85");                   /* ANGSTROM SIGN -> U+00C5 */
    cr_assert_str_eq(norm(t, "\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");   /* U+0958 is excluded from composition */
    cr_assert_str_eq(norm(t, "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81"); /* jamo L V T -> U+AC01 */
    cr_assert_str_eq(norm(t, "\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");   /* LV syllable + T */
    cr_assert_str_eq(norm(t, "\xEA\xB0\x80\xE1\x86\xA7"), "\xEA\xB0\x80\xE1\x86\xA7"); /* U+11A7 is no T (utf8proc#317) */
    cr_assert_str_eq(norm(t, "\xE3\x81\x8B\xE3\x82\x99"), "\xE3\x81\x8C");   /* U+304B U+3099 -> U+304C */
    /* NFC, not NFKC: ligatures, superscripts, full-width and half-width forms stay */
    const char *compat = "\xEF\xAC\x81 x\xC2\xB2 \xEF\xBC\xA1 \xEF\xBD\xB6\xEF\xBE\x9E \xE2\x84\x83 \xE2\x91\xA0";
    cr_assert_str_eq(norm(t, compat), compat);
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, nfc_around_special_tokens_and_invalid_bytes)
{
    struct vocab v;
    vocab_init(&v);
    vocab_add(&v, "<|x|>", TOK_TYPE_CONTROL);
    tok_tokenizer *t = vocab_load(&v, "qwen35");
    /* as Hugging Face does: the token is cut from the raw text, so '>' never
     * meets the U+0338 after it; without special parsing they compose (U+226F) */
    const char *s = "<|x|>\xCC\xB8";
    cr_assert_str_eq(norm_sp(t, s, strlen(s), true), s);
    cr_assert_str_eq(norm_sp(t, s, strlen(s), false), "<|x|\xE2\x89\xAF");
    cr_assert_str_eq(norm(t, "e\xCC\x81<|x|>e\xCC\x81"), "\xC3\xA9<|x|>\xC3\xA9");
    /* an invalid byte stays, and nothing composes across it */
    cr_assert_str_eq(norm(t, "e\xFF\xCC\x81"), "e\xFF\xCC\x81");
    cr_assert_str_eq(norm(t, "e\xCC\x81\xFF" "e\xCC\x81\xC3"), "\xC3\xA9\xFF\xC3\xA9\xC3");
    const char nul[] = "e\xCC\x81\0e\xCC\x81";
    cr_assert(!memcmp(norm_sp(t, nul, sizeof nul - 1, true), "\xC3\xA9\0\xC3\xA9", 5));
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, nfc_changes_the_ids_and_can_need_more_ids_than_bytes)
{
    struct vocab v;
    vocab_init(&v);
    int32_t e_acute = vocab_add(&v, "\xC3\xA9", 1);
    vocab_merge(&v, "\xC3", "\xA9");
    tok_tokenizer *nfc = vocab_load_norm(&v, "qwen35", "nfc"), *none = vocab_load_norm(&v, "qwen35", "none");
    cr_assert_str_eq(tok_normalizer_name(none), "none");
    char want[64];
    snprintf(want, sizeof want, "%d", e_acute);
    cr_assert_str_eq(enc(nfc, "e\xCC\x81", 3, true), want);
    cr_assert_str_eq(enc(none, "e\xCC\x81", 3, true), "101 204 129");
    cr_assert_str_eq(norm(none, "e\xCC\x81"), "e\xCC\x81");
    /* U+0958 (3 bytes) becomes U+0915 U+093C (6 bytes): 6 byte tokens for 3 bytes of input */
    int32_t ids[6];
    size_t n;
    cr_assert_eq(tok_encode(nfc, "\xE0\xA5\x98", 3, true, ids, 3, &n, NULL, 0), 0);
    cr_assert_eq(n, 6);
    cr_assert_eq(tok_encode(nfc, "\xE0\xA5\x98", 3, true, ids, 6, &n, NULL, 0), 0);
    const uint8_t bytes[6] = { 0xE0, 0xA4, 0x95, 0xE0, 0xA4, 0xBC };
    for (int i = 0; i < 6; i++) cr_assert_eq(ids[i], bytes[i]);
    tok_free(nfc);
    tok_free(none);
    vocab_free(&v);
}

/* A vocab-only GGUF of the test vocabulary, with tokenizer.ggml.normalizer
 * set to normalizer (NULL: no key, as in a GGUF made by llama.cpp). */
static tok_tokenizer *load_through_gguf(struct vocab *v, const char *normalizer)
{
    char err[256];
    gguf_writer *w;
    cr_assert_eq(gguf_writer_open(tmp_path("norm.gguf"), &w, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2"), 0);
    cr_assert_eq(gguf_w_set_str(w, "tokenizer.ggml.pre", "qwen2"), 0);
    cr_assert_eq(gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n), 0);
    if (normalizer) cr_assert_eq(gguf_w_set_str(w, "tokenizer.ggml.normalizer", normalizer), 0);
    cr_assert_eq(gguf_w_write_header(w), 0);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    gguf_writer_free(w);
    gguf_file *g;
    cr_assert_eq(gguf_open(tmp_path("norm.gguf"), &g, err, sizeof err), 0, "%s", err);
    tok_tokenizer *t = NULL;
    int rc = tok_load_gguf(g, &t, err, sizeof err);
    gguf_close(g);
    if (rc) cr_assert(strstr(err, "unknown normalizer"), "%s", err);
    return t;
}

Test(tokenizer, normalizer_key_in_gguf, .init = tmp_setup, .fini = tmp_teardown)
{
    struct vocab v;
    vocab_init(&v);
    tok_tokenizer *t = load_through_gguf(&v, NULL);
    cr_assert_str_eq(tok_normalizer_name(t), "nfc");
    tok_free(t);
    t = load_through_gguf(&v, "none");
    cr_assert_str_eq(tok_normalizer_name(t), "none");
    cr_assert_str_eq(enc(t, "e\xCC\x81", 3, true), "101 204 129");
    tok_free(t);
    t = load_through_gguf(&v, "nfc");
    cr_assert_str_eq(enc(t, "e\xCC\x81", 3, true), "195 169");
    tok_free(t);
    cr_assert_null(load_through_gguf(&v, "NFKC"));
    vocab_free(&v);
}

/* ---------- streaming decoder ---------- */

/* Pushes one id and checks what comes out. */
static void push_expect(tok_decoder *d, int32_t id, const char *want)
{
    const char *text;
    size_t len;
    char err[128];
    cr_assert_eq(tok_decoder_push(d, id, &text, &len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(len, strlen(want), "token %d: got %zu bytes \"%.*s\", want \"%s\"", id, len, (int)len, text, want);
    cr_assert(!memcmp(text, want, len));
}

Test(tokenizer, decoder_holds_split_characters)
{
    struct vocab v;
    vocab_init(&v);
    int32_t e_lead = vocab_add(&v, "x\xC3", 1); /* a token ending inside "é" */
    int32_t im_end = vocab_add(&v, "<|im_end|>", TOK_TYPE_CONTROL);
    int32_t think = vocab_add(&v, "<think>", TOK_TYPE_USER_DEFINED);
    tok_tokenizer *t = vocab_load(&v, "qwen35");
    tok_decoder *d;
    cr_assert_eq(tok_decoder_new(t, false, &d, NULL, 0), 0);
    push_expect(d, e_lead, "x");
    push_expect(d, 0xA9, "\xC3\xA9");
    /* 😀 = F0 9F 98 80, one byte per token */
    push_expect(d, 0xF0, "");
    push_expect(d, 0x9F, "");
    push_expect(d, 0x98, "");
    push_expect(d, 0x80, "\xF0\x9F\x98\x80");
    push_expect(d, im_end, ""); /* control tokens are silent unless rendered */
    push_expect(d, think, "<think>");
    /* € = E2 82 AC with a control token in the middle: still held */
    push_expect(d, 0xE2, "");
    push_expect(d, im_end, "");
    push_expect(d, 0x82, "");
    push_expect(d, 0xAC, "\xE2\x82\xAC");
    tok_decoder_free(d);

    cr_assert_eq(tok_decoder_new(t, true, &d, NULL, 0), 0);
    push_expect(d, im_end, "<|im_end|>");
    push_expect(d, 'a', "a");
    tok_decoder_free(d);
    tok_free(t);
    vocab_free(&v);
}

Test(tokenizer, decoder_replaces_what_cannot_complete)
{
    struct vocab v;
    vocab_init(&v);
    tok_tokenizer *t = vocab_load(&v, "qwen2");
    tok_decoder *d;
    cr_assert_eq(tok_decoder_new(t, true, &d, NULL, 0), 0);
    push_expect(d, 0xFF, "\xEF\xBF\xBD");      /* never valid */
    push_expect(d, 0x80, "\xEF\xBF\xBD");      /* stray continuation */
    push_expect(d, 0xE2, "");
    push_expect(d, 'A', "\xEF\xBF\xBD" "A");    /* lead byte cut short */
    push_expect(d, 0xED, "");
    push_expect(d, 0xA0, "\xEF\xBF\xBD\xEF\xBF\xBD"); /* a surrogate: ED then A0, each ill-formed */
    push_expect(d, 0xF0, "");
    push_expect(d, 0x9F, "");
    const char *text;
    size_t len;
    tok_decoder_flush(d, &text, &len); /* end of stream inside a character */
    cr_assert(len == 3 && !memcmp(text, "\xEF\xBF\xBD", 3));
    tok_decoder_flush(d, &text, &len);
    cr_assert_eq(len, 0);
    push_expect(d, 'z', "z"); /* ready for a new stream */
    char err[128];
    cr_assert_eq(tok_decoder_push(d, 100000, &text, &len, err, sizeof err), NB_EINVAL);
    cr_assert(strstr(err, "100000"), "%s", err);
    tok_decoder_free(d);
    tok_free(t);
    vocab_free(&v);
}

/* ---------- Hugging Face folder -> GGUF ---------- */

static void write_text(const char *name, const char *text) { spit(tmp_path(name), text, strlen(text)); }

/* A tiny byte-level tokenizer.json: ids 0..5 in the vocab, 7..9 added, 6
 * missing (config.json says 11 tokens, so 10 is missing too). */
static void write_hf_folder(void)
{
    write_text("tokenizer.json",
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xC4\xA0\": 3,"
               "  \"a\xC4\xA0" "b\": 4, \"\xC4\xA0" "a\xC4\xA0" "b\": 5},"
               "  \"merges\": [[\"a\", \"b\"], [\"\xC4\xA0\", \"a b\"]]},"
               " \"added_tokens\": ["
               "  {\"id\": 7, \"content\": \"<|im_end|>\", \"special\": true},"
               "  {\"id\": 8, \"content\": \"<|fim_pad|>\", \"special\": false},"
               "  {\"id\": 9, \"content\": \"<think>\xE2\x96\x81x\", \"special\": false}]}");
    write_text("tokenizer_config.json",
               "{\"eos_token\": \"<|im_end|>\", \"pad_token\": {\"content\": \"<|fim_pad|>\"}, \"bos_token\": null,"
               " \"add_bos_token\": false, \"chat_template\": \"{{ messages }}\"}");
    write_text("config.json", "{\"vocab_size\": 11, \"bos_token_id\": 7, \"eos_token_id\": 0}");
}

Test(tokenizer, hf_vocab_like_the_llama_cpp_converter, .init = tmp_setup, .fini = tmp_teardown)
{
    write_hf_folder();
    struct tok_hf_vocab v;
    char err[256];
    cr_assert_eq(tok_hf_vocab_read(tmp_dir, &v, err, sizeof err), 0, "%s", err);
    cr_assert_eq(v.n_tokens, 11);
    const char *want[11] = { "a", "b", "ab", "\xC4\xA0", "a\xC4\xA0" "b", "\xC4\xA0" "a\xC4\xA0" "b", "[PAD6]",
                             "<|im_end|>", "<|fim_pad|>", "<think> x", "[PAD10]" };
    const int32_t types[11] = { 1, 1, 1, 1, 1, 1, 5, 3, 3, 4, 5 };
    for (int i = 0; i < 11; i++) {
        cr_assert_str_eq(v.tokens[i], want[i], "token %d", i);
        cr_assert_eq(v.types[i], types[i], "type of token %d", i);
    }
    cr_assert_eq(v.n_merges, 2);
    cr_assert_str_eq(v.merges[0], "a b");
    cr_assert_str_eq(v.merges[1], "\xC4\xA0 a\xC4\xA0" "b"); /* a space inside a part becomes U+0120 */
    cr_assert_eq(v.special_ids[TOK_SP_EOS], 7); /* tokenizer_config wins over config.json */
    cr_assert_eq(v.special_ids[TOK_SP_BOS], 7); /* only config.json has it */
    cr_assert_eq(v.special_ids[TOK_SP_PAD], 8);
    cr_assert_eq(v.special_ids[TOK_SP_UNK], -1);
    cr_assert_eq(v.add_special[TOK_SP_BOS], 0);
    cr_assert_eq(v.add_special[TOK_SP_EOS], -1);
    cr_assert_str_eq(v.chat_template, "{{ messages }}");
    cr_assert_str_eq(v.normalizer, "none"); /* tokenizer.json has no normalizer */
    tok_hf_vocab_free(&v);
}

/* A minimal tokenizer.json with the given normalizer JSON. */
static int parse_with_normalizer(const char *normalizer, struct tok_hf_vocab *v, char *err, size_t errlen)
{
    char json[512];
    snprintf(json, sizeof json, "{\"normalizer\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", normalizer);
    return tok_hf_vocab_parse(json, strlen(json), v, err, errlen);
}

Test(tokenizer, hf_normalizer_nfc_or_none_else_refused)
{
    static const struct { const char *json, *kind; } ok[] = {
        { "null", "none" },
        { "{\"type\": \"NFC\"}", "nfc" },
        { "{\"type\": \"Sequence\", \"normalizers\": []}", "none" },
        { "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"NFC\"}]}", "nfc" },
    };
    struct tok_hf_vocab v;
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert_eq(parse_with_normalizer(ok[i].json, &v, err, sizeof err), 0, "%s: %s", ok[i].json, err);
        cr_assert_str_eq(v.normalizer, ok[i].kind, "%s", ok[i].json);
        tok_hf_vocab_free(&v);
    }
    cr_assert_eq(parse_with_normalizer("{\"type\": \"NFKC\"}", &v, err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "normalizer \"NFKC\" is not supported"), "%s", err);
    cr_assert_eq(parse_with_normalizer("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, "
                                       "{\"type\": \"Lowercase\"}]}", &v, err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "\"Sequence\""), "%s", err);
    cr_assert_eq(parse_with_normalizer("{\"kind\": \"NFC\"}", &v, err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "(without a type)"), "%s", err);
    cr_assert_null(v.tokens); /* freed on error */
}

Test(tokenizer, hf_vocab_parse_from_memory)
{
    /* not NUL-terminated: the parser must stop at len */
    const char text[] = "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 2, \"ab\": 3}, \"merges\": [\"a b\"]},"
                        " \"normalizer\": {\"type\": \"NFC\"}}GARBAGE";
    char *buf = malloc(sizeof text - 1);
    memcpy(buf, text, sizeof text - 1);
    struct tok_hf_vocab v;
    char err[256];
    cr_assert_eq(tok_hf_vocab_parse(buf, sizeof text - 1 - 7, &v, err, sizeof err), 0, "%s", err);
    cr_assert_eq(v.n_tokens, 4);
    cr_assert_str_eq(v.tokens[1], "[PAD1]");
    cr_assert_eq(v.types[1], TOK_TYPE_UNUSED);
    cr_assert_eq(v.n_merges, 1);
    cr_assert_str_eq(v.normalizer, "nfc");
    cr_assert_eq(v.special_ids[TOK_SP_EOS], -1);
    tok_hf_vocab_free(&v);
    cr_assert_eq(tok_hf_vocab_parse(buf, sizeof text - 1, &v, err, sizeof err), NB_EFORMAT); /* with the garbage */
    cr_assert(strstr(err, "not valid JSON"), "%s", err);
    free(buf);
    const char *huge = "{\"model\": {\"vocab\": {\"a\": 2147483647}}}";
    cr_assert_eq(tok_hf_vocab_parse(huge, strlen(huge), &v, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "2147483648 tokens is more than"), "%s", err);
    const char *empty = "{\"model\": {\"vocab\": {}}}";
    cr_assert_eq(tok_hf_vocab_parse(empty, strlen(empty), &v, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "no tokens"), "%s", err);
    cr_assert_eq(tok_hf_vocab_parse(NULL, 0, &v, err, sizeof err), NB_EFORMAT);
}

Test(tokenizer, hf_to_gguf_round_trip, .init = tmp_setup, .fini = tmp_teardown)
{
    write_hf_folder();
    char err[256];
    gguf_writer *w;
    cr_assert_eq(gguf_writer_open(tmp_path("vocab.gguf"), &w, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tok_hf_write_gguf_keys(w, tmp_dir, "qwen9", err, sizeof err), NB_ENOTSUP);
    cr_assert(strstr(err, "unknown pre-tokenizer \"qwen9\""), "%s", err);
    cr_assert_eq(tok_hf_write_gguf_keys(w, tmp_dir, "qwen35", err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_w_write_header(w), 0);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    gguf_writer_free(w);

    gguf_file *g;
    cr_assert_eq(gguf_open(tmp_path("vocab.gguf"), &g, err, sizeof err), 0, "%s", err);
    const char *s;
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL, 0), 0);
    cr_assert_str_eq(s, "qwen35");
    cr_assert_eq(gguf_get_str(g, "tokenizer.chat_template", &s, NULL, 0), 0);
    cr_assert_str_eq(s, "{{ messages }}");
    uint32_t id;
    cr_assert_eq(gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &id, NULL, 0), 0);
    cr_assert_eq(id, 8);
    cr_assert_eq(gguf_get_str(g, "tokenizer.ggml.normalizer", &s, NULL, 0), 0);
    cr_assert_str_eq(s, "none");
    tok_tokenizer *t;
    cr_assert_eq(tok_load_gguf(g, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tok_vocab_size(t), 11);
    cr_assert_eq(tok_eos_id(t), 7);
    cr_assert_eq(tok_bos_id(t), 7);
    cr_assert_eq(tok_pad_id(t), 8);
    cr_assert(!tok_add_bos(t));
    cr_assert_eq(tok_token_type(t, 9), TOK_TYPE_USER_DEFINED);
    cr_assert_str_eq(enc(t, "ab a<|im_end|>", 14, true), "2 3 0 7");
    tok_free(t);
    gguf_close(g);

    cr_assert_eq(tok_load_hf(tmp_dir, "qwen2", &t, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(enc(t, "ab a<|im_end|>", 14, true), "2 3 0 7");
    cr_assert_str_eq(tok_normalizer_name(t), "none"); /* tokenizer.json's word, not the qwen2 default */
    tok_free(t);
}
