/* api_request.c — a request body → struct api_request (api.h, docs/API.md).
 *
 * Pure: no I/O, no global state (cJSON's global error pointer is not used:
 * the parse end comes back through cJSON_ParseWithLengthOpts), so the HTTP
 * threads call it concurrently and a fuzzer can drive it.  The rules follow
 * OpenAI's API where it has one: JSON null means "absent", unknown fields are
 * ignored, a known field of the wrong type or out of range is a 400 whose
 * error names the parameter (`messages[2].content`, `temperature`).  The
 * sampling fields start from the model's defaults for the request's `think`
 * (core/sampling), so `think` is read first. */
#include "coordinator/api.h"

#include "core/util/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 character at s (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n)
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
        size_t k = utf8_char((const unsigned char *)s + i, n - i);
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

static int bad(struct api_error *e, const char *param, const char *fmt, const char *detail)
{
    return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", fmt, detail ? detail : "");
}

static int oom(struct api_error *e) { return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* The field, or NULL when absent or JSON null. */
static const cJSON *field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(v) ? NULL : v;
}

/* A number in [lo, hi]; integral when integer.  0 (absent: *out untouched), 1 (set) or the error status. */
static int number(const cJSON *o, const char *name, double lo, double hi, bool integer, double *out, struct api_error *e)
{
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return api_errorf(e, 400, "invalid_request_error", name, "invalid_type", "'%s' must be a number", name);
    double x = v->valuedouble;
    if (!isfinite(x) || (integer && x != floor(x)))
        return api_errorf(e, 400, "invalid_request_error", name, "invalid_type", "'%s' must be %s", name, integer ? "an integer" : "a finite number");
    if (x < lo || x > hi)
        return api_errorf(e, 400, "invalid_request_error", name, "invalid_value", "'%s' is %g; it must be in [%g, %g]", name, x, lo, hi);
    *out = x;
    return 1;
}

static int boolean(const cJSON *o, const char *name, bool *out, struct api_error *e)
{
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return api_errorf(e, 400, "invalid_request_error", name, "invalid_type", "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 1;
}

/* `think`: a boolean, or "on"/"off"; also chat_template_kwargs.enable_thinking
 * (the vLLM / llama.cpp spelling).  Default on. */
static int parse_think(const cJSON *root, bool *think, struct api_error *e)
{
    const cJSON *v = field(root, "think");
    *think = true;
    if (v) {
        if (cJSON_IsBool(v)) *think = cJSON_IsTrue(v);
        else if (cJSON_IsString(v) && (!strcmp(v->valuestring, "on") || !strcmp(v->valuestring, "off")))
            *think = !strcmp(v->valuestring, "on");
        else return api_errorf(e, 400, "invalid_request_error", "think", "invalid_type", "'think' must be true, false, \"on\" or \"off\"");
        return 0;
    }
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (!kw) return 0;
    if (!cJSON_IsObject(kw))
        return api_errorf(e, 400, "invalid_request_error", "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
    int rc = boolean(kw, "enable_thinking", think, e);
    if (rc > 1) snprintf(e->param, sizeof e->param, "chat_template_kwargs.enable_thinking");
    return rc > 1 ? rc : 0;
}

/* Message content: a string, null (empty), or an array of {type:"text", text}
 * parts, concatenated. */
static int content_text(const cJSON *c, int i, char **out, struct api_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c || cJSON_IsNull(c)) return (*out = strdup("")) ? 0 : oom(e);
    if (cJSON_IsString(c)) return (*out = strdup(c->valuestring)) ? 0 : oom(e);
    if (!cJSON_IsArray(c)) return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be a string or an array of text parts", param);
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type"), *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "each part of '%s' must be an object with a \"type\"", param);
        if (strcmp(type->valuestring, "text"))
            return api_errorf(e, 400, "invalid_request_error", param, "unsupported_content",
                              "content parts of type '%.40s' are not supported (text only)", type->valuestring);
        if (!cJSON_IsString(text))
            return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "a text part of '%s' needs a string \"text\"", param);
        len += strlen(text->valuestring);
    }
    if (!(*out = malloc(len + 1))) return oom(e);
    len = 0;
    cJSON_ArrayForEach(part, c)
    {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(*out + len, t, n), len += n;
    }
    (*out)[len] = 0;
    return 0;
}

