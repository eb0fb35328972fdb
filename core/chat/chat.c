/* chat.c — the chat template in C (see chat.h).  A growable string and one
 * pass over the messages; the only look-ahead is finding the query (the last
 * user message that is not only a tool response).  Every content is trimmed
 * the way Jinja's `trim` does (Python's str.strip(): ASCII and Unicode
 * whitespace), since the template trims them all. */
#include "core/chat/chat.h"

#include "core/util/err.h"

#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
};

static void put(struct sbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void puts_(struct sbuf *b, const char *s) { put(b, s, strlen(s)); }

static const char *role_names[] = {"system", "user", "assistant", "tool"};

int chat_role_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, role_names[i]) == 0) return i;
    return -1;
}

/* A piece of a string. */
struct span {
    const char *p;
    size_t n;
};

/* Bytes of the whitespace character at s (n bytes left), or 0: Python's
 * str.isspace() set (ASCII \t\n\v\f\r, \x1c-\x1f, space; U+0085, U+00A0,
 * U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). */
static size_t space_at(const unsigned char *s, size_t n)
{
    if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x1f)) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    unsigned cp = ((unsigned)(s[0] & 0x0f) << 12) | ((unsigned)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    if ((s[0] & 0xf0) != 0xe0 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
        cp == 0x3000)
        return 3;
    return 0;
}

/* Length of the whitespace character that ends s[0..n), or 0. */
static size_t space_before(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k) return k;
    return 0;
}

static struct span trim(struct span s)
{
    size_t k;
    while (s.n && (k = space_at((const unsigned char *)s.p, s.n))) s.p += k, s.n -= k;
    while (s.n && (k = space_before((const unsigned char *)s.p, s.n))) s.n -= k;
    return s;
}

static struct span trimmed(const char *s)
{
    s = s ? s : "";
    return trim((struct span){s, strlen(s)});
}

static const char *find(struct span s, const char *pat)
{
    size_t m = strlen(pat);
    return m <= s.n ? memmem(s.p, s.n, pat, m) : NULL;
}

static const char *find_last(struct span s, const char *pat)
{
    const char *last = NULL, *p;
    struct span rest = s;
    while ((p = find(rest, pat))) {
        last = p;
        rest.n -= (size_t)(p + 1 - rest.p);
        rest.p = p + 1;
    }
    return last;
}

/* The template's split of an assistant content that holds a think block:
 * the reasoning is what precedes the first "</think>" (trailing newlines
 * dropped), after its last "<think>" (leading newlines dropped); the answer
 * what follows the last "</think>" (leading newlines dropped). */
static void split_think(struct span c, struct span *r, struct span *a)
{
    const char *first = find(c, "</think>"), *last = find_last(c, "</think>");
    *r = (struct span){c.p, (size_t)(first - c.p)};
    while (r->n && r->p[r->n - 1] == '\n') r->n--;
    const char *open = find_last(*r, "<think>");
    if (open) r->n -= (size_t)(open + 7 - r->p), r->p = open + 7;
    while (r->n && r->p[0] == '\n') r->p++, r->n--;
    *a = (struct span){last + 8, (size_t)(c.p + c.n - (last + 8))};
    while (a->n && a->p[0] == '\n') a->p++, a->n--;
}

static bool is_tool_response(struct span s)
{
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    return s.n >= sizeof open - 1 && !memcmp(s.p, open, sizeof open - 1) && s.n >= sizeof close - 1 &&
           !memcmp(s.p + s.n - (sizeof close - 1), close, sizeof close - 1);
}

