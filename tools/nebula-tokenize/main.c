/* nebula-tokenize — encode text to token ids and back with a GGUF's tokenizer.
 *
 * A thin shell over core/tokenizer: every mode loads the tokenizer once and
 * prints ids space-separated (or text for --decode).  --lines reads JSON-lines
 * strings so that test corpora can hold any character, newlines included.
 * The diagnostic modes (--make-gguf, --roundtrip, --bench) exist for the
 * parity test and for measuring speed; `nebula tokenize` will call the same
 * library. */
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/mapfile.h"
#include "core/util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fputs("usage: nebula-tokenize -m MODEL.gguf [--no-special] TEXT\n"
          "       nebula-tokenize -m MODEL.gguf [--no-special] --file FILE\n"
          "       nebula-tokenize -m MODEL.gguf [--no-special] --lines FILE.jsonl\n"
          "       nebula-tokenize -m MODEL.gguf --decode ID...\n"
          "\n"
          "Prints the token ids of TEXT (or of a file's contents) space-separated.\n"
          "  --lines       each line of FILE is a JSON string; prints one line of ids per string\n"
          "  --decode      prints the text of the ids (control tokens included)\n"
          "  --no-special  control tokens written in the text are not recognised as such\n"
          "Diagnostics:\n"
          "  nebula-tokenize --make-gguf HF_DIR OUT.gguf [--pre qwen35]\n"
          "                vocab-only GGUF from a Hugging Face tokenizer folder\n"
          "  nebula-tokenize -m MODEL.gguf --roundtrip FILE.jsonl   checks decode(encode(s)) == s as normalized\n"
          "  nebula-tokenize -m MODEL.gguf --bench FILE             encode speed in MB/s\n",
          f);
}

struct args {
    const char *model, *file, *lines, *text, *roundtrip, *bench;
    const char *make_dir, *make_out, *pre;
    char **decode_ids;
    int n_decode;
    bool special, decode;
};

/* ---------- input ---------- */

static int read_file(const char *path, char **out, size_t *len)
{
    char err[512];
    int rc = nb_read_file(path, out, len, err, sizeof err);
    if (rc) fprintf(stderr, "nebula-tokenize: %s\n", err);
    return rc;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

static size_t put_utf8(unsigned cp, char *o)
{
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape after a backslash at s[0]; returns the bytes consumed, or 0. */
static size_t json_escape(const char *s, const char *end, char *o, size_t *olen)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = s[1] ? strchr(from, s[1]) : NULL;
    if (k) return o[(*olen)++] = to[k - from], 2;
    unsigned hi, lo;
    if (s[1] != 'u' || end - s < 6 || hex4(s + 2, &hi)) return 0;
    if (hi >= 0xDC00 && hi <= 0xDFFF) return 0; /* lone low surrogate */
    if (hi < 0xD800 || hi > 0xDBFF) return *olen += put_utf8(hi, o + *olen), 6;
    if (end - s < 12 || s[6] != '\\' || s[7] != 'u' || hex4(s + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) return 0;
    *olen += put_utf8(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00), o + *olen);
    return 12;
}

/* Decodes a JSON string literal s[0..n) into out (room for n bytes). */
static int json_string(const char *s, size_t n, char *out, size_t *olen)
{
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
    if (n < 2 || s[0] != '"' || s[n - 1] != '"') return -1;
    const char *p = s + 1, *end = s + n - 1;
    *olen = 0;
    while (p < end) {
        if (*p != '\\') {
            out[(*olen)++] = *p++;
            continue;
        }
        size_t k = json_escape(p, end, out, olen);
        if (!k) return -1;
        p += k;
    }
    return 0;
}

/* Calls fn(text, len, ctx) for each JSON-string line of a file. */
static int for_each_line(const char *path, int (*fn)(const char *, size_t, void *), void *ctx)
{
    char *buf, *text;
    size_t len;
    int rc = read_file(path, &buf, &len);
    if (rc) return rc;
    text = malloc(len + 1);
    size_t line_no = 0;
    for (size_t pos = 0; !rc && text && pos < len; line_no++) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (buf + pos)) : len - pos, tlen;
        if (json_string(buf + pos, n, text, &tlen)) {
            fprintf(stderr, "nebula-tokenize: %s:%zu: not a JSON string\n", path, line_no + 1);
            rc = NB_EFORMAT;
            break;
        }
        rc = fn(text, tlen, ctx);
        pos += n + 1;
    }
    if (!text) rc = NB_ENOMEM;
    free(text);
    free(buf);
    return rc;
}

/* ---------- modes ---------- */

/* Encodes into a malloc'ed buffer, with the two-pass contract of tok_encode
 * (normalization can make a text longer, so len ids may not be enough). */
