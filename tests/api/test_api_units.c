/* test_api_units.c — the HTTP API's pure parts: request parsing
 * (coordinator/api_request.c) and the reasoning / stop-string filter
 * (coordinator/api_text.c).  The server around them is tested end to end by
 * tests/api/test_http_api.py. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api.h"

static int parse(enum api_kind kind, const char *body, struct api_request *r, struct api_error *e)
{
    return api_parse_request(kind, body, strlen(body), r, e);
}

/* The request must fail with 400 naming param (NULL: no param). */
static void expect_400(enum api_kind kind, const char *body, const char *param)
{
    struct api_request r;
    struct api_error e;
    int st = parse(kind, body, &r, &e);
    cr_expect_eq(st, 400, "%s: status %d (%s)", body, st, e.message);
    cr_expect_eq(e.status, 400);
    cr_expect_str_eq(e.type, "invalid_request_error");
    cr_expect_str_eq(e.param, param ? param : "", "%s: param '%s', want '%s' (%s)", body, e.param, param ? param : "", e.message);
    cr_expect(e.message[0]);
    api_request_free(&r);
}

Test(api_request, chat_fields)
{
    struct api_request r;
    struct api_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                       "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"R\"},{\"role\":\"developer\",\"content\":\"D\"}],"
                       "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,"
                       "\"seed\":42,\"stop\":[\"x\",\"yz\"],\"presence_penalty\":1.5,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"think\":\"off\",\"accuracy_level\":2,"
                       "\"context_length\":100,\"prefill_chunk\":16,\"n\":1,\"user\":\"u1\",\"frequency_penalty\":0,"
                       "\"ignore_eos\":true}";
    cr_assert_eq(parse(API_CHAT, body, &r, &e), 0, "%s", e.message);
    cr_expect_str_eq(r.model, "m");
    cr_assert_eq(r.n_msgs, 4);
    cr_expect_eq(r.msgs[0].role, CHAT_SYSTEM);
    cr_expect_str_eq(r.msgs[1].content, "ab");
    cr_expect_str_eq(r.msgs[2].content, "");
    cr_expect_str_eq(r.msgs[2].reasoning, "R");
    cr_expect_eq(r.msgs[3].role, CHAT_SYSTEM, "developer is a system message");
    cr_expect_eq(r.max_tokens, 7, "max_completion_tokens wins");
    cr_expect_float_eq(r.sp.temperature, 0.5f, 1e-6);
    cr_expect_float_eq(r.sp.top_p, 0.9f, 1e-6);
    cr_expect_eq(r.sp.top_k, 0);
    cr_expect_float_eq(r.sp.presence_penalty, 1.5f, 1e-6);
    cr_expect(r.has_seed);
    cr_expect_eq(r.sp.seed, 42);
    cr_assert_eq(r.n_stop, 2);
    cr_expect_str_eq(r.stop[1], "yz");
    cr_expect(r.stream && r.include_usage);
    cr_expect(!r.think);
    cr_expect_eq(r.accuracy_level, 2);
    cr_expect_eq(r.context_length, 100);
    cr_expect_eq(r.prefill_chunk, 16);
    cr_expect(r.ignore_eos);
    api_request_free(&r);
}

Test(api_request, defaults_follow_think)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":null,\"seed\":null}", &r, &e), 0);
    struct sampling_params on = sampling_defaults(true), off = sampling_defaults(false);
    cr_expect(r.think);
    cr_expect_float_eq(r.sp.temperature, on.temperature, 1e-6);
    cr_expect_eq(r.max_tokens, -1);
    cr_expect(!r.has_seed && !r.stream && r.n_stop == 0);
    cr_expect_eq(r.accuracy_level, 3);
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"think\":false}", &r, &e), 0);
    cr_expect_float_eq(r.sp.temperature, off.temperature, 1e-6);
    cr_expect_float_eq(r.sp.top_p, off.top_p, 1e-6);
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                 "\"chat_template_kwargs\":{\"enable_thinking\":false}}", &r, &e), 0);
    cr_expect(!r.think);
    api_request_free(&r);
}

