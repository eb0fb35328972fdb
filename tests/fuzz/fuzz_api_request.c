/* fuzz_api_request.c — libFuzzer target for the HTTP API's request parser
 * (coordinator/api_request.c) and its reasoning / stop-string filter
 * (coordinator/api_text.c).
 *
 * The first input byte picks the request kind (chat, completion, tokenize,
 * apply-template, Anthropic messages, OpenAI responses);
 * the rest is the body, any bytes at all.  For every input:
 *   - the parser returns 0, 400 or 500 (out of memory), never anything else;
 *     an error has a message (valid UTF-8, whatever bytes it quotes), a type
 *     and, for 400, the invalid_request_error type; the error renders as JSON;
 *   - a parsed request is coherent: 1-3 accuracy level, at most 4 non-empty
 *     stop strings, max_tokens -1 or in [1, 2^24], messages with text for a
 *     chat, a prompt for a completion;
 *   - the body's bytes, fed to the text filter in pieces (inside a think
 *     block, with the parsed stop strings when there are any), come out as
 *     reasoning + content never longer than the input (the filter only drops
 *     text), and exactly as long when there is neither a stop string nor a
 *     "</think>" in it and it has no newline (nothing may be lost). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api.h"

struct out {
    size_t n;
};

static int count(void *ctx, bool reasoning, const char *s, size_t n)
{
    (void)reasoning, (void)s;
    ((struct out *)ctx)->n += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    enum api_kind kind = (enum api_kind)(data[0] % 6);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct api_request r;
    struct api_error e;
    int st = api_parse_any(kind, body, len, &r, &e);
    if (st != 0 && st != 400 && st != 500) abort();
    if (st) {
        if (!e.message[0] || !e.type[0] || e.status != st) abort();
        if (st == 400 && strcmp(e.type, "invalid_request_error")) abort();
        /* The message quotes the client's bytes: it must still be valid UTF-8. */
        for (const unsigned char *p = (const unsigned char *)e.message; *p;) {
            size_t k = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
            if (!k) abort();
            for (size_t i = 1; i < k; i++)
                if ((p[i] & 0xC0) != 0x80) abort();
            p += k;
        }
        cJSON *j = api_error_json(&e);
        char *t = cJSON_PrintUnformatted(j);
        if (!t) abort();
        free(t);
        cJSON_Delete(j);
    } else {
        if (r.accuracy_level < 1 || r.accuracy_level > 3 || r.n_stop < 0 || r.n_stop > API_MAX_STOP) abort();
        for (int i = 0; i < r.n_stop; i++)
            if (!r.stop[i] || !r.stop[i][0]) abort();
        if (r.max_tokens != -1 && (r.max_tokens < 1 || r.max_tokens > API_MAX_TOKENS_LIMIT)) abort();
        if (kind == API_CHAT && (r.n_msgs < 1 || !r.msgs)) abort();
        for (int i = 0; i < r.n_msgs; i++)
            if (!r.msgs[i].content) abort();
        if (kind == API_COMPLETION && !r.prompt) abort();
        if (kind == API_TOKENIZE && !r.prompt && !r.msgs) abort();
        /* The dialects parse into a chat request; tools are named and printed. */
        if ((kind == API_MESSAGES || kind == API_RESPONSES || kind == API_TEMPLATE) && (r.kind != API_CHAT && r.kind != API_TEMPLATE)) abort();
        if ((kind == API_MESSAGES || kind == API_RESPONSES) && (r.n_msgs < 1 || !r.msgs)) abort();
        for (int i = 0; i < r.n_tools; i++)
            if (!r.tools[i].name || !r.tools[i].json) abort();
        if (r.tool_choice == API_TOOLS_NAMED && !r.tool_name) abort();
        if (r.logprobs && (r.top_logprobs < 0 || r.top_logprobs > API_MAX_TOP_LOGPROBS)) abort();
    }
    /* The filter over the raw body, in pieces of 1-8 bytes. */
    struct api_text t;
    struct out o = {0};
    api_text_init(&t, true, r.stop, r.n_stop);
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        size_t step = 1 + (at * 7 + len) % 8;
        if (step > len - at) step = len - at;
        rc = api_text_push(&t, body + at, step, count, &o);
        at += step;
    }
    if (rc == 0) rc = api_text_finish(&t, count, &o);
    if (rc < 0 && rc != -3) abort();
    if (o.n > len) abort();
    if (r.n_stop == 0 && !memmem(body, len, "</think>", 8) && !memchr(body, '\n', len) && o.n != len) abort();
    api_text_free(&t);
    api_request_free(&r);
    return 0;
}