static const char tools_head[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char tools_tail[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: "
    "an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language "
    "BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal "
    "with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

static void put_system(struct sbuf *b, const struct chat_msg *msgs, int n, const struct chat_opts *o)
{
    struct span sys = n && msgs[0].role == CHAT_SYSTEM ? trimmed(msgs[0].content) : (struct span){"", 0};
    if (o->n_tools > 0) {
        puts_(b, "<|im_start|>system\n");
        puts_(b, tools_head);
        for (int t = 0; t < o->n_tools; t++) puts_(b, "\n"), puts_(b, o->tools[t]);
        puts_(b, tools_tail);
        if (sys.n) puts_(b, "\n\n"), put(b, sys.p, sys.n);
        puts_(b, "<|im_end|>\n");
    } else if (n && msgs[0].role == CHAT_SYSTEM) {
        puts_(b, "<|im_start|>system\n");
        put(b, sys.p, sys.n);
        puts_(b, "<|im_end|>\n");
    }
}

static void put_assistant(struct sbuf *b, const struct chat_msg *m, bool keep_thinking)
{
    struct span c = trimmed(m->content), r = {"", 0};
    if (m->reasoning) r = (struct span){m->reasoning, strlen(m->reasoning)};
    else if (find(c, "</think>")) split_think(c, &r, &c);
    r = trim(r);
    puts_(b, "<|im_start|>assistant\n");
    if (keep_thinking) puts_(b, "<think>\n"), put(b, r.p, r.n), puts_(b, "\n</think>\n\n");
    put(b, c.p, c.n);
    for (int k = 0; k < m->n_calls; k++) {
        const struct chat_call *call = &m->calls[k];
        puts_(b, k ? "\n<tool_call>\n<function=" : trim(c).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
        puts_(b, call->name);
        puts_(b, ">\n");
        for (int q = 0; q < call->n_params; q++) {
            puts_(b, "<parameter="), puts_(b, call->params[q].name), puts_(b, ">\n");
            puts_(b, call->params[q].value);
            puts_(b, "\n</parameter>\n");
        }
        puts_(b, "</function>\n</tool_call>");
    }
    puts_(b, "<|im_end|>\n");
}

int chat_render_opts(const struct chat_msg *msgs, int n, const struct chat_opts *o, char **out, size_t *len, char *err,
                     size_t errlen)
{
    struct sbuf b = {0};
    int query = -1;
    for (int i = 0; i < n; i++) {
        if ((unsigned)msgs[i].role > CHAT_TOOL)
            return nb_errf(err, errlen, NB_EINVAL, "message %d: unknown role %d", i, msgs[i].role);
        if (msgs[i].role == CHAT_SYSTEM && i != 0)
            return nb_errf(err, errlen, NB_EINVAL, "message %d: a system message must come first", i);
        if (msgs[i].role == CHAT_USER && !is_tool_response(trimmed(msgs[i].content))) query = i;
    }
    if (query < 0) return nb_errf(err, errlen, NB_EINVAL, "no user query in the messages (a user message that is not only a tool response)");
    put_system(&b, msgs, n, o);
    for (int i = 0; i < n; i++) {
        const struct chat_msg *m = &msgs[i];
        struct span c = trimmed(m->content);
        switch (m->role) {
        case CHAT_SYSTEM: break; /* first: in the system turn above */
        case CHAT_USER:
            puts_(&b, "<|im_start|>user\n");
            put(&b, c.p, c.n);
            puts_(&b, "<|im_end|>\n");
            break;
        case CHAT_ASSISTANT: put_assistant(&b, m, i > query); break;
        case CHAT_TOOL: /* tool results travel inside one user turn per run of them */
            if (i > 0 && msgs[i - 1].role != CHAT_TOOL) puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            put(&b, c.p, c.n);
            puts_(&b, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != CHAT_TOOL) puts_(&b, "<|im_end|>\n");
            break;
        }
    }
    puts_(&b, o->thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    if (b.failed) {
        free(b.p);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory rendering the chat");
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

int chat_render(const struct chat_msg *msgs, int n, bool thinking, char **out, size_t *len, char *err, size_t errlen)
{
    struct chat_opts o = {.thinking = thinking};
    return chat_render_opts(msgs, n, &o, out, len, err, errlen);
}
