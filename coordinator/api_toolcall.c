/* api_toolcall.c — tool calls out of the generated text (api.h, docs/API.md "Tools").
 *
 * Pure.  The model writes
 *     <tool_call>\n<function=NAME>\n<parameter=K>\nVALUE\n</parameter>\n…</function>\n</tool_call>
 * (its chat template's format).  A value ends at the first `</parameter>`
 * followed (after blanks) by the next `<parameter=` or `</function>`, so a
 * value may contain the tag itself; one newline is dropped on each side of
 * it (the template writes them).  Each value is typed by the tool's schema
 * (parameters.properties.K.type, or the first non-null type of an anyOf) as
 * vLLM's qwen3_coder parser, the model's reference, does: string types as
 * they are; "null"/"None" → null for other types (and for nullable
 * strings); integer and number types → a number when the text is one;
 * boolean → true for "true" (any case), else false; object/array → the
 * JSON value when it parses; no or another type → JSON when it parses;
 * anything that does not convert stays a string. */
#include "coordinator/api.h"

#include "core/util/err.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char call_open[] = "<tool_call>", call_close[] = "</tool_call>";
static const char fn_open[] = "<function=", fn_close[] = "</function>";
static const char par_open[] = "<parameter=", par_close[] = "</parameter>";
#define LEN(s) (sizeof s - 1)

void api_call_free(struct api_call *c)
{
    free(c->name), free(c->arguments);
    c->name = c->arguments = NULL;
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && isspace((unsigned char)*p)) p++;
    return p;
}

static bool starts(const char *p, const char *end, const char *s, size_t n) { return (size_t)(end - p) >= n && !memcmp(p, s, n); }

/* The schema's type of parameter name ("" when none), and whether it admits null. */
static const char *param_type(const cJSON *props, const char *name, bool *nullable)
{
    const cJSON *p = props ? cJSON_GetObjectItemCaseSensitive(props, name) : NULL, *t, *o;
    *nullable = false;
    if (!cJSON_IsObject(p)) return p ? "" : NULL;
    if ((t = cJSON_GetObjectItemCaseSensitive(p, "type"))) {
        if (cJSON_IsString(t)) return *nullable = !strcmp(t->valuestring, "null"), t->valuestring;
        const char *first = "";
        cJSON_ArrayForEach(o, t) /* ["string", "null"] */
        {
            if (!cJSON_IsString(o)) continue;
            if (!strcmp(o->valuestring, "null")) *nullable = true;
            else if (!*first) first = o->valuestring;
        }
        return first;
    }
    const char *first = "string";
    bool picked = false;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(p, "anyOf"))
    {
        const cJSON *ot = cJSON_GetObjectItemCaseSensitive(o, "type");
        if (!cJSON_IsString(ot)) continue;
        if (!strcmp(ot->valuestring, "null")) *nullable = true;
        else if (!picked) first = ot->valuestring, picked = true;
    }
    return first;
}

static bool prefix_ci(const char *s, const char *p) { return !strncasecmp(s, p, strlen(p)); }

static bool is_null_word(const char *v) { return !strcasecmp(v, "null") || !strcasecmp(v, "none"); }

/* The value as JSON, typed by the schema (see the top of the file). */
static cJSON *typed_value(const char *v, const char *type, bool nullable)
{
    if (!type) return cJSON_CreateString(v); /* not in the schema */
    if (nullable && is_null_word(v)) return cJSON_CreateNull();
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum"};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        if (!strcasecmp(type, strings[i])) return cJSON_CreateString(v);
    if (is_null_word(v)) return cJSON_CreateNull();
    char *end;
    if (prefix_ci(type, "int") || prefix_ci(type, "uint") || prefix_ci(type, "long") || prefix_ci(type, "short") ||
        prefix_ci(type, "unsigned")) {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        return *v && !isspace((unsigned char)*v) && !*end && !errno && llabs(x) < (1ll << 53) ? cJSON_CreateNumber((double)x)
                                                                                              : cJSON_CreateString(v);
    }
    if (prefix_ci(type, "num") || prefix_ci(type, "float")) {
        double x = strtod(v, &end);
        return *v && !isspace((unsigned char)*v) && !*end && isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateString(v);
    }
    if (!strcasecmp(type, "boolean") || !strcasecmp(type, "bool") || !strcasecmp(type, "binary"))
        return cJSON_CreateBool(!strcasecmp(v, "true"));
    cJSON *j = cJSON_Parse(v); /* object, array, or no type: the JSON it spells */
    return j ? j : cJSON_CreateString(v);
}