static int parse_messages(const cJSON *root, struct api_request *r, struct api_error *e)
{
    const cJSON *ms = field(root, "messages"), *m;
    if (!ms) return api_errorf(e, 400, "invalid_request_error", "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(ms)) return api_errorf(e, 400, "invalid_request_error", "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(ms), i = 0;
    if (n == 0) return api_errorf(e, 400, "invalid_request_error", "messages", "invalid_value", "'messages' must not be empty");
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return oom(e);
    cJSON_ArrayForEach(m, ms)
    {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be an object", param);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be a string", param);
        int rl = !strcmp(role->valuestring, "developer") ? CHAT_SYSTEM : chat_role_from_name(role->valuestring);
        if (rl < 0)
            return api_errorf(e, 400, "invalid_request_error", param, "invalid_value",
                              "'%s' is '%.40s'; it must be system, developer, user, assistant or tool", param, role->valuestring);
        char *text = NULL, *reasoning = NULL;
        int rc = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &text, e);
        r->msgs[i] = (struct chat_msg){(enum chat_role)rl, text, NULL};
        r->n_msgs = i + 1;
        if (rc) return rc;
        const cJSON *rs = field(m, "reasoning_content");
        if (rs && rl == CHAT_ASSISTANT) {
            snprintf(param, sizeof param, "messages[%d].reasoning_content", i);
            if (!cJSON_IsString(rs)) return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be a string", param);
            if (!(reasoning = strdup(rs->valuestring))) return oom(e);
            r->msgs[i].reasoning = reasoning;
        }
        i++;
    }
    return 0;
}

static int parse_stop(const cJSON *root, struct api_request *r, struct api_error *e)
{
    const cJSON *s = field(root, "stop"), *it;
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return bad(e, "stop", "'stop' must not be an empty string%s", NULL);
        if (strlen(s->valuestring) > API_MAX_STOP_BYTES) return bad(e, "stop", "a stop string is longer than 256 bytes%s", NULL);
        if (!(r->stop[0] = strdup(s->valuestring))) return oom(e);
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(s)) return api_errorf(e, 400, "invalid_request_error", "stop", "invalid_type", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > API_MAX_STOP) return bad(e, "stop", "'stop' holds at most 4 strings%s", NULL);
    cJSON_ArrayForEach(it, s)
    {
        if (!cJSON_IsString(it)) return api_errorf(e, 400, "invalid_request_error", "stop", "invalid_type", "'stop' must be a string or an array of strings");
        if (!it->valuestring[0]) return bad(e, "stop", "stop strings must not be empty%s", NULL);
        if (strlen(it->valuestring) > API_MAX_STOP_BYTES) return bad(e, "stop", "a stop string is longer than 256 bytes%s", NULL);
        if (!(r->stop[r->n_stop] = strdup(it->valuestring))) return oom(e);
        r->n_stop++;
    }
    return 0;
}

