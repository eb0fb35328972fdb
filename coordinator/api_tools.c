/* api_tools.c — tool calls in the model's own format (docs/API.md, "Tools").
 *
 * Pure, like api_request.c.  Two directions:
 *   - into the prompt: a request's OpenAI `tools` (each printed as the
 *     template's `tojson`: Python's json.dumps, so the prompt is the released
 *     template's bytes) and assistant `tool_calls` (their JSON `arguments`
 *     become the template's parameters: a string as it is, anything else as
 *     its JSON) for core/chat;
 *   - out of the generated text: `<tool_call>\n<function=NAME>\n
 *     <parameter=K>\nV\n</parameter>\n</function>\n</tool_call>` blocks into
 *     OpenAI calls whose `arguments` is a JSON object, each value typed by
 *     the tool's parameter schema the way the model's reference parser
 *     (vLLM's qwen3_coder) does, and a scanner that finds the blocks in the
 *     streamed content.
 * The one idea of the scanner: a block ends at a `</tool_call>` whose
 * preceding non-blank text is `</function>`, so a value may itself contain
 * either tag on its own. */
#include "coordinator/api.h"

#include "core/util/err.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(struct api_error *e) { return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* ---------- Python json.dumps ---------- */

static int add(struct api_buf *b, const char *s) { return api_buf_add(b, s, strlen(s)); }

/* Python's repr of a float, for the numbers a JSON text can hold: integral
 * values as integers (cJSON keeps no int/float distinction: a "1.0" prints
 * as "1"), others with the fewest digits that read back the same. */
static void py_number(double x, char *out, size_t n)
{
    if (x == floor(x) && fabs(x) < 1e16) {
        snprintf(out, n, "%.0f", x);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, n, "%.*g", p, x);
        if (strtod(out, NULL) == x) break;
    }
}

static int py_string(const char *s, struct api_buf *b)
{
    int rc = add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; !rc && *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': rc = add(b, "\\\""); break;
        case '\\': rc = add(b, "\\\\"); break;
        case '\n': rc = add(b, "\\n"); break;
        case '\r': rc = add(b, "\\r"); break;
        case '\t': rc = add(b, "\\t"); break;
        case '\b': rc = add(b, "\\b"); break;
        case '\f': rc = add(b, "\\f"); break;
        default:
            if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p), rc = add(b, esc);
            else rc = api_buf_add(b, (const char *)p, 1);
        }
    }
    return rc ? rc : add(b, "\"");
}

int api_pyjson(const cJSON *v, struct api_buf *b)
{
    char num[40];
    int rc = 0;
    const cJSON *it;
    if (cJSON_IsNull(v)) return add(b, "null");
    if (cJSON_IsTrue(v)) return add(b, "true");
    if (cJSON_IsFalse(v)) return add(b, "false");
    if (cJSON_IsNumber(v)) { /* JSON has no infinities (Python would print Infinity): refused */
        if (!isfinite(v->valuedouble)) return NB_EINVAL;
        return py_number(v->valuedouble, num, sizeof num), add(b, num);
    }
    if (cJSON_IsString(v)) return py_string(v->valuestring, b);
    if (cJSON_IsArray(v)) {
        rc = add(b, "[");
        cJSON_ArrayForEach(it, v)
        {
            if (!rc && it != v->child) rc = add(b, ", ");
            if (!rc) rc = api_pyjson(it, b);
        }
        return rc ? rc : add(b, "]");
    }
    if (cJSON_IsObject(v)) {
        rc = add(b, "{");
        cJSON_ArrayForEach(it, v)
        {
            if (!rc && it != v->child) rc = add(b, ", ");
            if (!rc) rc = py_string(it->string, b);
            if (!rc) rc = add(b, ": ");
            if (!rc) rc = api_pyjson(it, b);
        }
        return rc ? rc : add(b, "}");
    }
    return NB_EINVAL;
}

/* ---------- tools and tool_choice ---------- */

