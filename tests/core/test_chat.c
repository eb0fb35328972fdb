/* test_chat.c — ChatML rendering: thinking on/off, history stripping, errors. */
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
    struct chat_msg m[] = {{CHAT_SYSTEM, "Be brief.", NULL}, {CHAT_USER, "Hi", NULL}};
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
        {CHAT_USER, "2+2?", NULL},
        {CHAT_ASSISTANT, "<think>\nadd them\n</think>\n\n4", NULL},
        {CHAT_USER, "and 3+3?", NULL},
    };
    char *s = render(m, 3, true);
    cr_assert_str_eq(s, "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                        "<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(s);
}

Test(chat, turns_after_last_user_keep_thinking)
{
    struct chat_msg m[] = {
        {CHAT_USER, "weather?", NULL},
        {CHAT_ASSISTANT, "<tool_call>x</tool_call>", "\nneed a tool\n"},
        {CHAT_TOOL, "sunny", NULL},
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
    struct chat_msg m[] = {{CHAT_USER, "a", NULL}, {CHAT_SYSTEM, "b", NULL}};
    char *out = NULL, err[128];
    size_t len;
    cr_assert_lt(chat_render(m, 2, true, &out, &len, err, sizeof err), 0);
    cr_assert(strstr(err, "system"));
    cr_assert_eq(chat_role_from_name("assistant"), CHAT_ASSISTANT);
    cr_assert_eq(chat_role_from_name("robot"), -1);
}
