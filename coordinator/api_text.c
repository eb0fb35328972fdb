/* api_text.c — generated text → reasoning_content / content, with stop strings.
 *
 * The decoded text arrives in pieces of whole UTF-8 characters (the
 * tokenizer's streaming decoder).  Everything not yet emitted sits in `held`.
 * On each piece: a stop string anywhere in `held` ends the generation (the
 * text before it is emitted, it is not); a `</think>` while in the think
 * block switches the channel to content (the marker itself is dropped, and
 * so are the newlines the chat template puts around it: trailing ones of the
 * reasoning, leading ones of the content).  Otherwise everything is emitted
 * except the longest tail that could still grow into a stop string or
 * `</think>` (and, in the think block, trailing newlines): a client never
 * receives text that is later cut.  A held tail starts where a pattern
 * starts, so it starts on a character boundary and what is emitted stays
 * valid UTF-8. */
#include "coordinator/api.h"

#include "core/util/err.h"
#include "core/util/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char think_end[] = "</think>";
#define THINK_END_LEN (sizeof think_end - 1)

void api_text_init(struct api_text *t, bool reasoning, char *const *stops, int n_stops)
{
    memset(t, 0, sizeof *t);
    t->reasoning = reasoning;
    t->stops = stops;
    t->n_stops = n_stops;
    t->stop_hit = -1;
}

void api_text_free(struct api_text *t)
{
    free(t->held);
    t->held = NULL;
    t->n_held = t->cap = 0;
}

static const char *find(const char *hay, size_t n, const char *needle, size_t m)
{
    return m && m <= n ? memmem(hay, n, needle, m) : NULL;
}

/* Length of the longest proper suffix of held that is a prefix of pat. */
static size_t partial(const char *held, size_t n, const char *pat, size_t m)
{
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(held + n - k, pat, k)) return k;
    return 0;
}

static int emit_some(struct api_text *t, size_t n, bool trim_newlines, api_emit_fn emit, void *ctx)
{
    size_t e = n;
    if (trim_newlines)
        while (e > 0 && t->held[e - 1] == '\n') e--;
    int rc = e ? emit(ctx, t->reasoning, t->held, e) : 0;
    return rc;
}

static void consume(struct api_text *t, size_t n)
{
    memmove(t->held, t->held + n, t->n_held - n);
    t->n_held -= n;
}

int api_text_push(struct api_text *t, const char *s, size_t n, api_emit_fn emit, void *ctx)
{
    if (t->stopped) return 1;
    if (t->n_held + n + 1 > t->cap) {
        size_t cap = (t->n_held + n + 1) * 2;
        char *p = realloc(t->held, cap);
        if (!p) return NB_ENOMEM;
        t->held = p, t->cap = cap;
    }
    memcpy(t->held + t->n_held, s, n);
    t->n_held += n;
    for (;;) {
        if (t->strip_lead) {
            size_t k = 0;
            while (k < t->n_held && t->held[k] == '\n') k++;
            consume(t, k);
            if (!t->n_held) return 0;
            t->strip_lead = false;
        }
        /* The earliest stop string, and </think> in the think block. */
        const char *stop = NULL;
        int hit = -1;
        for (int i = 0; i < t->n_stops; i++) {
            const char *p = find(t->held, t->n_held, t->stops[i], strlen(t->stops[i]));
            if (p && (!stop || p < stop)) stop = p, hit = i;
        }
        const char *te = t->reasoning ? find(t->held, t->n_held, think_end, THINK_END_LEN) : NULL;
        if (stop && (!te || stop <= te)) {
            int rc = emit_some(t, (size_t)(stop - t->held), false, emit, ctx);
            t->stopped = true, t->n_held = 0, t->stop_hit = hit;
            return rc ? rc : 1;
        }
        if (te) {
            int rc = emit_some(t, (size_t)(te - t->held), true, emit, ctx);
            if (rc) return rc;
            consume(t, (size_t)(te - t->held) + THINK_END_LEN);
            t->reasoning = false, t->strip_lead = true;
            continue;
        }
        size_t keep = t->reasoning ? partial(t->held, t->n_held, think_end, THINK_END_LEN) : 0;
        for (int i = 0; i < t->n_stops; i++) {
            size_t k = partial(t->held, t->n_held, t->stops[i], strlen(t->stops[i]));
            if (k > keep) keep = k;
        }
        size_t out = t->n_held - keep;
        if (t->reasoning)
            while (out > 0 && t->held[out - 1] == '\n') out--;
        int rc = out ? emit(ctx, t->reasoning, t->held, out) : 0;
        if (rc) return rc;
        consume(t, out);
        return 0;
    }
}

int api_text_finish(struct api_text *t, api_emit_fn emit, void *ctx)
{
    if (t->stopped || !t->n_held) return 0;
    size_t k = 0;
    if (t->strip_lead)
        while (k < t->n_held && t->held[k] == '\n') k++;
    consume(t, k);
    int rc = emit_some(t, t->n_held, t->reasoning, emit, ctx);
    t->n_held = 0;
    return rc;
}

/* ---- api_buf: a growing NUL-terminated buffer (the jobs' text) ---- */

int api_buf_add(struct api_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return NB_ENOMEM;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void api_buf_free(struct api_buf *b)
{
    free(b->p);
    *b = (struct api_buf){0};
}

int api_add_text(cJSON *obj, const char *key, const char *s, size_t n)
{
    struct api_buf b = {0};
    int rc = api_buf_add(&b, "\"", 1);
    for (size_t i = 0; i < n && rc == 0;) {
        const unsigned char c = (unsigned char)s[i];
        size_t k = nb_utf8_len((const unsigned char *)s + i, n - i);
        char esc[8];
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, rc = api_buf_add(&b, esc, 2), k = 1;
        else if (c == 0 || k == 0) rc = api_buf_add(&b, "\xEF\xBF\xBD", 3), k = 1; /* U+FFFD */
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), rc = api_buf_add(&b, esc, 6), k = 1;
        else rc = api_buf_add(&b, s + i, k);
        i += k;
    }
    if (rc == 0) rc = api_buf_add(&b, "\"", 1);
    if (rc == 0 && !cJSON_AddRawToObject(obj, key, b.p)) rc = NB_ENOMEM;
    free(b.p);
    return rc;
}