static int encode(const tok_tokenizer *t, const char *text, size_t len, bool special, int32_t **ids, size_t *n)
{
    char err[256];
    int rc = tok_encode_alloc(t, text, len, special, ids, n, err, sizeof err);
    if (rc) fprintf(stderr, "nebula-tokenize: %s\n", err);
    return rc;
}

struct encode_ctx {
    const tok_tokenizer *t;
    bool special;
};

static int print_ids(const char *text, size_t len, void *p)
{
    const struct encode_ctx *c = p;
    int32_t *ids;
    size_t n;
    int rc = encode(c->t, text, len, c->special, &ids, &n);
    for (size_t i = 0; !rc && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (!rc) putchar('\n');
    free(ids);
    return rc;
}

/* Streams ids through the decoder into buf (room for 3 bytes per piece byte). */
static int decode_ids(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len)
{
    char err[256];
    tok_decoder *d;
    size_t cap = 64;
    for (size_t i = 0; i < n; i++) {
        size_t plen;
        tok_token_bytes(t, ids[i], &plen);
        cap += 3 * plen;
    }
    *out = malloc(cap);
    *len = 0;
    int rc = *out ? tok_decoder_new(t, true, &d, err, sizeof err) : NB_ENOMEM;
    if (rc) {
        free(*out);
        *out = NULL;
        return rc;
    }
    const char *piece;
    size_t plen;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = tok_decoder_push(d, ids[i], &piece, &plen, err, sizeof err);
        if (!rc) memcpy(*out + *len, piece, plen), *len += plen;
    }
    tok_decoder_flush(d, &piece, &plen);
    memcpy(*out + *len, piece, plen), *len += plen;
    tok_decoder_free(d);
    if (rc) fprintf(stderr, "nebula-tokenize: %s\n", err);
    return rc;
}

static int cmd_decode(const tok_tokenizer *t, char **args, int n_args)
{
    int32_t *ids = malloc((n_args + 1) * sizeof *ids);
    if (!ids) return NB_ENOMEM;
    for (int i = 0; i < n_args; i++) {
        char *end;
        long v = strtol(args[i], &end, 10);
        if (*end || end == args[i] || v < 0 || v >= (long)tok_vocab_size(t)) {
            fprintf(stderr, "nebula-tokenize: \"%s\" is not a token id (vocabulary of %u)\n", args[i], tok_vocab_size(t));
            free(ids);
            return NB_EINVAL;
        }
        ids[i] = (int32_t)v;
    }
    char *text;
    size_t len;
    int rc = decode_ids(t, ids, (size_t)n_args, &text, &len);
    if (!rc) fwrite(text, 1, len, stdout);
    free(text);
    free(ids);
    return rc;
}

struct roundtrip_ctx {
    const tok_tokenizer *t;
    size_t strings, failures, normalized;
};

/* decode(encode(s)) must give back s as the tokenizer normalizes it (s
 * itself when the normalizer leaves it alone); counts the strings it changes. */
static int check_roundtrip(const char *text, size_t len, void *p)
{
    struct roundtrip_ctx *c = p;
    int32_t *ids;
    size_t n, dlen, wlen;
    char *back = NULL, *want = NULL, err[256];
    int rc = encode(c->t, text, len, true, &ids, &n);
    if (!rc) rc = decode_ids(c->t, ids, n, &back, &dlen);
    if (!rc && (rc = tok_normalize(c->t, text, len, true, &want, &wlen, err, sizeof err)))
        fprintf(stderr, "nebula-tokenize: %s\n", err);
    if (!rc && (dlen != wlen || memcmp(back, want, wlen))) {
        if (c->failures++ < 5) fprintf(stderr, "round trip differs for line %zu: \"%.*s\"\n", c->strings + 1, (int)len, text);
    }
    if (!rc && (wlen != len || memcmp(want, text, len))) c->normalized++;
    c->strings++;
    free(ids);
    free(back);
    free(want);
    return rc;
}

/* Encodes the file over and over for at least a second; prints MB/s. */
static int cmd_bench(const tok_tokenizer *t, const char *path)
{
    char *text;
    size_t len, n = 0, rounds = 0;
    int rc = read_file(path, &text, &len);
    int32_t *ids = NULL;
    double t0 = nb_now_s(), t1 = t0;
    while (!rc && (t1 - t0 < 1.0 || rounds < 3)) {
        free(ids);
        rc = encode(t, text, len, true, &ids, &n);
        rounds++;
        t1 = nb_now_s();
    }
    if (!rc)
        printf("%zu bytes -> %zu tokens (%.2f bytes/token); %zu rounds in %.2f s: %.2f MB/s\n", len, n,
               n ? (double)len / n : 0.0, rounds, t1 - t0, len * rounds / (t1 - t0) / 1e6);
    free(ids);
    free(text);
    return rc;
}

