/* test_chat.c — the chat template in C: thinking on/off, history stripping, trimming, the query
 * rule, tools and tool calls, errors (the bytes against the released Jinja template:
 * tests/api/test_chat_template.py). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat/chat.h"

static char *render(const struct chat_msg *m, int n, bool think)
{
    char *out = NULL, err[128];
    size_t len = 0;
    cr_assert_eq(chat_render(m, n, think, &out, &len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(strlen(out), len);
    return out;
}

Test(chat, single_user_turn_thinking_on_and_off)
{
    struct chat_msg m[] = {{.role = CHAT_SYSTEM, .content = "Be brief."}, {.role = CHAT_USER, .content = "Hi"}};
    char *on = render(m, 2, true), *off = render(m, 2, false);
    cr_assert_str_eq(on, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                         "<|im_start|>assistant\n<think>\n");
    cr_assert_str_eq(off, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(on);
    free(off);
}

Test(chat, history_loses_thinking)
{
    struct chat_msg m[] = {
        {.role = CHAT_USER, .content = "2+2?"},
        {.role = CHAT_ASSISTANT, .content = "<think>\nadd them\n</think>\n\n4"},
        {.role = CHAT_USER, .content = "and 3+3?"},
    };
    char *s = render(m, 3, true);
    cr_assert_str_eq(s, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                        "<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(s);
}

Test(chat, turns_after_last_user_keep_thinking)
{
    struct chat_msg m[] = {
        {.role = CHAT_USER, .content = "weather?"},
        {.role = CHAT_ASSISTANT, .content = "<tool_call>x</tool_call>", .reasoning = "\nneed a tool\n"},
        {.role = CHAT_TOOL, .content = "sunny"},
    };
    char *s = render(m, 3, false);
    cr_assert_str_eq(s, "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n<think>\nneed a tool\n"
                        "</think>\n\n<tool_call>x</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n"
                        "</tool_response><|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
}

Test(chat, system_not_first_is_an_error)
{
    struct chat_msg m[] = {{.role = CHAT_USER, .content = "a"}, {.role = CHAT_SYSTEM, .content = "b"}};
    char *out = NULL, err[128];
    size_t len;
    cr_assert_lt(chat_render(m, 2, true, &out, &len, err, sizeof err), 0);
    cr_assert(strstr(err, "system"));
    cr_assert_eq(chat_role_from_name("assistant"), CHAT_ASSISTANT);
    cr_assert_eq(chat_role_from_name("robot"), -1);
}

Test(chat, contents_trimmed_and_tools_listed)
{
    const char *tools[] = {"{\"type\": \"function\", \"function\": {\"name\": \"f\"}}", "{\"b\": 1}"};
    struct chat_param ps[] = {{"city", "Paris"}, {"n", "3"}};
    struct chat_call calls[] = {{"f", ps, 2}, {"g", NULL, 0}};
    struct chat_msg m[] = {
        {.role = CHAT_SYSTEM, .content = " \u00a0Sys\n"},
        {.role = CHAT_USER, .content = "\n q \u3000"},
        {.role = CHAT_ASSISTANT, .content = "ok", .calls = calls, .n_calls = 2},
        {.role = CHAT_TOOL, .content = " r1 "},
        {.role = CHAT_TOOL, .content = "r2"},
    };
    struct chat_opts o = {.thinking = true, .tools = tools, .n_tools = 2};
    char *out = NULL, err[128];
    size_t len;
    cr_assert_eq(chat_render_opts(m, 5, &o, &out, &len, err, sizeof err), 0, "%s", err);
    cr_assert(!strncmp(out, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                            "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n{\"b\": 1}\n</tools>\n\nIf you choose", 160), "%s", out);
    const char *rest = strstr(out, "</IMPORTANT>");
    cr_assert(rest);
    cr_assert_str_eq(rest, "</IMPORTANT>\n\nSys<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n\nok\n\n<tool_call>\n<function=f>\n<parameter=city>\nParis\n</parameter>\n"
                           "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call><|im_end|>\n"
                           "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n");
    free(out);
}

Test(chat, the_query_is_the_last_user_turn_that_is_not_a_tool_response)
{
    struct chat_msg m[] = {
        {.role = CHAT_USER, .content = "q"},
        {.role = CHAT_ASSISTANT, .content = "<think>\nplan\n</think>\n\ncall", .reasoning = NULL},
        {.role = CHAT_USER, .content = "<tool_response>\nx\n</tool_response>"},
        {.role = CHAT_ASSISTANT, .content = "done", .reasoning = " why "},
    };
    char *s = render(m, 4, false);
    cr_assert_str_eq(s, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\ncall<|im_end|>\n"
                        "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n"
                        "<|im_start|>assistant\n<think>\nwhy\n</think>\n\ndone<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
    struct chat_msg only_tools[] = {{.role = CHAT_SYSTEM, .content = "s"}, {.role = CHAT_USER, .content = " <tool_response>a</tool_response>"}};
    char *out = NULL, err[128];
    size_t len;
    cr_assert_lt(chat_render(only_tools, 2, true, &out, &len, err, sizeof err), 0);
    cr_assert(strstr(err, "no user query"), "%s", err);
}