void api_tools_free(struct api_tool *t, int n)
{
    for (int i = 0; i < n; i++) free(t[i].name), free(t[i].json), cJSON_Delete(t[i].props);
    free(t);
}

static int bad_type(struct api_error *e, const char *param, const char *what)
{
    return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be %s", param, what);
}

/* A function name the template can carry: non-empty, no '>' or whitespace. */
static bool good_name(const char *s)
{
    if (!*s || strlen(s) > 64) return false;
    for (; *s; s++)
        if (*s == '>' || *s == '<' || isspace((unsigned char)*s)) return false;
    return true;
}

static int parse_tool(const cJSON *t, int i, struct api_tool *out, struct api_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "tools[%d]", i);
    if (!cJSON_IsObject(t)) return bad_type(e, param, "an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *f = cJSON_GetObjectItemCaseSensitive(t, "function");
    snprintf(param, sizeof param, "tools[%d].type", i);
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
        return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be \"function\" (the only kind of tool served)", param);
    for (const cJSON *k = t->child; k; k = k->next)
        if (strcmp(k->string, "type") && strcmp(k->string, "function")) {
            snprintf(param, sizeof param, "tools[%d].%.40s", i, k->string);
            return api_errorf(e, 400, "invalid_request_error", param, "unknown_parameter", "Unrecognized request argument supplied: %s", param);
        }
    snprintf(param, sizeof param, "tools[%d].function", i);
    if (!cJSON_IsObject(f)) return bad_type(e, param, "an object");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name"), *ps = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    for (const cJSON *k = f->child; k; k = k->next)
        if (strcmp(k->string, "name") && strcmp(k->string, "description") && strcmp(k->string, "parameters") && strcmp(k->string, "strict")) {
            snprintf(param, sizeof param, "tools[%d].function.%.30s", i, k->string);
            return api_errorf(e, 400, "invalid_request_error", param, "unknown_parameter", "Unrecognized request argument supplied: %s", param);
        }
    snprintf(param, sizeof param, "tools[%d].function.name", i);
    if (!cJSON_IsString(name)) return bad_type(e, param, "a string");
    if (!good_name(name->valuestring))
        return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be 1-64 characters without whitespace, '<' or '>'", param);
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
    if (cJSON_IsTrue(strict)) {
        snprintf(param, sizeof param, "tools[%d].function.strict", i);
        return api_errorf(e, 400, "invalid_request_error", param, "unsupported_parameter",
                          "'%s': strict schema adherence is not supported (the arguments are parsed, not constrained)", param);
    }
    snprintf(param, sizeof param, "tools[%d].function.parameters", i);
    if (ps && !cJSON_IsNull(ps) && !cJSON_IsObject(ps)) return bad_type(e, param, "an object (a JSON schema)");
    struct api_buf b = {0};
    if (!(out->name = strdup(name->valuestring))) return oom(e);
    int rc = api_pyjson(t, &b);
    if (rc == NB_EINVAL) {
        snprintf(param, sizeof param, "tools[%d]", i);
        return api_buf_free(&b), api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' holds a number too large for JSON", param);
    }
    if (rc) return api_buf_free(&b), oom(e);
    out->json = b.p;
    const cJSON *props = cJSON_IsObject(ps) ? cJSON_GetObjectItemCaseSensitive(ps, "properties") : NULL;
    if (cJSON_IsObject(props) && !(out->props = cJSON_Duplicate(props, true))) return oom(e);
    return 0;
}

