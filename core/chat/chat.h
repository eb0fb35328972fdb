/* chat.h — the model's ChatML chat template, rendered in C.
 *
 * Turns are `<|im_start|>ROLE\nCONTENT<|im_end|>\n`.  The generation prompt
 * opens the assistant turn and, with thinking on, an unclosed think block
 * (`<|im_start|>assistant\n<think>\n`); with thinking off, an empty closed one
 * (`<|im_start|>assistant\n<think>\n\n</think>\n\n`).  As the model's template
 * does, assistant turns before the last user message lose their thinking;
 * assistant turns after it (tool-use steps of the current answer) keep it as
 * `<think>\nREASONING\n</think>\n\nCONTENT`. */
#ifndef NB_CHAT_H
#define NB_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

struct chat_msg {
    enum chat_role role;
    const char *content;   /* may contain "<think>…</think>" for assistant turns */
    const char *reasoning; /* assistant thinking kept apart (NULL: parse it from content) */
};

/* Renders messages + the generation prompt into a malloc'ed NUL-terminated
 * string (*out, length *len). Returns 0, NB_EINVAL (bad role order: a system
 * message that is not first) or NB_ENOMEM. */
int chat_render(const struct chat_msg *msgs, int n, bool thinking, char **out, size_t *len, char *err,
                size_t errlen);

/* Role from its name ("system", "user", "assistant", "tool"), or -1. */
int chat_role_from_name(const char *name);

#endif
