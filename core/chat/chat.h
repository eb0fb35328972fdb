/* chat.h — the model's chat template (Qwen3.5-style ChatML), rendered in C.
 *
 * The same bytes as the model's released Jinja template for the same
 * messages (tests/core/test_chat_template.py renders both and compares):
 * turns are `<|im_start|>ROLE\nCONTENT<|im_end|>\n`, every content trimmed of
 * whitespace (Python's str.strip()).  With tools, the system turn lists them
 * in `<tools>…</tools>` (each tool already serialized as the template's
 * `tojson` does: the caller's job) with the call format's instructions, and
 * the system message's text after them.  Assistant tool calls are
 * `<tool_call>\n<function=NAME>\n<parameter=K>\nVALUE\n</parameter>\n…
 * </function>\n</tool_call>` blocks; tool results travel as
 * `<tool_response>` blocks inside one user turn per run of tool messages.
 * The last user message that is not only a tool response is "the query":
 * assistant turns after it keep their thinking
 * (`<think>\nREASONING\n</think>\n\nCONTENT`), earlier ones lose it.  The
 * generation prompt opens the assistant turn and, with thinking on, an
 * unclosed think block (`<|im_start|>assistant\n<think>\n`); with thinking
 * off, an empty closed one (`…<think>\n\n</think>\n\n`). */
#ifndef NB_CHAT_H
#define NB_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_role { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL };

/* One argument of a call: value is the text the template prints (a string
 * argument as it is, anything else as its JSON). */
struct chat_param {
    const char *name, *value;
};

struct chat_call {
    const char *name;
    const struct chat_param *params;
    int n_params;
};

struct chat_msg {
    enum chat_role role;
    const char *content;   /* may contain "<think>…</think>" for assistant turns */
    const char *reasoning; /* assistant thinking kept apart (NULL: parse it from content) */
    const struct chat_call *calls; /* assistant tool calls */
    int n_calls;
};

struct chat_opts {
    bool thinking;
    const char *const *tools; /* each tool as the template's `tojson` prints it */
    int n_tools;
};

/* Renders messages + the generation prompt into a malloc'ed NUL-terminated
 * string (*out, length *len). Returns 0, NB_EINVAL (what the template
 * refuses: a system message that is not first, no user query) or NB_ENOMEM. */
int chat_render_opts(const struct chat_msg *msgs, int n, const struct chat_opts *o, char **out, size_t *len, char *err,
                     size_t errlen);
/* The same without tools. */
int chat_render(const struct chat_msg *msgs, int n, bool thinking, char **out, size_t *len, char *err,
                size_t errlen);

/* Role from its name ("system", "user", "assistant", "tool"), or -1. */
int chat_role_from_name(const char *name);

#endif