int api_parse_tools(const cJSON *root, struct api_request *r, struct api_error *e)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tools"), *t;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    r->parallel_tool_calls = true;
    if (pc && !cJSON_IsNull(pc)) {
        if (!cJSON_IsBool(pc)) return bad_type(e, "parallel_tool_calls", "true or false");
        r->parallel_tool_calls = cJSON_IsTrue(pc);
    }
    if (ts && !cJSON_IsNull(ts)) {
        if (!cJSON_IsArray(ts)) return bad_type(e, "tools", "an array");
        int n = cJSON_GetArraySize(ts), i = 0;
        if (n > 128) return api_errorf(e, 400, "invalid_request_error", "tools", "invalid_value", "'tools' holds at most 128 functions");
        if (n && !(r->tools = calloc((size_t)n, sizeof *r->tools))) return oom(e);
        cJSON_ArrayForEach(t, ts)
        {
            int rc = parse_tool(t, i, &r->tools[i], e);
            r->n_tools = ++i;
            if (rc) return rc;
            for (int k = 0; k < i - 1; k++)
                if (!strcmp(r->tools[k].name, r->tools[i - 1].name))
                    return api_errorf(e, 400, "invalid_request_error", "tools", "invalid_value", "two tools are named '%s'", r->tools[k].name);
        }
    }
    r->tool_choice = API_TOOLS_AUTO;
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (!strcmp(s, "none")) r->tool_choice = API_TOOLS_NONE;
        else if (!strcmp(s, "auto")) r->tool_choice = API_TOOLS_AUTO;
        else if (!strcmp(s, "required")) r->tool_choice = API_TOOLS_REQUIRED;
        else return api_errorf(e, 400, "invalid_request_error", "tool_choice", "invalid_value", "'tool_choice' is '%.40s'; it must be none, auto, required or {\"type\":\"function\",\"function\":{\"name\":…}}", s);
    } else if (cJSON_IsObject(tc)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type"), *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return bad_type(e, "tool_choice", "none, auto, required or {\"type\":\"function\",\"function\":{\"name\":…}}");
        if (!(r->tool_name = strdup(name->valuestring))) return oom(e);
        r->tool_choice = API_TOOLS_NAMED;
    } else {
        return bad_type(e, "tool_choice", "a string or an object");
    }
    if (r->tool_choice != API_TOOLS_NONE && r->tool_choice != API_TOOLS_AUTO && !r->n_tools)
        return api_errorf(e, 400, "invalid_request_error", "tool_choice", "invalid_value", "'tool_choice' asks for a call but 'tools' is empty");
    if (r->tool_choice == API_TOOLS_NAMED) {
        for (int i = 0; i < r->n_tools; i++)
            if (!strcmp(r->tools[i].name, r->tool_name)) return 0;
        return api_errorf(e, 400, "invalid_request_error", "tool_choice", "invalid_value", "'tool_choice' names '%.64s', which is not among the tools",
                          r->tool_name);
    }
    return 0;
}

/* ---------- assistant tool_calls (history) ---------- */

void api_free_msg_calls(struct chat_msg *m)
{
    for (int k = 0; k < m->n_calls; k++) {
        struct chat_call *c = (struct chat_call *)&m->calls[k];
        for (int q = 0; q < c->n_params; q++) free((char *)c->params[q].name), free((char *)c->params[q].value);
        free((char *)c->params);
        free((char *)c->name);
    }
    free((struct chat_call *)m->calls);
    m->calls = NULL, m->n_calls = 0;
}

