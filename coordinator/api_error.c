/* api_error.c — the API's errors (api.h): OpenAI's error object, and
 * messages that stay valid UTF-8 whatever client bytes they quote (every
 * byte that is not part of a valid character becomes '?').  A leaf: every
 * other api_*.c file may call it. */
#include "coordinator/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 character at s (n bytes left), or 0. */
size_t api_utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n || (len == 2 && s[0] < 0xC2) || (len == 4 && s[0] > 0xF4)) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

/* Messages quote the client's text (a role, a model name, a path), cut to a
 * byte length: every byte that is not part of a valid character becomes '?',
 * so the error is always valid JSON text. */
static void utf8_sanitize(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = api_utf8_len((const unsigned char *)s + i, n - i);
        if (k) i += k;
        else s[i++] = '?';
    }
}

int api_errorf(struct api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_sanitize(e->message);
    utf8_sanitize(e->param);
    return status;
}

cJSON *api_error_json(const struct api_error *e)
{
    cJSON *r = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(r, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type[0] ? e->type : "server_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code[0]) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    return r;
}

