/* chat.c — ChatML rendering (see chat.h).  A growable string and one pass
 * over the messages; the only look-ahead is finding the last user turn. */
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

/* Strips leading and trailing newlines: the template's .strip('\n'). */
static void put_trimmed_nl(struct sbuf *b, const char *s, size_t n)
{
    while (n && *s == '\n') s++, n--;
    while (n && s[n - 1] == '\n') n--;
    put(b, s, n);
}

/* Splits an assistant content into reasoning and answer the way the model's
 * template does: the answer is what follows the last "</think>" (leading
 * newlines dropped), the reasoning what lies between "<think>" and it. */
static void split_think(const char *content, const char **r, size_t *rn, const char **a)
{
    const char *end = NULL, *p = content;
    while ((p = strstr(p, "</think>"))) end = p, p += 8;
    if (!end) {
        *r = "", *rn = 0, *a = content;
        return;
    }
    const char *start = content, *open = NULL;
    for (p = content; (p = strstr(p, "<think>")) && p < end; p += 7) open = p;
    if (open) start = open + 7;
    *r = start;
    *rn = (size_t)(end - start);
    *a = end + 8;
    while (**a == '\n') (*a)++;
}

int chat_render(const struct chat_msg *msgs, int n, bool thinking, char **out, size_t *len, char *err,
                size_t errlen)
{
    struct sbuf b = {0};
    int last_user = -1;
    for (int i = 0; i < n; i++) {
        if ((unsigned)msgs[i].role > CHAT_TOOL)
            return nb_errf(err, errlen, NB_EINVAL, "message %d: unknown role %d", i, msgs[i].role);
        if (msgs[i].role == CHAT_SYSTEM && i != 0)
            return nb_errf(err, errlen, NB_EINVAL, "message %d: a system message must come first", i);
        if (msgs[i].role == CHAT_USER) last_user = i;
    }
    for (int i = 0; i < n; i++) {
        const struct chat_msg *m = &msgs[i];
        const char *content = m->content ? m->content : "";
        if (m->role == CHAT_TOOL) { /* tool results travel inside one user turn per run of them */
            if (i == 0 || msgs[i - 1].role != CHAT_TOOL) puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            puts_(&b, content);
            puts_(&b, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != CHAT_TOOL) puts_(&b, "<|im_end|>\n");
            continue;
        }
        puts_(&b, "<|im_start|>");
        puts_(&b, role_names[m->role]);
        puts_(&b, "\n");
        if (m->role == CHAT_ASSISTANT) {
            const char *r, *a;
            size_t rn;
            split_think(content, &r, &rn, &a);
            if (m->reasoning) r = m->reasoning, rn = strlen(r);
            if (i > last_user && rn) { /* part of the current answer: keep its thinking */
                puts_(&b, "<think>\n");
                put_trimmed_nl(&b, r, rn);
                puts_(&b, "\n</think>\n\n");
            }
            puts_(&b, a);
        } else {
            puts_(&b, content);
        }
        puts_(&b, "<|im_end|>\n");
    }
    puts_(&b, thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    if (b.failed) {
        free(b.p);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory rendering the chat");
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
