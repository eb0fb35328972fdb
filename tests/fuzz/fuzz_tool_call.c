/* fuzz_tool_call.c — libFuzzer target for the tool-call parser and scanner
 * (coordinator/api_toolcall.c) and the template's JSON printer (api_tools.c).
 *
 * The input is generated text, any bytes.  With two tools whose schemas
 * type their parameters (string, integer, number, boolean, object, a
 * nullable string), for every input:
 *   - api_tool_parse_block on the whole input returns 0 (then the name is
 *     one of the tools and the arguments parse as a JSON object) or a format
 *     error with a message;
 *   - the scanner, fed the input in pieces of 1 byte and of 1-13 bytes,
 *     gives the same content, calls and error both ways (piece sizes do not
 *     matter), never more content than input, every call's arguments a JSON
 *     object; an input without "<tool_call>" comes out as exactly its
 *     content (nothing lost);
 *   - an input that is JSON prints (Python's json.dumps style) as text that
 *     parses back to the same value (numbers exactly: the shortest digits
 *     that read back). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api.h"

static struct api_request req;
static bool ready;

struct out {
    struct api_buf content, calls;
    int n_calls;
};

static int on_content(void *ctx, bool reasoning, const char *s, size_t n)
{
    if (reasoning) abort();
    return api_buf_add(&((struct out *)ctx)->content, s, n);
}

static int on_call(void *ctx, struct api_call *c)
{
    struct out *o = ctx;
    cJSON *a = cJSON_Parse(c->arguments);
    if (!cJSON_IsObject(a)) abort();
    cJSON_Delete(a);
    int rc = api_buf_add(&o->calls, c->name, strlen(c->name));
    if (!rc) rc = api_buf_add(&o->calls, c->arguments, strlen(c->arguments) + 1); /* with its NUL: a separator */
    o->n_calls++;
    api_call_free(c);
    return rc;
}

static void scan(const char *s, size_t n, bool bytewise, struct out *o, char *error)
{
    struct api_toolscan t;
    api_toolscan_init(&t, req.tools, req.n_tools, true);
    int rc = 0;
    for (size_t at = 0; at < n && !rc;) {
        size_t step = bytewise ? 1 : 1 + (at * 5 + n) % 13;
        if (step > n - at) step = n - at;
        rc = api_toolscan_push(&t, s + at, step, on_content, on_call, o);
        at += step;
    }
    if (rc == 0) rc = api_toolscan_finish(&t, on_content, o);
    if (rc && rc != -3) abort(); /* only out of memory may fail */
    snprintf(error, 200, "%s", t.error);
    api_toolscan_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ready) {
        static const char body[] =
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":["
            "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
            "\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},"
            "\"o\":{\"type\":\"object\"},\"z\":{\"type\":[\"string\",\"null\"]},\"u\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}}}}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}";
        struct api_error e;
        if (api_parse_request(API_CHAT, body, sizeof body - 1, &req, &e) || req.n_tools != 2) abort();
        ready = true;
    }
    const char *s = (const char *)data;
    struct api_call c;
    char err[160] = "";
    int rc = api_tool_parse_block(s, size, req.tools, req.n_tools, &c, err, sizeof err);
    if (rc == 0) {
        if (strcmp(c.name, "f") && strcmp(c.name, "g")) abort();
        cJSON *a = cJSON_Parse(c.arguments);
        if (!cJSON_IsObject(a)) abort();
        cJSON_Delete(a);
        api_call_free(&c);
    } else if (rc != -3 && (rc != -2 || !err[0])) {
        abort();
    }
    struct out one = {0}, many = {0};
    char e1[200], e2[200];
    scan(s, size, true, &one, e1);
    scan(s, size, false, &many, e2);
    if (one.content.n != many.content.n || (one.content.n && memcmp(one.content.p, many.content.p, one.content.n))) abort();
    if (one.n_calls != many.n_calls || one.calls.n != many.calls.n || (one.calls.n && memcmp(one.calls.p, many.calls.p, one.calls.n))) abort();
    if (strcmp(e1, e2)) abort();
    if (one.content.n > size) abort();
    if (!memmem(s, size, "<tool_call>", 11) && (one.n_calls || one.content.n != size || (size && memcmp(one.content.p, s, size)))) abort();
    api_buf_free(&one.content), api_buf_free(&one.calls), api_buf_free(&many.content), api_buf_free(&many.calls);
    /* The template's JSON printer round-trips any JSON value. */
    cJSON *v = cJSON_ParseWithLength(s, size);
    if (v) {
        struct api_buf b = {0};
        if (api_pyjson(v, &b) == 0) {
            /* Compared as cJSON prints both (cJSON_Compare looks keys up: duplicate keys would differ). */
            cJSON *back = cJSON_Parse(b.p ? b.p : "");
            char *p1 = cJSON_PrintUnformatted(v), *p2 = back ? cJSON_PrintUnformatted(back) : NULL;
            if (!p1 || !p2 || strcmp(p1, p2)) abort();
            free(p1), free(p2);
            cJSON_Delete(back);
        }
        api_buf_free(&b);
        cJSON_Delete(v);
    }
    return 0;
}