static const struct api_tool *find_tool(const struct api_tool *tools, int n, const char *name, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(tools[i].name) == len && !memcmp(tools[i].name, name, len)) return &tools[i];
    return NULL;
}

/* The end of the value that starts at v: a </parameter> followed by the next tag. */
static const char *value_end(const char *v, const char *end)
{
    for (const char *q = v; (q = memmem(q, (size_t)(end - q), par_close, LEN(par_close))); q++) {
        const char *a = skip_ws(q + LEN(par_close), end);
        if (starts(a, end, par_open, LEN(par_open)) || starts(a, end, fn_close, LEN(fn_close))) return q;
    }
    return NULL;
}

int api_tool_parse_block(const char *s, size_t n, const struct api_tool *tools, int n_tools, struct api_call *out, char *err,
                         size_t errlen)
{
    const char *end = s + n, *p;
    memset(out, 0, sizeof *out);
    if (!starts(s, end, call_open, LEN(call_open)) || n < LEN(call_open) + LEN(call_close) ||
        memcmp(end - LEN(call_close), call_close, LEN(call_close)))
        return nb_errf(err, errlen, NB_EFORMAT, "not a <tool_call>…</tool_call> block");
    end -= LEN(call_close);
    p = skip_ws(s + LEN(call_open), end);
    if (!starts(p, end, fn_open, LEN(fn_open))) return nb_errf(err, errlen, NB_EFORMAT, "a <tool_call> without <function=NAME>");
    const char *name = p + LEN(fn_open), *gt = memchr(name, '>', (size_t)(end - name));
    if (!gt || gt == name || memchr(name, '\n', (size_t)(gt - name)))
        return nb_errf(err, errlen, NB_EFORMAT, "a <function= tag without a name and '>'");
    const struct api_tool *tool = find_tool(tools, n_tools, name, (size_t)(gt - name));
    if (!tool) return nb_errf(err, errlen, NB_EFORMAT, "the model called '%.*s', which is not among the tools", (int)(gt - name > 64 ? 64 : gt - name), name);
    cJSON *args = cJSON_CreateObject();
    if (!args) return NB_ENOMEM;
    int rc = 0;
    for (p = gt + 1;;) {
        p = skip_ws(p, end);
        if (starts(p, end, fn_close, LEN(fn_close))) break;
        if (!starts(p, end, par_open, LEN(par_open))) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "text inside <function=%s> that is not a <parameter=…> block", tool->name);
            break;
        }
        const char *pn = p + LEN(par_open), *pg = memchr(pn, '>', (size_t)(end - pn));
        if (!pg || pg == pn || memchr(pn, '\n', (size_t)(pg - pn)) || pg - pn > 128) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "a <parameter= tag without a name and '>'");
            break;
        }
        const char *v = pg + 1, *ve = value_end(v, end);
        if (!ve) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "<parameter=%.*s> has no </parameter> before the next tag", (int)(pg - pn), pn);
            break;
        }
        p = ve + LEN(par_close);
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        /* The text is a piece of a larger buffer, not NUL-terminated: copied by length. */
        const size_t vn = (size_t)(ve - v);
        char key[129], *val = malloc(vn + 1);
        snprintf(key, sizeof key, "%.*s", (int)(pg - pn), pn);
        if (!val) {
            rc = NB_ENOMEM;
            break;
        }
        memcpy(val, v, vn), val[vn] = 0;
        if (memchr(v, 0, vn) || cJSON_GetObjectItemCaseSensitive(args, key)) {
            rc = nb_errf(err, errlen, NB_EFORMAT, memchr(v, 0, vn) ? "a NUL byte in <parameter=%s>" : "<parameter=%s> is given twice", key);
            free(val);
            break;
        }
        bool nullable;
        const char *type = param_type(tool->props, key, &nullable);
        cJSON *jv = typed_value(val, type, nullable);
        free(val);
        if (!jv || !cJSON_AddItemToObject(args, key, jv)) {
            cJSON_Delete(jv);
            rc = NB_ENOMEM;
            break;
        }
    }
    if (!rc && skip_ws(p + LEN(fn_close), end) != end)
        rc = nb_errf(err, errlen, NB_EFORMAT, "text between </function> and </tool_call>");
    if (!rc) {
        out->name = strdup(tool->name);
        out->arguments = cJSON_PrintUnformatted(args);
        if (!out->name || !out->arguments) api_call_free(out), rc = NB_ENOMEM;
    }
    cJSON_Delete(args);
    return rc;
}

