/* test_api_tools.c — tool calls and the request rules around them
 * (coordinator/api_tools.c, api_toolcall.c, api_request.c): the template's
 * tojson, tools / tool_choice parsing, the call parser with schema typing,
 * the streaming scanner at every piece size, and the 400s for fields the
 * server does not serve, NUL and invalid UTF-8, integer numbers in messages. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/api.h"
#include "core/util/err.h"

static int parse(enum api_kind kind, const char *body, struct api_request *r, struct api_error *e)
{
    return api_parse_request(kind, body, strlen(body), r, e);
}

static void expect_error(enum api_kind kind, const char *body, const char *param, const char *code)
{
    struct api_request r;
    struct api_error e;
    int st = parse(kind, body, &r, &e);
    cr_expect_eq(st, 400, "%s: status %d (%s)", body, st, e.message);
    cr_expect_str_eq(e.param, param ? param : "", "%s: param '%s', want '%s' (%s)", body, e.param, param ? param : "", e.message);
    if (code) cr_expect_str_eq(e.code, code, "%s: code %s, want %s (%s)", body, e.code, code, e.message);
    api_request_free(&r);
}

#define HI "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOL_W "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather <now> & \\u00e9t\\u00e9\"," \
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}," \
               "\"hourly\":{\"type\":\"boolean\"},\"ratio\":{\"type\":\"number\"},\"opts\":{\"type\":\"object\"}," \
               "\"note\":{\"type\":[\"string\",\"null\"]},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}}," \
               "\"required\":[\"city\"]}}}"
#define TOOL_T "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}"

Test(api_tools, pyjson_is_pythons_json_dumps)
{
    cJSON *v = cJSON_Parse("{\"b\":[1,2.5,-3e-7,1e20,true,null],\"a\":{\"x\":\"q\\\"\\\\\\n\\t\\u0001</é>\"},\"e\":{},\"f\":[]}");
    struct api_buf b = {0};
    cr_assert_eq(api_pyjson(v, &b), 0);
    cr_expect_str_eq(b.p, "{\"b\": [1, 2.5, -3e-07, 1e+20, true, null], \"a\": {\"x\": \"q\\\"\\\\\\n\\t\\u0001</é>\"}, "
                          "\"e\": {}, \"f\": []}");
    api_buf_free(&b);
    cJSON_Delete(v);
}

Test(api_tools, tools_and_tool_choice)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"tools\":[" TOOL_W "," TOOL_T "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},"
                                 "\"parallel_tool_calls\":false}", &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_tools, 2);
    cr_expect_str_eq(r.tools[0].name, "get_weather");
    cr_expect(strstr(r.tools[0].json, "\"description\": \"Weather <now> & été\""), "%s", r.tools[0].json);
    cr_expect(r.tools[0].props && !r.tools[1].props->child);
    cr_expect_eq(r.tool_choice, API_TOOLS_NAMED);
    cr_expect_str_eq(r.tool_name, "get_time");
    cr_expect(!r.parallel_tool_calls);
    char buf[96];
    cr_expect_str_eq(api_forced_call(&r, buf, sizeof buf), "<tool_call>\n<function=get_time>\n");
    char *text;
    size_t len;
    cr_assert_eq(api_render_prompt(&r, &text, &len, &e), 0);
    cr_expect(strstr(text, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), "%s", text);
    const char *tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_time>\n";
    cr_expect_str_eq(text + len - strlen(tail), tail, "a forced call closes the think block: %s", text);
    free(text);
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"tools\":[" TOOL_W "],\"tool_choice\":\"required\"}", &r, &e), 0);
    cr_expect_str_eq(api_forced_call(&r, buf, sizeof buf), "<tool_call>\n<function=");
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"tools\":[" TOOL_W "],\"tool_choice\":\"none\"}", &r, &e), 0);
    cr_assert_eq(api_render_prompt(&r, &text, &len, &e), 0);
    cr_expect(!strstr(text, "<tools>"), "tool_choice none: no tools in the prompt");
    free(text);
    api_request_free(&r);
    expect_error(API_CHAT, "{" HI ",\"tools\":{}}", "tools", "invalid_type");
    expect_error(API_CHAT, "{" HI ",\"tools\":[{\"type\":\"code_interpreter\"}]}", "tools[0].type", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools[0].function.name", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true}}]}", "tools[0].function.strict",
                 "unsupported_parameter");
    expect_error(API_CHAT, "{" HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"x\":1}}]}", "tools[0].function.x", "unknown_parameter");
    expect_error(API_CHAT, "{" HI ",\"tools\":[" TOOL_T "," TOOL_T "]}", "tools", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"tools\":[" TOOL_T "],\"tool_choice\":\"sometimes\"}", "tool_choice", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"tools\":[" TOOL_T "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", "tool_choice",
                 "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"tool_choice\":\"required\"}", "tool_choice", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "invalid_type");
}

Test(api_tools, history_calls_become_parameters)
{
    struct api_request r;
    struct api_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                       "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
                       "\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":3,\\\"opts\\\":{\\\"u\\\":[1,\\\"x\\\"]}}\"}}]},"
                       "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}]}";
    cr_assert_eq(parse(API_CHAT, body, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.msgs[1].n_calls, 1);
    const struct chat_call *c = &r.msgs[1].calls[0];
    cr_expect_str_eq(c->name, "get_weather");
    cr_assert_eq(c->n_params, 3);
    cr_expect_str_eq(c->params[0].value, "Paris");
    cr_expect_str_eq(c->params[1].value, "3");
    cr_expect_str_eq(c->params[2].value, "{\"u\": [1, \"x\"]}");
    api_request_free(&r);
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"w\",\"tool_calls\":[]}]}", "messages[0].tool_calls", "invalid_value");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1\"}}]}]}",
                 "messages[0].tool_calls[0].function.arguments", "invalid_value");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"w\",\"name\":\"bob\"}]}", "messages[0].name", "unsupported_parameter");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"w\",\"tool_call_id\":\"x\"}]}", "messages[0].tool_call_id", "invalid_value");
}

/* ---------- the call parser ---------- */