/* Sampling, length and the Nebula extensions. */
static int parse_generation(const cJSON *root, struct api_request *r, struct api_error *e)
{
    double x;
    int rc;
    r->sp = sampling_defaults(r->think);
    if ((rc = number(root, "max_tokens", 1, API_MAX_TOKENS_LIMIT, true, &x, e)) > 1) return rc;
    if (rc) r->max_tokens = (long long)x;
    if ((rc = number(root, "max_completion_tokens", 1, API_MAX_TOKENS_LIMIT, true, &x, e)) > 1) return rc;
    if (rc) r->max_tokens = (long long)x;
    if ((rc = number(root, "temperature", 0, 2, false, &x, e)) > 1) return rc;
    if (rc) r->sp.temperature = (float)x;
    if ((rc = number(root, "top_p", 0, 1, false, &x, e)) > 1) return rc;
    if (rc && x <= 0) return bad(e, "top_p", "'top_p' must be greater than 0%s", NULL);
    if (rc) r->sp.top_p = (float)x;
    if ((rc = number(root, "top_k", -1, 1 << 30, true, &x, e)) > 1) return rc;
    if (rc) r->sp.top_k = x < 0 ? 0 : (int)x; /* -1 and 0: off */
    if ((rc = number(root, "min_p", 0, 1, false, &x, e)) > 1) return rc;
    if (rc) r->sp.min_p = (float)x;
    if ((rc = number(root, "presence_penalty", -2, 2, false, &x, e)) > 1) return rc;
    if (rc) r->sp.presence_penalty = (float)x;
    if ((rc = number(root, "seed", -9223372036854775808.0, 18446744073709551615.0, true, &x, e)) > 1) return rc;
    if (rc) r->sp.seed = x < 0 ? (uint64_t)(int64_t)x : x >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)x, r->has_seed = true;
    if ((rc = number(root, "n", 1, 1, true, &x, e)) > 1) return api_errorf(e, 400, "invalid_request_error", "n", "invalid_value", "only n = 1 is supported");
    if ((rc = boolean(root, "stream", &r->stream, e)) > 1) return rc;
    if ((rc = boolean(root, "ignore_eos", &r->ignore_eos, e)) > 1) return rc;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) return api_errorf(e, 400, "invalid_request_error", "stream_options", "invalid_type", "'stream_options' must be an object");
    if (so && (rc = boolean(so, "include_usage", &r->include_usage, e)) > 1)
        return snprintf(e->param, sizeof e->param, "stream_options.include_usage"), rc;
    if ((rc = parse_stop(root, r, e))) return rc;
    r->accuracy_level = 3;
    if ((rc = number(root, "accuracy_level", 1, 3, true, &x, e)) > 1) return rc;
    if (rc) r->accuracy_level = (int)x, r->has_accuracy_level = true;
    if ((rc = number(root, "context_length", 1, 1 << 30, true, &x, e)) > 1) return rc;
    if (rc) r->context_length = (long long)x;
    if ((rc = number(root, "prefill_chunk", 1, API_MAX_PREFILL_CHUNK, true, &x, e)) > 1) return rc;
    if (rc) r->prefill_chunk = (int)x;
    return api_parse_format(root, r, e);
}

static int parse_root(enum api_kind kind, const cJSON *root, struct api_request *r, struct api_error *e)
{
    int rc;
    if (!cJSON_IsObject(root)) return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return api_errorf(e, 400, "invalid_request_error", "model", "invalid_type", "'model' must be a string");
    if (model && !(r->model = strdup(model->valuestring))) return oom(e);
    if ((rc = parse_think(root, &r->think, e))) return rc;
    if (kind == API_CHAT) {
        if ((rc = parse_messages(root, r, e))) return rc;
    } else {
        const char *name = kind == API_TOKENIZE ? "text" : "prompt";
        const cJSON *p = field(root, name);
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child; /* ["text"] */
        if (kind == API_TOKENIZE && !p && field(root, "messages")) return parse_messages(root, r, e);
        if (!p)
            return api_errorf(e, 400, "invalid_request_error", name, "missing_required_parameter",
                              kind == API_TOKENIZE ? "'text' or 'messages' is required" : "'prompt' is required");
        if (!cJSON_IsString(p)) return api_errorf(e, 400, "invalid_request_error", name, "invalid_type", "'%s' must be a string", name);
        if (!(r->prompt = strdup(p->valuestring))) return oom(e);
    }
    return kind == API_TOKENIZE ? 0 : parse_generation(root, r, e);
}

int api_parse_request(enum api_kind kind, const char *body, size_t len, struct api_request *r, struct api_error *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind, r->max_tokens = -1, r->think = true, r->accuracy_level = 3;
    r->sp = sampling_defaults(true);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        if (!len) return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body is empty: send a JSON object");
        return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body is not valid JSON (error near byte %zu)", at);
    }
    /* Only whitespace may follow the value. */
    while (end && end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    int rc = end && end < body + len
                 ? api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body has bytes after its JSON value (at byte %zu)", (size_t)(end - body))
                 : parse_root(kind, root, r, e);
    cJSON_Delete(root);
    return rc;
}

void api_request_free(struct api_request *r)
{
    for (int i = 0; i < r->n_msgs; i++) free((char *)r->msgs[i].content), free((char *)r->msgs[i].reasoning);
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    free(r->prompt);
    api_format_free(r);
    memset(r, 0, sizeof *r);
}