/* ---------- the scanner ---------- */

void api_toolscan_init(struct api_toolscan *t, const struct api_tool *tools, int n_tools, bool parallel)
{
    memset(t, 0, sizeof *t);
    t->tools = tools, t->n_tools = n_tools, t->parallel = parallel;
}

void api_toolscan_free(struct api_toolscan *t) { api_buf_free(&t->buf); }

static void consume(struct api_toolscan *t, size_t n)
{
    memmove(t->buf.p, t->buf.p + n, t->buf.n - n);
    t->buf.n -= n;
}

/* The end of the block that held starts with (just past its </tool_call>), or 0. */
static size_t block_end(const struct api_toolscan *t)
{
    const char *s = t->buf.p, *end = s + t->buf.n;
    for (const char *q = s; (q = memmem(q, (size_t)(end - q), call_close, LEN(call_close))); q++) {
        const char *b = q;
        while (b > s && isspace((unsigned char)b[-1])) b--;
        if (b - s >= (ptrdiff_t)LEN(fn_close) && !memcmp(b - LEN(fn_close), fn_close, LEN(fn_close))) return (size_t)(q - s) + LEN(call_close);
    }
    return 0;
}

/* Length of the longest proper suffix of held that is a prefix of "<tool_call>". */
static size_t partial_open(const struct api_toolscan *t)
{
    for (size_t k = LEN(call_open) - 1 < t->buf.n ? LEN(call_open) - 1 : t->buf.n; k > 0; k--)
        if (!memcmp(t->buf.p + t->buf.n - k, call_open, k)) return k;
    return 0;
}

int api_toolscan_push(struct api_toolscan *t, const char *s, size_t n, api_emit_fn content, api_call_fn call, void *ctx)
{
    if (api_buf_add(&t->buf, s, n)) return NB_ENOMEM;
    for (;;) {
        if (t->failed) { /* malformed: the rest is content */
            int rc = t->buf.n ? content(ctx, false, t->buf.p, t->buf.n) : 0;
            t->buf.n = 0;
            return rc;
        }
        if (t->strip_lead) {
            size_t k = 0;
            while (k < t->buf.n && isspace((unsigned char)t->buf.p[k])) k++;
            consume(t, k);
            if (!t->buf.n) return 0;
            t->strip_lead = false;
        }
        if (!t->in_call) {
            const char *open = t->buf.n >= LEN(call_open) ? memmem(t->buf.p, t->buf.n, call_open, LEN(call_open)) : NULL;
            size_t out = open ? (size_t)(open - t->buf.p) : t->buf.n - partial_open(t), e = out;
            while (e > 0 && isspace((unsigned char)t->buf.p[e - 1])) e--; /* blanks before a call are dropped; held until known */
            int rc = e ? content(ctx, false, t->buf.p, e) : 0;
            if (rc) return rc;
            consume(t, open ? out : e);
            if (!open) return 0;
            t->in_call = true;
            continue;
        }
        size_t be = block_end(t);
        if (!be) return 0;
        struct api_call c;
        char err[160];
        int rc = api_tool_parse_block(t->buf.p, be, t->tools, t->n_tools, &c, err, sizeof err);
        if (rc == NB_ENOMEM) return rc;
        if (rc) {
            t->failed = true;
            snprintf(t->error, sizeof t->error, "tool call %d is malformed: %s", t->n_calls + 1, err);
            continue;
        }
        consume(t, be);
        t->in_call = false, t->strip_lead = true;
        t->n_calls++;
        if ((rc = call(ctx, &c))) return api_call_free(&c), rc;
        if (!t->parallel) return t->buf.n = 0, 1; /* what follows the one call is dropped */
    }
}

int api_toolscan_finish(struct api_toolscan *t, api_emit_fn content, void *ctx)
{
    if (t->in_call && !t->failed) {
        t->failed = true;
        snprintf(t->error, sizeof t->error, "tool call %d is malformed: the generation ended inside its <tool_call> block", t->n_calls + 1);
    }
    int rc = t->buf.n ? content(ctx, false, t->buf.p, t->buf.n) : 0;
    t->buf.n = 0;
    return rc;
}