Test(api_request, completion_and_tokenize)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_COMPLETION, "{\"prompt\":\"abc\",\"max_tokens\":3}", &r, &e), 0);
    cr_expect_str_eq(r.prompt, "abc");
    cr_expect_eq(r.max_tokens, 3);
    api_request_free(&r);
    cr_assert_eq(parse(API_COMPLETION, "{\"prompt\":[\"one\"]}", &r, &e), 0);
    cr_expect_str_eq(r.prompt, "one");
    api_request_free(&r);
    cr_assert_eq(parse(API_TOKENIZE, "{\"text\":\"t\"}", &r, &e), 0);
    cr_expect_str_eq(r.prompt, "t");
    api_request_free(&r);
    cr_assert_eq(parse(API_TOKENIZE, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"think\":\"on\"}", &r, &e), 0);
    cr_expect(r.msgs && r.n_msgs == 1 && r.think);
    api_request_free(&r);
}

Test(api_request, malformed)
{
    expect_400(API_CHAT, "", NULL);
    expect_400(API_CHAT, "{", NULL);
    expect_400(API_CHAT, "{\"messages\":[]} x", NULL);
    expect_400(API_CHAT, "[1]", NULL);
    expect_400(API_CHAT, "\"s\"", NULL);
    struct api_request r;
    struct api_error e;
    cr_expect_eq(api_parse_request(API_CHAT, "{\"a\":1}", 3, &r, &e), 400, "a truncated body (length, not NUL) fails");
    api_request_free(&r);
}

Test(api_request, wrong_types_name_the_param)
{
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[512];
#define BAD(extra, param) (snprintf(b, sizeof b, "{%s,%s}", m, extra), expect_400(API_CHAT, b, param))
    BAD("\"temperature\":\"hot\"", "temperature");
    BAD("\"temperature\":3", "temperature");
    BAD("\"top_p\":0", "top_p");
    BAD("\"top_k\":1.5", "top_k");
    BAD("\"max_tokens\":\"5\"", "max_tokens");
    BAD("\"max_tokens\":0", "max_tokens");
    BAD("\"seed\":true", "seed");
    BAD("\"presence_penalty\":9", "presence_penalty");
    BAD("\"stream\":\"yes\"", "stream");
    BAD("\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage");
    BAD("\"stream_options\":3", "stream_options");
    BAD("\"stop\":5", "stop");
    BAD("\"stop\":\"\"", "stop");
    BAD("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop");
    BAD("\"stop\":[\"a\",2]", "stop");
    BAD("\"think\":\"maybe\"", "think");
    BAD("\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}", "chat_template_kwargs.enable_thinking");
    BAD("\"accuracy_level\":4", "accuracy_level");
    BAD("\"context_length\":0", "context_length");
    BAD("\"prefill_chunk\":9000", "prefill_chunk");
    BAD("\"model\":7", "model");
    BAD("\"n\":2", "n");
    BAD("\"ignore_eos\":1", "ignore_eos");
#undef BAD
    expect_400(API_CHAT, "{}", "messages");
    expect_400(API_CHAT, "{\"messages\":\"x\"}", "messages");
    expect_400(API_CHAT, "{\"messages\":[]}", "messages");
    expect_400(API_CHAT, "{\"messages\":[3]}", "messages[0]");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\",\"content\":\"b\"}]}", "messages[1].role");
    expect_400(API_CHAT, "{\"messages\":[{\"content\":\"a\"}]}", "messages[0].role");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", "messages[0].content");
    expect_400(API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":1}]}",
               "messages[0].reasoning_content");
    expect_400(API_COMPLETION, "{}", "prompt");
    expect_400(API_COMPLETION, "{\"prompt\":1}", "prompt");
    expect_400(API_TOKENIZE, "{\"text\":[1,2]}", "text");
}