static int parse_call(const cJSON *tc, int i, int k, struct chat_call *c, struct api_error *e)
{
    char param[80];
    snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", i, k);
    if (!cJSON_IsObject(tc)) return bad_type(e, param, "an object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function"), *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (type && !cJSON_IsNull(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
        return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s.type' must be \"function\"", param);
    snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function", i, k);
    if (!cJSON_IsObject(f)) return bad_type(e, param, "an object with name and arguments");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name"), *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function.name", i, k);
    if (!cJSON_IsString(name) || !good_name(name->valuestring)) return bad_type(e, param, "a function name");
    snprintf(param, sizeof param, "messages[%d].tool_calls[%d].function.arguments", i, k);
    cJSON *parsed = NULL;
    const cJSON *obj = args;
    if (cJSON_IsString(args)) { /* OpenAI's: a JSON object as text */
        const char *end = NULL;
        parsed = cJSON_ParseWithOpts(args->valuestring, &end, true);
        if (!cJSON_IsObject(parsed) && args->valuestring[strspn(args->valuestring, " \t\r\n")]) {
            cJSON_Delete(parsed);
            return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be a JSON object (as text)", param);
        }
        obj = parsed;
    } else if (args && !cJSON_IsNull(args) && !cJSON_IsObject(args)) {
        return bad_type(e, param, "a string holding a JSON object");
    }
    if (!(c->name = strdup(name->valuestring))) return cJSON_Delete(parsed), oom(e);
    int n = cJSON_IsObject(obj) ? cJSON_GetArraySize(obj) : 0, q = 0;
    struct chat_param *ps = n ? calloc((size_t)n, sizeof *ps) : NULL;
    if (n && !ps) return cJSON_Delete(parsed), oom(e);
    c->params = ps;
    for (const cJSON *a = n ? obj->child : NULL; a; a = a->next, q++) {
        struct api_buf b = {0};
        c->n_params = q + 1;
        ps[q].name = strdup(a->string);
        int rc = cJSON_IsString(a) ? 0 : api_pyjson(a, &b);
        if (rc == NB_EINVAL)
            return api_buf_free(&b), cJSON_Delete(parsed), api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' holds a number too large for JSON", param);
        if (cJSON_IsString(a)) ps[q].value = strdup(a->valuestring);
        else if (!rc) ps[q].value = b.p, b.p = NULL;
        api_buf_free(&b);
        if (!ps[q].name || !ps[q].value) return cJSON_Delete(parsed), oom(e);
    }
    cJSON_Delete(parsed);
    return 0;
}

int api_parse_msg_calls(const cJSON *calls, int i, struct chat_msg *m, struct api_error *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls)) return bad_type(e, param, "an array");
    int n = cJSON_GetArraySize(calls), k = 0;
    if (!n) return 0;
    struct chat_call *cs = calloc((size_t)n, sizeof *cs);
    if (!cs) return oom(e);
    m->calls = cs;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, calls)
    {
        int rc = parse_call(tc, i, k, &cs[k], e);
        m->n_calls = ++k;
        if (rc) return rc;
    }
    return 0;
}

/* ---------- the prompt ---------- */

const char *api_forced_call(const struct api_request *r, char *buf, size_t n)
{
    if (!r->n_tools || r->tool_choice == API_TOOLS_AUTO || r->tool_choice == API_TOOLS_NONE) return "";
    if (r->tool_choice == API_TOOLS_REQUIRED) return "<tool_call>\n<function=";
    snprintf(buf, n, "<tool_call>\n<function=%s>\n", r->tool_name);
    return buf;
}

int api_render_prompt(const struct api_request *r, char **text, size_t *len, struct api_error *e)
{
    char err[256], forced[96];
    const char *pre = api_forced_call(r, forced, sizeof forced);
    bool tools = r->n_tools && r->tool_choice != API_TOOLS_NONE;
    const char **list = tools ? calloc((size_t)r->n_tools, sizeof *list) : NULL;
    if (tools && !list) return oom(e);
    for (int i = 0; tools && i < r->n_tools; i++) list[i] = r->tools[i].json;
    /* A forced call opens right after the generation prompt: the think block is closed empty first. */
    struct chat_opts o = {.thinking = r->think && !*pre, .tools = list, .n_tools = tools ? r->n_tools : 0};
    int rc = chat_render_opts(r->msgs, r->n_msgs, &o, text, len, err, sizeof err);
    free(list);
    if (rc == NB_ENOMEM) return oom(e);
    if (rc) return api_errorf(e, 400, "invalid_request_error", "messages", "invalid_value", "%s", err);
    if (*pre) {
        size_t k = strlen(pre);
        char *p = realloc(*text, *len + k + 1);
        if (!p) return free(*text), *text = NULL, oom(e);
        memcpy(p + *len, pre, k + 1);
        *text = p, *len += k;
    }
    return 0;
}