static struct api_request tools_req(void)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"tools\":[" TOOL_W "," TOOL_T "]}", &r, &e), 0, "%s", e.message);
    return r;
}

static char *parse_block(const struct api_request *r, const char *block, int want_rc, char *err)
{
    struct api_call c;
    int rc = api_tool_parse_block(block, strlen(block), r->tools, r->n_tools, &c, err, 160);
    cr_assert_eq(rc ? NB_EFORMAT : 0, want_rc, "%s: rc %d (%s)", block, rc, rc ? err : "");
    if (rc) return NULL;
    char *out = malloc(strlen(c.name) + strlen(c.arguments) + 2);
    sprintf(out, "%s %s", c.name, c.arguments);
    api_call_free(&c);
    return out;
}

Test(api_toolcall, values_typed_by_the_schema)
{
    struct api_request r = tools_req();
    char err[160];
    char *s = parse_block(&r, "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n7\n</parameter>\n"
                              "<parameter=hourly>\nTrue\n</parameter>\n<parameter=ratio>\n2.50\n</parameter>\n<parameter=opts>\n{\"a\": [1]}\n"
                              "</parameter>\n<parameter=note>\nNone\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n<parameter=extra>\n42\n"
                              "</parameter>\n</function>\n</tool_call>", 0, err);
    cr_expect_str_eq(s, "get_weather {\"city\":\"New York\",\"days\":7,\"hourly\":true,\"ratio\":2.5,\"opts\":{\"a\":[1]},\"note\":null,"
                        "\"limit\":null,\"extra\":\"42\"}");
    free(s);
    /* Values that do not convert stay strings; a multi-line value keeps its inner newlines; a value may hold the tags. */
    s = parse_block(&r, "<tool_call>\n<function=get_weather>\n<parameter=city>\nline 1\n\nline </parameter> 3\n</parameter>\n"
                        "<parameter=days>\nmany\n</parameter>\n<parameter=opts>\n{bad\n</parameter>\n</function>\n</tool_call>", 0, err);
    cr_expect_str_eq(s, "get_weather {\"city\":\"line 1\\n\\nline </parameter> 3\",\"days\":\"many\",\"opts\":\"{bad\"}");
    free(s);
    s = parse_block(&r, "<tool_call><function=get_time></function></tool_call>", 0, err);
    cr_expect_str_eq(s, "get_time {}");
    free(s);
    const char *bad[] = {
        "<tool_call>\n<function=launch_rockets>\n</function>\n</tool_call>",
        "<tool_call>\nget_time\n</tool_call>",
        "<tool_call>\n<function=get_time\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=city>\ny\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\nhello\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_time>\n</function>\ntrailing\n</tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        parse_block(&r, bad[i], NB_EFORMAT, err);
        cr_expect(err[0], "%s: an error message", bad[i]);
    }
    cr_expect(strstr((parse_block(&r, bad[0], NB_EFORMAT, err), err), "launch_rockets"), "%s", err);
    api_request_free(&r);
}