Test(api_request, error_messages_are_valid_utf8)
{
    struct api_request r;
    struct api_error e;
    /* A role of 'a' and 45 two-byte characters is quoted cut at 40 bytes, in
     * the middle of a character. */
    char body[256] = "{\"messages\":[{\"role\":\"a";
    for (int i = 0; i < 45; i++) strcat(body, "\xC3\xA9");
    strcat(body, "\",\"content\":\"x\"}]}");
    cr_assert_eq(parse(API_CHAT, body, &r, &e), 400);
    cr_expect(strstr(e.message, "\xC3\xA9\xC3\xA9"), "%s", e.message);
    for (const unsigned char *p = (const unsigned char *)e.message; *p; p++) {
        if (*p < 0x80) continue;
        cr_assert(*p == 0xC3 && p[1] == 0xA9, "invalid UTF-8 at byte %zu of '%s'", (size_t)(p - (const unsigned char *)e.message), e.message);
        p++;
    }
    api_request_free(&r);
    api_errorf(&e, 404, "invalid_request_error", NULL, NULL, "path %s", "/a\xE2\x82");
    cr_expect_str_eq(e.message, "path /a??");
}

Test(api_request, error_json)
{
    struct api_error e;
    api_errorf(&e, 429, "rate_limit_exceeded", NULL, "queue_full", "full: %d", 3);
    cJSON *o = api_error_json(&e), *x = cJSON_GetObjectItemCaseSensitive(o, "error");
    cr_assert(cJSON_IsObject(x));
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(x, "message")->valuestring, "full: 3");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(x, "type")->valuestring, "rate_limit_exceeded");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(x, "param")));
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(x, "code")->valuestring, "queue_full");
    cJSON_Delete(o);
}

/* ---------- api_text ---------- */

struct sink {
    char r[512], c[512];
    int pieces;
};

static int sink_emit(void *ctx, bool reasoning, const char *s, size_t n)
{
    struct sink *k = ctx;
    char *d = reasoning ? k->r : k->c;
    cr_assert_lt(strlen(d) + n, 512);
    strncat(d, s, n);
    k->pieces++;
    return 0;
}

/* Pushes text in pieces of `step` bytes; returns the push result that ended it. */
static int feed(struct api_text *t, struct sink *k, const char *text, size_t step)
{
    size_t n = strlen(text);
    for (size_t at = 0; at < n; at += step) {
        int rc = api_text_push(t, text + at, n - at < step ? n - at : step, sink_emit, k);
        if (rc) return rc;
    }
    return api_text_finish(t, sink_emit, k);
}

/* What reaches the sink when text goes in pieces of `step` bytes through a
 * fresh api_text (think: the text starts inside a think block; n_stops stop
 * strings); *rc = feed's result. */
static struct sink through(bool think, char **stops, int n_stops, const char *text, size_t step, int *rc)
{
    struct api_text t;
    struct sink k = {0};
    api_text_init(&t, think, stops, n_stops);
    *rc = feed(&t, &k, text, step);
    api_text_free(&t);
    return k;
}

Test(api_text, think_split_any_piece_size)
{
    for (size_t step = 1; step <= 12; step++) {
        int rc;
        struct sink k = through(true, NULL, 0, "Let me think.\n</think>\n\nThe answer is 4.", step, &rc);
        cr_assert_eq(rc, 0);
        cr_expect_str_eq(k.r, "Let me think.", "step %zu", step);
        cr_expect_str_eq(k.c, "The answer is 4.", "step %zu", step);
    }
}

Test(api_text, no_think_block_is_all_content)
{
    int rc;
    struct sink k = through(false, NULL, 0, "a</think>b\n", 2, &rc);
    cr_assert_eq(rc, 0);
    cr_expect_str_eq(k.c, "a</think>b\n", "outside a think block the marker is plain text");
    cr_expect_str_eq(k.r, "");
}

Test(api_text, unclosed_think_is_reasoning)
{
    int rc;
    struct sink k = through(true, NULL, 0, "still thinking </thi", 3, &rc);
    cr_assert_eq(rc, 0);
    cr_expect_str_eq(k.r, "still thinking </thi", "a marker prefix at the end is released at finish");
    cr_expect_str_eq(k.c, "");
}

Test(api_text, stop_string_held_back_then_cut)
{
    char *stops[] = {"world", "xyz"};
    for (size_t step = 1; step <= 7; step++) {
        struct api_text t;
        struct sink k = {0};
        api_text_init(&t, false, stops, 2);
        cr_assert_eq(feed(&t, &k, "Hello world and more", step), 1, "step %zu", step);
        cr_expect_str_eq(k.c, "Hello ", "step %zu", step);
        cr_expect(t.stopped);
        cr_expect_eq(api_text_push(&t, "z", 1, sink_emit, &k), 1, "after a stop nothing more is taken");
        api_text_free(&t);
    }
}