static int cmd_make_gguf(const char *dir, const char *out, const char *pre)
{
    char err[512];
    gguf_writer *w;
    int rc = gguf_writer_open(out, &w, err, sizeof err);
    if (rc) {
        fprintf(stderr, "nebula-tokenize: %s\n", err);
        return rc;
    }
    /* A vocab-only file: the tokenizer keys and no tensors. */
    rc = gguf_w_set_str(w, "general.architecture", "tokenizer-only");
    if (rc) {
        snprintf(err, sizeof err, "%s", gguf_writer_error(w));
    } else if (!(rc = tok_hf_write_gguf_keys(w, dir, pre, err, sizeof err))) {
        rc = gguf_w_write_header(w);
        if (!rc) rc = gguf_writer_finish(w);
        if (rc) snprintf(err, sizeof err, "%s", gguf_writer_error(w));
    }
    if (rc) fprintf(stderr, "nebula-tokenize: %s\n", err);
    gguf_writer_free(w);
    return rc;
}

/* ---------- main ---------- */

/* Returns 0, or 2 after a message for bad usage. */
static int parse_args(int argc, char **argv, struct args *a)
{
    *a = (struct args){ .special = true, .pre = "qwen35" };
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        bool has_next = i + 1 < argc;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) usage(stdout), exit(0);
        else if (!strcmp(s, "-m") && has_next) a->model = argv[++i];
        else if (!strcmp(s, "--file") && has_next) a->file = argv[++i];
        else if (!strcmp(s, "--lines") && has_next) a->lines = argv[++i];
        else if (!strcmp(s, "--roundtrip") && has_next) a->roundtrip = argv[++i];
        else if (!strcmp(s, "--bench") && has_next) a->bench = argv[++i];
        else if (!strcmp(s, "--pre") && has_next) a->pre = argv[++i];
        else if (!strcmp(s, "--no-special")) a->special = false;
        else if (!strcmp(s, "--make-gguf") && i + 2 < argc) a->make_dir = argv[++i], a->make_out = argv[++i];
        else if (!strcmp(s, "--decode")) a->decode = true, a->decode_ids = argv + i + 1, a->n_decode = argc - i - 1, i = argc;
        else if (s[0] == '-' && s[1]) return fprintf(stderr, "nebula-tokenize: unknown or incomplete option %s\n", s), 2;
        else if (!a->text) a->text = s;
        else return fprintf(stderr, "nebula-tokenize: more than one TEXT argument\n"), 2;
    }
    int modes = !!a->text + !!a->file + !!a->lines + !!a->roundtrip + !!a->bench + a->decode + !!a->make_dir;
    if (modes != 1) return fprintf(stderr, "nebula-tokenize: give exactly one of TEXT, --file, --lines, --decode, "
                                           "--roundtrip, --bench, --make-gguf (try --help)\n"), 2;
    if (!a->make_dir && !a->model) return fprintf(stderr, "nebula-tokenize: -m MODEL.gguf is required\n"), 2;
    if (a->decode && a->n_decode == 0) return fprintf(stderr, "nebula-tokenize: --decode needs ids\n"), 2;
    return 0;
}

static int load(const char *path, gguf_file **g, tok_tokenizer **t)
{
    char err[512];
    int rc = gguf_open(path, g, err, sizeof err); /* its message names the file */
    if (rc) fprintf(stderr, "nebula-tokenize: %s\n", err);
    else if ((rc = tok_load_gguf(*g, t, err, sizeof err))) fprintf(stderr, "nebula-tokenize: %s: %s\n", path, err);
    return rc;
}

static int run(const struct args *a, const tok_tokenizer *t)
{
    struct encode_ctx ec = { t, a->special };
    if (a->text) return print_ids(a->text, strlen(a->text), &ec);
    if (a->lines) return for_each_line(a->lines, print_ids, &ec);
    if (a->decode) return cmd_decode(t, a->decode_ids, a->n_decode);
    if (a->bench) return cmd_bench(t, a->bench);
    if (a->roundtrip) {
        struct roundtrip_ctx rc = { t, 0, 0, 0 };
        int err = for_each_line(a->roundtrip, check_roundtrip, &rc);
        printf("round trip: %zu strings, %zu differ; %zu changed by the normalizer (%s)\n", rc.strings, rc.failures,
               rc.normalized, tok_normalizer_name(t));
        return err ? err : rc.failures ? NB_EFORMAT : 0;
    }
    char *text;
    size_t len;
    int rc = read_file(a->file, &text, &len);
    if (!rc) rc = print_ids(text, len, &ec);
    if (!rc) free(text);
    return rc;
}

int main(int argc, char **argv)
{
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    if (a.make_dir) return cmd_make_gguf(a.make_dir, a.make_out, a.pre) ? 1 : 0;
    gguf_file *g = NULL;
    tok_tokenizer *t = NULL;
    rc = load(a.model, &g, &t);
    if (!rc) rc = run(&a, t);
    tok_free(t);
    gguf_close(g);
    return rc ? 1 : 0;
}