/* ---------- the scanner ---------- */

struct out {
    char content[2048];
    char calls[2048];
    int n_calls;
};

static int out_content(void *ctx, bool reasoning, const char *s, size_t n)
{
    struct out *o = ctx;
    cr_assert(!reasoning);
    cr_assert_lt(strlen(o->content) + n, sizeof o->content);
    strncat(o->content, s, n);
    return 0;
}

static int out_call(void *ctx, struct api_call *c)
{
    struct out *o = ctx;
    snprintf(o->calls + strlen(o->calls), sizeof o->calls - strlen(o->calls), "[%s %s]", c->name, c->arguments);
    o->n_calls++;
    api_call_free(c);
    return 0;
}

/* text through a fresh scanner in pieces of step bytes; *error the scanner's; returns the last push's result. */
static struct out scan(const struct api_request *r, const char *pre, const char *text, size_t step, bool parallel, char *error, int *last)
{
    struct api_toolscan t;
    struct out o = {0};
    api_toolscan_init(&t, r->tools, r->n_tools, parallel);
    *last = pre ? api_toolscan_push(&t, pre, strlen(pre), out_content, out_call, &o) : 0;
    size_t n = strlen(text);
    for (size_t at = 0; at < n && !*last; at += step) *last = api_toolscan_push(&t, text + at, n - at < step ? n - at : step, out_content, out_call, &o);
    if (*last >= 0) cr_assert_eq(api_toolscan_finish(&t, out_content, &o), 0);
    strcpy(error, t.error);
    api_toolscan_free(&t);
    return o;
}

static const char two_calls[] = "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>\n"
                                "<tool_call>\n<function=get_time>\n</function>\n</tool_call>";

Test(api_toolcall, scanner_any_piece_size)
{
    struct api_request r = tools_req();
    char error[200];
    int last;
    for (size_t step = 1; step <= sizeof two_calls; step++) {
        struct out o = scan(&r, NULL, two_calls, step, true, error, &last);
        cr_assert_str_eq(o.content, "Let me check.", "step %zu", step);
        cr_assert_str_eq(o.calls, "[get_weather {\"city\":\"Oslo\"}][get_time {}]", "step %zu", step);
        cr_assert_str_eq(error, "");
        cr_assert_eq(last, 0);
    }
    /* No call: all content, trailing blanks and a half-written "<tool" included. */
    struct out o = scan(&r, NULL, "plain answer <tool\n\n", 3, true, error, &last);
    cr_expect_str_eq(o.content, "plain answer <tool\n\n");
    cr_expect_eq(o.n_calls, 0);
    /* parallel_tool_calls false: the first call ends it. */
    o = scan(&r, NULL, two_calls, 7, false, error, &last);
    cr_expect_eq(last, 1);
    cr_expect_str_eq(o.calls, "[get_weather {\"city\":\"Oslo\"}]");
    /* A forced opening (tool_choice required) starts the scan inside a call. */
    o = scan(&r, "<tool_call>\n<function=", "get_time>\n</function>\n</tool_call>", 2, true, error, &last);
    cr_expect_str_eq(o.calls, "[get_time {}]");
    cr_expect_str_eq(o.content, "");
    api_request_free(&r);
}

Test(api_toolcall, malformed_calls_stay_content)
{
    struct api_request r = tools_req();
    char error[200];
    int last;
    const char *text = "A\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=nope>\n</function>\n</tool_call>tail";
    for (size_t step = 1; step < 12; step++) {
        struct out o = scan(&r, NULL, text, step, true, error, &last);
        cr_assert_str_eq(o.calls, "[get_time {}]", "step %zu", step);
        cr_assert_str_eq(o.content, "A<tool_call>\n<function=nope>\n</function>\n</tool_call>tail", "step %zu", step);
        cr_assert(strstr(error, "tool call 2 is malformed") && strstr(error, "nope"), "%s", error);
    }
    struct out o = scan(&r, NULL, "x <tool_call>\n<function=get_time>\n", 4, true, error, &last);
    cr_expect_str_eq(o.content, "x<tool_call>\n<function=get_time>\n");
    cr_expect(strstr(error, "ended inside"), "%s", error);
    api_request_free(&r);
}