Test(api_text, held_prefix_never_emitted_early)
{
    char *stops[] = {"STOP"};
    struct api_text t;
    struct sink k = {0};
    api_text_init(&t, false, stops, 1);
    cr_assert_eq(api_text_push(&t, "abcST", 5, sink_emit, &k), 0);
    cr_expect_str_eq(k.c, "abc", "'ST' could start STOP: held");
    cr_assert_eq(api_text_push(&t, "O", 1, sink_emit, &k), 0);
    cr_expect_str_eq(k.c, "abc");
    cr_assert_eq(api_text_push(&t, "x", 1, sink_emit, &k), 0);
    cr_expect_str_eq(k.c, "abcSTOx", "not a stop after all: released");
    cr_assert_eq(api_text_push(&t, "ST", 2, sink_emit, &k), 0);
    cr_assert_eq(api_text_finish(&t, sink_emit, &k), 0);
    cr_expect_str_eq(k.c, "abcSTOxST", "the end of the text releases the held tail");
    api_text_free(&t);
}

Test(api_text, stop_in_reasoning_and_utf8)
{
    char *stops[] = {"\xC3\xA9t\xC3\xA9"}; /* été */
    struct api_text t;
    struct sink k = {0};
    api_text_init(&t, true, stops, 1);
    /* "un bel été" pushed in whole characters. */
    const char *pieces[] = {"un ", "bel ", "\xC3\xA9", "t", "\xC3\xA9", "!"};
    int rc = 0;
    for (int i = 0; i < 6 && !rc; i++) rc = api_text_push(&t, pieces[i], strlen(pieces[i]), sink_emit, &k);
    cr_expect_eq(rc, 1);
    cr_expect_str_eq(k.r, "un bel ");
    api_text_free(&t);
}

Test(api_text, stop_before_think_end_wins)
{
    char *stops[] = {"END"};
    int rc;
    struct sink k = through(true, stops, 1, "abEND</think>content", 4, &rc);
    cr_expect_eq(rc, 1);
    cr_expect_str_eq(k.r, "ab");
    cr_expect_str_eq(k.c, "");
    k = through(true, stops, 1, "ab</think>\ncontEND!", 5, &rc);
    cr_expect_eq(rc, 1);
    cr_expect_str_eq(k.r, "ab");
    cr_expect_str_eq(k.c, "cont");
}

/* Generated text into JSON (api_add_text): a NUL the model produced becomes
 * U+FFFD instead of ending the answer (the text after it stays), as does an
 * invalid byte; quotes, backslashes and control bytes are escaped, valid
 * characters pass unchanged; the result parses back to that text. */
Test(api_text, generated_bytes_into_json)
{
    static const char text[] = "a\0b\"c\\d\x01\xff\xc3\xa9z"; /* a NUL b " c \ d ^A <bad> é z */
    cJSON *o = cJSON_CreateObject();
    cr_assert_eq(api_add_text(o, "content", text, sizeof text - 1), 0);
    char *s = cJSON_PrintUnformatted(o);
    cr_assert_str_eq(s, "{\"content\":\"a\xef\xbf\xbd" "b\\\"c\\\\d\\u0001\xef\xbf\xbd\xc3\xa9z\"}", "%s", s);
    cJSON *back = cJSON_Parse(s);
    cr_assert_not_null(back, "not JSON: %s", s);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(back, "content");
    cr_assert(cJSON_IsString(c));
    cr_assert_str_eq(c->valuestring, "a\xef\xbf\xbd" "b\"c\\d\x01\xef\xbf\xbd\xc3\xa9z", "%s", c->valuestring);
    free(s), cJSON_Delete(o), cJSON_Delete(back);
    o = cJSON_CreateObject();
    cr_assert_eq(api_add_text(o, "t", "", 0), 0);
    s = cJSON_PrintUnformatted(o);
    cr_assert_str_eq(s, "{\"t\":\"\"}");
    free(s), cJSON_Delete(o);
}
