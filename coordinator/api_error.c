/* api_error.c — the API's errors (api.h): OpenAI's error object, and
 * messages that stay valid UTF-8 whatever client bytes they quote (every
 * byte that is not part of a valid character becomes '?').  A leaf: every
 * other api_*.c file may call it. */
#include "coordinator/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/util/utf8.h"

/* Messages quote the client's text (a role, a model name, a path), cut to a
 * byte length: every byte that is not part of a valid character becomes '?',
 * so the error is always valid JSON text. */
static void utf8_sanitize(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = nb_utf8_len((const unsigned char *)s + i, n - i);
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