/* ---------- every field is served or refused ---------- */

Test(api_request, unserved_and_unknown_fields_are_400)
{
    static const char *const unserved[][2] = {
        {"\"logit_bias\":{\"5\":1}", "logit_bias"},     {"\"frequency_penalty\":0.5", "frequency_penalty"},
        {"\"n\":2", "n"},                               {"\"audio\":{\"voice\":\"x\"}", "audio"},
        {"\"modalities\":[\"text\",\"audio\"]", "modalities"}, {"\"prediction\":{\"type\":\"content\"}", "prediction"},
        {"\"web_search_options\":{}", "web_search_options"}, {"\"functions\":[]", "functions"},
        {"\"function_call\":\"auto\"", "function_call"}, {"\"reasoning_effort\":\"low\"", "reasoning_effort"},
        {"\"verbosity\":\"low\"", "verbosity"},         {"\"metadata\":{\"a\":\"b\"}", "metadata"},
        {"\"store\":true", "store"},                    {"\"service_tier\":\"flex\"", "service_tier"},
        {"\"top_logprobs\":3", "top_logprobs"},        {"\"logprobs\":true,\"top_logprobs\":21", "top_logprobs"},
        {"\"logprobs\":1", "logprobs"},
        {"\"safety_identifier\":\"x\"", "safety_identifier"}, {"\"prompt_cache_key\":\"k\"", "prompt_cache_key"},
        {"\"frobnicate\":1", "frobnicate"},             {"\"stream_options\":{\"include_usage\":true,\"x\":1}", "stream_options.x"},
        {"\"chat_template_kwargs\":{\"foo\":1}", "chat_template_kwargs.foo"},
    };
    char b[512];
    for (size_t i = 0; i < sizeof unserved / sizeof *unserved; i++) {
        snprintf(b, sizeof b, "{" HI ",%s}", unserved[i][0]);
        expect_error(API_CHAT, b, unserved[i][1], NULL);
    }
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"x\":1}]}", "messages[0].x", "unknown_parameter");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\",\"cache\":1}]}]}",
                 "messages[0].content.cache", "unknown_parameter");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"echo\":true}", "echo", "unsupported_parameter");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix", "unsupported_parameter");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"best_of\":2}", "best_of", "unsupported_parameter");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", "invalid_value");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", "invalid_type");
    expect_error(API_COMPLETION, "{\"prompt\":\"a\",\"messages\":[]}", "messages", "unknown_parameter");
    expect_error(API_TOKENIZE, "{\"text\":\"a\",\"max_tokens\":3}", "max_tokens", "unknown_parameter");
    /* Their harmless values are served. */
    struct api_request r;
    struct api_error e;
    cr_expect_eq(parse(API_CHAT, "{" HI ",\"store\":false,\"service_tier\":\"auto\",\"modalities\":[\"text\"],\"logit_bias\":{},"
                                 "\"frequency_penalty\":0,\"logprobs\":false,\"user\":\"me\",\"metadata\":null,\"response_format\":{\"type\":\"text\"}}",
                       &r, &e), 0, "%s", e.message);
    api_request_free(&r);
    cr_expect_eq(parse(API_COMPLETION, "{\"prompt\":\"a\",\"echo\":false,\"best_of\":1,\"suffix\":\"\",\"logprobs\":3}", &r, &e), 0, "%s", e.message);
    cr_expect(r.logprobs && r.top_logprobs == 3);
    api_request_free(&r);
    cr_expect_eq(parse(API_CHAT, "{" HI ",\"logprobs\":true,\"top_logprobs\":20}", &r, &e), 0, "%s", e.message);
    cr_expect(r.logprobs && r.top_logprobs == 20);
    api_request_free(&r);
}

Test(api_request, nul_and_invalid_utf8_name_the_param)
{
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "messages[0].content", "invalid_value");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\\u0000\"}]}]}", "messages[0].content[0].text",
                 "invalid_value");
    expect_error(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\"}]}", "messages[0].content", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"stop\":[\"ok\",\"\xc3\"]}", "stop[1]", "invalid_value");
    expect_error(API_COMPLETION, "{\"prompt\":\"\xed\xa0\x80\"}", "prompt", "invalid_value");
    struct api_request r;
    struct api_error e;
    /* An escaped backslash before "u0000" is text, not a NUL. */
    cr_assert_eq(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\\\u0000\"}]}", &r, &e), 0, "%s", e.message);
    cr_expect_str_eq(r.msgs[0].content, "a\\u0000");
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}", &r, &e), 400);
    cr_expect(strstr(e.message, "NUL"), "%s", e.message);
    api_request_free(&r);
}

Test(api_request, numbers_in_messages_are_integers)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"max_tokens\":99999999}", &r, &e), 400);
    cr_expect(strstr(e.message, "99999999") && strstr(e.message, "16777216") && !strstr(e.message, "e+"), "%s", e.message);
    api_request_free(&r);
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"temperature\":2.25}", &r, &e), 400);
    cr_expect(strstr(e.message, "2.25") && strstr(e.message, "[0, 2]"), "%s", e.message);
    api_request_free(&r);
}

Test(api_request, think_budget_and_anthropic_thinking)
{
    struct api_request r;
    struct api_error e;
    cr_assert_eq(parse(API_CHAT, "{" HI ",\"think_budget\":64}", &r, &e), 0, "%s", e.message);
    cr_expect_eq(r.think_budget, 64);
    api_request_free(&r);
    expect_error(API_CHAT, "{" HI ",\"think\":false,\"think_budget\":64}", "think_budget", "invalid_value");
    expect_error(API_CHAT, "{" HI ",\"think_budget\":0}", "think_budget", "invalid_value");
    const char *m = "{\"max_tokens\":4096,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    cr_assert_eq(api_parse_any(API_MESSAGES, m, strlen(m), &r, &e), 0, "%s", e.message);
    cr_expect(r.think && r.think_budget == 2048 && r.kind == API_CHAT && r.dialect == API_ANTHROPIC);
    api_request_free(&r);
    const char *off = "{\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    cr_assert_eq(api_parse_any(API_MESSAGES, off, strlen(off), &r, &e), 0, "%s", e.message);
    cr_expect(!r.think && !r.think_budget, "Anthropic: no thinking unless enabled");
    api_request_free(&r);
    const char *small = "{\"max_tokens\":4096,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    cr_assert_eq(api_parse_any(API_MESSAGES, small, strlen(small), &r, &e), 400);
    cr_expect_str_eq(e.param, "thinking.budget_tokens");
    api_request_free(&r);
}

/* ---------- logprobs ---------- */

Test(api_logprobs, log_softmax_and_the_best_k)
{
    const float row[] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f};
    struct api_logprob lp;
    api_logprob_row(row, 6, 4, 3, &lp);
    double lse = 0;
    for (int i = 0; i < 6; i++) lse += exp(row[i]);
    lse = log(lse);
    cr_expect_float_eq(lp.logprob, 0.5 - lse, 1e-5);
    cr_assert_eq(lp.n_top, 3);
    cr_expect(lp.top_id[0] == 1 && lp.top_id[1] == 3 && lp.top_id[2] == 5, "descending, ties by id: %d %d %d", lp.top_id[0], lp.top_id[1], lp.top_id[2]);
    cr_expect_float_eq(lp.top_logprob[0], 3.0 - lse, 1e-5);
    cr_expect_float_eq(lp.top_logprob[2], 2.0 - lse, 1e-5);
    api_logprob_row(row, 6, 0, 20, &lp);
    cr_assert_eq(lp.n_top, 6, "k over the vocabulary: all of it");
    double sum = 0;
    for (int j = 0; j < lp.n_top; j++) {
        sum += exp(lp.top_logprob[j]);
        if (j) cr_expect_geq(lp.top_logprob[j - 1], lp.top_logprob[j]);
    }
    cr_expect_float_eq(sum, 1.0, 1e-5, "the whole distribution sums to 1");
    api_logprob_row(row, 6, 2, 0, &lp);
    cr_expect_eq(lp.n_top, 0);
    /* A large row: no overflow. */
    static float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = 1000.0f + (float)(i % 7);
    api_logprob_row(big, 1000, 6, 1, &lp);
    cr_expect(isfinite(lp.logprob) && lp.logprob < 0 && lp.top_id[0] == 6, "%f %d", lp.logprob, lp.top_id[0]);
}
