/* api_dialects.c — Anthropic Messages and OpenAI Responses request bodies
 * (docs/API.md, "POST /v1/messages", "POST /v1/responses").
 *
 * Pure.  The one idea: each body is translated into the OpenAI chat body it
 * means (messages with tool_calls and tool results, tools as functions,
 * tool_choice, the sampling fields), which api_request.c then parses like
 * any chat request, so the three APIs share one set of rules and one prompt.
 * The translation checks what only the dialect has (its block and item
 * types, Anthropic's required max_tokens, thinking, temperature 0-1) and
 * names those parameters in its errors; a field neither served nor known is
 * a 400, as everywhere. */
#include "coordinator/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(struct api_error *e) { return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory"); }

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(v) ? NULL : v;
}

static int bad(struct api_error *e, const char *param, const char *code, const char *msg)
{
    return api_errorf(e, 400, "invalid_request_error", param, code, "'%s' %s", param, msg);
}

static int unknown_key(const cJSON *o, const char *prefix, const char *const *known, struct api_error *e)
{
    for (const cJSON *k = o->child; k; k = k->next) {
        bool ok = false;
        for (const char *const *p = known; *p && !ok; p++) ok = !strcmp(*p, k->string);
        if (ok || cJSON_IsNull(k)) continue;
        char param[96];
        snprintf(param, sizeof param, "%s%s%.50s", prefix, *prefix ? "." : "", k->string);
        return api_errorf(e, 400, "invalid_request_error", param, "unknown_parameter", "Unrecognized request argument supplied: %s", param);
    }
    return 0;
}

/* Copies field k of src into dst (as name), when present. */
static int copy(cJSON *dst, const char *name, const cJSON *src, const char *k)
{
    const cJSON *v = get(src, k);
    if (!v) return 0;
    cJSON *c = cJSON_Duplicate(v, true);
    return c && cJSON_AddItemToObject(dst, name, c) ? 0 : -1;
}

/* The text blocks a dialect accepts in a content array: their types, every key such a block may carry (type and
 * text included), how errors name them, and whether an absent content is the empty text. */
struct text_blocks {
    const char *const *types, *const *keys;
    const char *noun;
    bool absent_empty;
};

/* Text of a string, or of an array of text blocks ({type, text, …}) concatenated; NULL with e filled otherwise. */
static char *blocks_text(const cJSON *c, const char *param, const struct text_blocks *tb, struct api_error *e)
{
    if (cJSON_IsString(c) || (!c && tb->absent_empty)) {
        char *s = strdup(c ? c->valuestring : "");
        if (!s) oom(e);
        return s;
    }
    if (!cJSON_IsArray(c))
        return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be a string or an array of %s", param, tb->noun),
               NULL;
    struct api_buf b = {0};
    api_buf_add(&b, "", 0);
    int i = 0;
    for (const cJSON *x = c->child; x; x = x->next, i++) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", param, i);
        const cJSON *t = get(x, "type"), *tx = get(x, "text");
        if (!cJSON_IsObject(x) || !cJSON_IsString(t)) return api_buf_free(&b), bad(e, p, "invalid_type", "must be a block with a \"type\""), NULL;
        const char *const *ty = tb->types;
        while (*ty && strcmp(*ty, t->valuestring)) ty++;
        if (!*ty) {
            char list[96] = "";
            for (ty = tb->types; *ty; ty++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", ty == tb->types ? "" : ", ", *ty);
            return api_buf_free(&b), api_errorf(e, 400, "invalid_request_error", p, "unsupported_content",
                                                "%s of type '%.40s' are not supported here (%s only)", tb->noun, t->valuestring, list),
                   NULL;
        }
        if (unknown_key(x, p, tb->keys, e)) return api_buf_free(&b), NULL;
        if (!cJSON_IsString(tx)) return api_buf_free(&b), bad(e, p, "invalid_type", "needs a string \"text\""), NULL;
        if (api_buf_add(&b, tx->valuestring, strlen(tx->valuestring))) return api_buf_free(&b), oom(e), NULL;
    }
    return b.p;
}

static const char *const anthropic_text[] = {"text", NULL};
static const char *const anthropic_text_keys[] = {"type", "text", "cache_control", "citations", NULL};
static const char *const anthropic_result_keys[] = {"type", "text", "cache_control", NULL};
/* Anthropic's system prompt and a tool result's content. */
static const struct text_blocks anthropic_system = {anthropic_text, anthropic_text_keys, "text blocks", true};
static const struct text_blocks anthropic_result = {anthropic_text, anthropic_result_keys, "text blocks", true};

static cJSON *msg(cJSON *msgs, const char *role, const char *content)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (content) cJSON_AddStringToObject(m, "content", content);
    else cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToArray(msgs, m);
    return m;
}

/* {"type":"function","function":{"name","description","parameters"}} */
static cJSON *function_tool(const cJSON *name, const cJSON *desc, const cJSON *params)
{
    cJSON *t = cJSON_CreateObject(), *f;
    cJSON_AddStringToObject(t, "type", "function");
    f = cJSON_AddObjectToObject(t, "function");
    cJSON_AddItemToObject(f, "name", cJSON_Duplicate(name, true));
    if (desc) cJSON_AddItemToObject(f, "description", cJSON_Duplicate(desc, true));
    if (params) cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(params, true));
    return t;
}

static cJSON *call_json(const char *id, const cJSON *name, cJSON *arguments)
{
    cJSON *c = cJSON_CreateObject(), *f;
    if (id) cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddItemToObject(f, "name", cJSON_Duplicate(name, true));
    cJSON_AddItemToObject(f, "arguments", arguments);
    return c;
}

/* ---------- Anthropic Messages ---------- */

static int anthropic_message(const cJSON *m, int i, cJSON *msgs, struct api_error *e)
{
    char param[80];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return bad(e, param, "invalid_type", "must be an object");
    static const char *const keys[] = {"role", "content", NULL};
    int rc = unknown_key(m, param, keys, e);
    if (rc) return rc;
    const cJSON *role = get(m, "role"), *c = get(m, "content");
    snprintf(param, sizeof param, "messages[%d].role", i);
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return bad(e, param, "invalid_value", "must be user or assistant");
    bool user = !strcmp(role->valuestring, "user");
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c)) return msg(msgs, user ? "user" : "assistant", c->valuestring), 0;
    if (!cJSON_IsArray(c)) return bad(e, param, "invalid_type", "must be a string or an array of content blocks");
    struct api_buf text = {0}, thinking = {0};
    cJSON *calls = cJSON_CreateArray();
    int k = 0, n_results = 0;
    api_buf_add(&text, "", 0), api_buf_add(&thinking, "", 0);
    for (const cJSON *b = c->child; b && !rc; b = b->next, k++) {
        char p[96];
        snprintf(p, sizeof p, "messages[%d].content[%d]", i, k);
        const cJSON *type = get(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            rc = bad(e, p, "invalid_type", "must be a block with a \"type\"");
            break;
        }
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *tx = get(b, "text");
            if (!(rc = unknown_key(b, p, anthropic_text_keys, e)) && !cJSON_IsString(tx)) rc = bad(e, p, "invalid_type", "needs a string \"text\"");
            if (!rc) api_buf_add(&text, tx->valuestring, strlen(tx->valuestring));
        } else if (!strcmp(t, "tool_result") && user) {
            static const char *const kk[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            const cJSON *id = get(b, "tool_use_id");
            if ((rc = unknown_key(b, p, kk, e))) break;
            if (!cJSON_IsString(id)) {
                rc = bad(e, p, "invalid_type", "needs a string \"tool_use_id\"");
                break;
            }
            char cp[112];
            snprintf(cp, sizeof cp, "%s.content", p);
            char *out = blocks_text(get(b, "content"), cp, &anthropic_result, e);
            if (!out) {
                rc = e->status;
                break;
            }
            n_results++;
            cJSON *tm = msg(msgs, "tool", out);
            cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
            free(out);
        } else if (!strcmp(t, "tool_use") && !user) {
            static const char *const kk[] = {"type", "id", "name", "input", "cache_control", NULL};
            const cJSON *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
            if ((rc = unknown_key(b, p, kk, e))) break;
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
                rc = bad(e, p, "invalid_type", "needs a string id and name, and an object input");
                break;
            }
            cJSON_AddItemToArray(calls, call_json(id->valuestring, name, input ? cJSON_Duplicate(input, true) : cJSON_CreateObject()));
        } else if (!strcmp(t, "thinking") && !user) {
            static const char *const kk[] = {"type", "thinking", "signature", NULL};
            const cJSON *th = get(b, "thinking");
            if (!(rc = unknown_key(b, p, kk, e)) && !cJSON_IsString(th)) rc = bad(e, p, "invalid_type", "needs a string \"thinking\"");
            if (!rc) api_buf_add(&thinking, th->valuestring, strlen(th->valuestring));
        } else {
            rc = api_errorf(e, 400, "invalid_request_error", p, "unsupported_content", "content blocks of type '%.40s' are not supported %s",
                            t, user ? "in user messages (text, tool_result)" : "in assistant messages (text, thinking, tool_use)");
        }
    }
    if (!rc && user && (text.n || !n_results)) msg(msgs, "user", text.p); /* after the results: Anthropic puts them first */
    if (!rc && !user) {
        cJSON *am = msg(msgs, "assistant", text.p);
        if (thinking.n) cJSON_AddStringToObject(am, "reasoning_content", thinking.p);
        if (cJSON_GetArraySize(calls)) cJSON_AddItemToObject(am, "tool_calls", calls), calls = NULL;
    }
    cJSON_Delete(calls);
    api_buf_free(&text), api_buf_free(&thinking);
    return rc;
}

/* tools[i] is an object with only the keys kk (its path into p). */
static int tool_at(const cJSON *t, int i, const char *const *kk, char *p, size_t pn, struct api_error *e)
{
    snprintf(p, pn, "tools[%d]", i);
    if (!cJSON_IsObject(t)) return bad(e, p, "invalid_type", "must be an object");
    return unknown_key(t, p, kk, e);
}

/* root's `tools` array into chat's, each tool through the dialect's `one`
 * (which checks it, its path in p, and appends its chat form to out). */
typedef int (*tool_fn)(const cJSON *t, int i, char *p, size_t pn, cJSON *out, struct api_error *e);
static int each_tool(const cJSON *root, cJSON *chat, tool_fn one, struct api_error *e)
{
    const cJSON *ts = get(root, "tools");
    if (!ts) return 0;
    if (!cJSON_IsArray(ts)) return bad(e, "tools", "invalid_type", "must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int i = 0, rc = 0;
    for (const cJSON *t = ts->child; t && rc == 0; t = t->next, i++) {
        char p[64];
        rc = one(t, i, p, sizeof p, out, e);
    }
    return rc;
}

/* chat's tool_choice naming one function */
static void named_choice(cJSON *chat, const char *name)
{
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name);
}

static int anthropic_tool(const cJSON *t, int i, char *p, size_t pn, cJSON *out, struct api_error *e)
{
    static const char *const kk[] = {"name", "description", "input_schema", "type", "cache_control", NULL};
    int rc = tool_at(t, i, kk, p, pn, e);
    if (rc) return rc;
    const cJSON *type = get(t, "type"), *name = get(t, "name"), *schema = get(t, "input_schema");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom")))
        return api_errorf(e, 400, "invalid_request_error", p, "unsupported_parameter", "'%s': only client tools (type custom) are served", p);
    if (!cJSON_IsString(name)) return bad(e, p, "invalid_type", "needs a string \"name\"");
    if (!cJSON_IsObject(schema)) return bad(e, p, "invalid_type", "needs an object \"input_schema\"");
    cJSON_AddItemToArray(out, function_tool(name, get(t, "description"), schema));
    return 0;
}

static int anthropic_tools(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *tc = get(root, "tool_choice");
    int rc = each_tool(root, chat, anthropic_tool, e);
    if (rc || !tc) return rc;
    static const char *const kk[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (!cJSON_IsObject(tc)) return bad(e, "tool_choice", "invalid_type", "must be an object");
    if ((rc = unknown_key(tc, "tool_choice", kk, e))) return rc;
    const cJSON *type = get(tc, "type"), *name = get(tc, "name"), *dp = get(tc, "disable_parallel_tool_use");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "auto") || !strcmp(t, "any") || !strcmp(t, "none")) {
        cJSON_AddStringToObject(chat, "tool_choice", !strcmp(t, "any") ? "required" : t);
    } else if (!strcmp(t, "tool") && cJSON_IsString(name)) {
        named_choice(chat, name->valuestring);
    } else {
        return bad(e, "tool_choice", "invalid_value", "must be {type: auto|any|none} or {type: tool, name}");
    }
    if (dp && !cJSON_IsBool(dp)) return bad(e, "tool_choice.disable_parallel_tool_use", "invalid_type", "must be true or false");
    if (cJSON_IsTrue(dp)) cJSON_AddBoolToObject(chat, "parallel_tool_calls", false);
    return 0;
}

/* The chat body an Anthropic Messages body means; NULL with e filled. */
static cJSON *messages_to_chat(const cJSON *root, struct api_error *e)
{
    static const char *const keys[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p",
                                       "top_k", "tools", "tool_choice", "thinking", "metadata", "service_tier", "nebula_test_script",
                                       "accuracy_level", NULL};
    if (unknown_key(root, "", keys, e)) return NULL;
    const cJSON *mt = get(root, "max_tokens"), *ms = get(root, "messages"), *th = get(root, "thinking"), *md = get(root, "metadata");
    const cJSON *st = get(root, "service_tier"), *temp = get(root, "temperature");
    if (!mt) return api_errorf(e, 400, "invalid_request_error", "max_tokens", "missing_required_parameter", "'max_tokens' is required"), NULL;
    if (!ms) return api_errorf(e, 400, "invalid_request_error", "messages", "missing_required_parameter", "'messages' is required"), NULL;
    if (!cJSON_IsArray(ms)) return bad(e, "messages", "invalid_type", "must be an array"), NULL;
    if (md) {
        static const char *const mk[] = {"user_id", NULL};
        if (!cJSON_IsObject(md)) return bad(e, "metadata", "invalid_type", "must be an object"), NULL;
        if (unknown_key(md, "metadata", mk, e)) return NULL;
    }
    if (st && !(cJSON_IsString(st) && (!strcmp(st->valuestring, "auto") || !strcmp(st->valuestring, "standard_only"))))
        return api_errorf(e, 400, "invalid_request_error", "service_tier", "unsupported_parameter", "'service_tier' must be auto or standard_only"), NULL;
    if (temp && cJSON_IsNumber(temp) && temp->valuedouble > 1)
        return api_errorf(e, 400, "invalid_request_error", "temperature", "invalid_value", "'temperature' must be in [0, 1]"), NULL;
    cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(chat, "messages");
    bool think = false;
    if (th) {
        static const char *const tk[] = {"type", "budget_tokens", NULL};
        const cJSON *type = get(th, "type"), *bt = get(th, "budget_tokens");
        if (!cJSON_IsObject(th) || unknown_key(th, "thinking", tk, e) || !cJSON_IsString(type)) {
            if (!e->status) bad(e, "thinking", "invalid_type", "must be {type: enabled, budget_tokens} or {type: disabled}");
            return cJSON_Delete(chat), NULL;
        }
        if (!strcmp(type->valuestring, "enabled")) {
            if (!cJSON_IsNumber(bt) || bt->valuedouble < 1024 || bt->valuedouble != (double)(long long)bt->valuedouble)
                return cJSON_Delete(chat), bad(e, "thinking.budget_tokens", "invalid_value", "must be an integer of at least 1024"), NULL;
            if (cJSON_IsNumber(mt) && bt->valuedouble >= mt->valuedouble)
                return cJSON_Delete(chat), bad(e, "thinking.budget_tokens", "invalid_value", "must be less than max_tokens"), NULL;
            think = true;
        } else if (strcmp(type->valuestring, "disabled")) {
            return cJSON_Delete(chat), bad(e, "thinking.type", "invalid_value", "must be enabled or disabled"), NULL;
        }
    }
    const cJSON *sys = get(root, "system");
    if (sys) {
        char *s = blocks_text(sys, "system", &anthropic_system, e);
        if (!s) return cJSON_Delete(chat), NULL;
        msg(msgs, "system", s);
        free(s);
    }
    int i = 0;
    for (const cJSON *m = ms->child; m; m = m->next, i++)
        if (anthropic_message(m, i, msgs, e)) return cJSON_Delete(chat), NULL;
    const cJSON *last = cJSON_GetArrayItem(ms, i - 1), *lr = last ? get(last, "role") : NULL;
    if (cJSON_IsString(lr) && !strcmp(lr->valuestring, "assistant")) { /* Anthropic's "prefill": the answer would continue it */
        char p[48];
        snprintf(p, sizeof p, "messages[%d]", i - 1);
        cJSON_Delete(chat);
        return api_errorf(e, 400, "invalid_request_error", p, "unsupported_parameter",
                          "a last assistant message (a prefilled answer to continue) is not supported: end with a user message"), NULL;
    }
    if (anthropic_tools(root, chat, e)) return cJSON_Delete(chat), NULL;
    int rc = copy(chat, "max_tokens", root, "max_tokens") | copy(chat, "temperature", root, "temperature") |
             copy(chat, "top_p", root, "top_p") | copy(chat, "top_k", root, "top_k") | copy(chat, "stream", root, "stream") |
             copy(chat, "stop", root, "stop_sequences") | copy(chat, "model", root, "model") |
             copy(chat, "nebula_test_script", root, "nebula_test_script") | copy(chat, "accuracy_level", root, "accuracy_level");
    cJSON_AddBoolToObject(chat, "think", think);
    if (think) cJSON_AddNumberToObject(chat, "think_budget", get(th, "budget_tokens")->valuedouble);
    if (rc) return cJSON_Delete(chat), oom(e), NULL;
    return chat;
}

/* ---------- OpenAI Responses ---------- */

static const char *const responses_part_types[] = {"input_text", "output_text", "text", NULL};
static const char *const responses_part_keys[] = {"type", "text", "annotations", "logprobs", NULL};
/* A Responses item's content or output: a string or text parts, never absent. */
static const struct text_blocks responses_parts = {responses_part_types, responses_part_keys, "parts", false};

static int responses_item(const cJSON *it, int i, cJSON *msgs, char **reasoning, struct api_error *e)
{
    char p[64];
    snprintf(p, sizeof p, "input[%d]", i);
    if (!cJSON_IsObject(it)) return bad(e, p, "invalid_type", "must be an object");
    const cJSON *type = get(it, "type"), *role = get(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : role ? "message" : "";
    char cp[80];
    snprintf(cp, sizeof cp, "%s.content", p);
    if (!strcmp(t, "message")) {
        static const char *const kk[] = {"type", "role", "content", "id", "status", NULL};
        int rc = unknown_key(it, p, kk, e);
        if (rc) return rc;
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
            return bad(e, p, "invalid_value", "needs a role: user, assistant, system or developer");
        char *text = blocks_text(get(it, "content"), cp, &responses_parts, e);
        if (!text) return e->status;
        cJSON *m = msg(msgs, r, text);
        free(text);
        if (!strcmp(r, "assistant") && *reasoning) cJSON_AddStringToObject(m, "reasoning_content", *reasoning), free(*reasoning), *reasoning = NULL;
        return 0;
    }
    if (!strcmp(t, "function_call")) {
        static const char *const kk[] = {"type", "call_id", "name", "arguments", "id", "status", NULL};
        int rc = unknown_key(it, p, kk, e);
        if (rc) return rc;
        const cJSON *id = get(it, "call_id"), *name = get(it, "name"), *args = get(it, "arguments");
        if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
            return bad(e, p, "invalid_type", "needs string call_id, name and arguments");
        /* Calls join the assistant message just before them (a new one if the last message is not one). */
        cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
        const cJSON *lr = last ? get(last, "role") : NULL;
        if (!lr || strcmp(lr->valuestring, "assistant")) last = msg(msgs, "assistant", NULL);
        if (*reasoning) cJSON_AddStringToObject(last, "reasoning_content", *reasoning), free(*reasoning), *reasoning = NULL;
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
        cJSON_AddItemToArray(calls, call_json(id->valuestring, name, cJSON_CreateString(args->valuestring)));
        return 0;
    }
    if (!strcmp(t, "function_call_output")) {
        static const char *const kk[] = {"type", "call_id", "output", "id", "status", NULL};
        int rc = unknown_key(it, p, kk, e);
        if (rc) return rc;
        const cJSON *id = get(it, "call_id");
        snprintf(cp, sizeof cp, "%s.output", p);
        char *out = cJSON_IsString(id) ? blocks_text(get(it, "output"), cp, &responses_parts, e) : (bad(e, p, "invalid_type", "needs a string call_id"), NULL);
        if (!out) return e->status;
        cJSON *m = msg(msgs, "tool", out);
        cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
        free(out);
        return 0;
    }
    if (!strcmp(t, "reasoning")) { /* the thinking of the assistant message or calls that follow */
        static const char *const kk[] = {"type", "id", "summary", "content", "status", NULL};
        int rc = unknown_key(it, p, kk, e);
        if (rc) return rc;
        const cJSON *c = get(it, "content");
        struct api_buf b = {0};
        api_buf_add(&b, "", 0);
        for (const cJSON *x = cJSON_IsArray(c) ? c->child : NULL; x; x = x->next) {
            const cJSON *tx = get(x, "text");
            if (cJSON_IsString(tx)) api_buf_add(&b, tx->valuestring, strlen(tx->valuestring));
        }
        free(*reasoning);
        *reasoning = b.p;
        return 0;
    }
    return api_errorf(e, 400, "invalid_request_error", p, "unsupported_content",
                      "input items of type '%.40s' are not supported (message, function_call, function_call_output, reasoning)", t);
}

static int responses_tool(const cJSON *t, int i, char *p, size_t pn, cJSON *out, struct api_error *e)
{
    static const char *const kk[] = {"type", "name", "description", "parameters", "strict", NULL};
    const cJSON *type = get(t, "type"), *name = get(t, "name");
    if (cJSON_IsObject(t) && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
        return snprintf(p, pn, "tools[%d]", i),
               api_errorf(e, 400, "invalid_request_error", p, "unsupported_parameter", "'%s': only function tools are served", p);
    int rc = tool_at(t, i, kk, p, pn, e);
    if (rc) return rc;
    if (!cJSON_IsString(name)) return bad(e, p, "invalid_type", "needs a string \"name\"");
    if (cJSON_IsTrue(get(t, "strict")))
        return api_errorf(e, 400, "invalid_request_error", p, "unsupported_parameter",
                          "'%s': strict schema adherence is not supported (give \"strict\": false)", p);
    cJSON_AddItemToArray(out, function_tool(name, get(t, "description"), get(t, "parameters")));
    return 0;
}

static int responses_tools(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *tc = get(root, "tool_choice");
    int rc = each_tool(root, chat, responses_tool, e);
    if (rc || !tc) return rc;
    if (cJSON_IsString(tc)) return copy(chat, "tool_choice", root, "tool_choice");
    const cJSON *type = get(tc, "type"), *name = get(tc, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return bad(e, "tool_choice", "invalid_value", "must be none, auto, required or {type: function, name}");
    named_choice(chat, name->valuestring);
    return 0;
}

static cJSON *responses_to_chat(const cJSON *root, struct api_error *e)
{
    static const char *const keys[] = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
                                       "temperature", "top_p", "stream", "store", "user", "text", "truncation", "include", "service_tier",
                                       "think", "nebula_test_script", "accuracy_level", NULL};
    if (unknown_key(root, "", keys, e)) return NULL;
    const cJSON *v;
    if ((v = get(root, "store")) && !cJSON_IsFalse(v))
        return api_errorf(e, 400, "invalid_request_error", "store", "unsupported_parameter", "'store' must be false: responses are not stored"), NULL;
    if ((v = get(root, "truncation")) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "disabled")))
        return api_errorf(e, 400, "invalid_request_error", "truncation", "unsupported_parameter", "'truncation' must be disabled"), NULL;
    if ((v = get(root, "include")) && !(cJSON_IsArray(v) && !v->child))
        return api_errorf(e, 400, "invalid_request_error", "include", "unsupported_parameter", "'include' must be empty"), NULL;
    if ((v = get(root, "service_tier")) && !(cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "default"))))
        return api_errorf(e, 400, "invalid_request_error", "service_tier", "unsupported_parameter", "'service_tier' must be auto or default"), NULL;
    if ((v = get(root, "text"))) {
        const cJSON *f = cJSON_IsObject(v) ? get(v, "format") : NULL, *ft = f ? get(f, "type") : NULL;
        static const char *const tk[] = {"format", NULL};
        if (!cJSON_IsObject(v) || unknown_key(v, "text", tk, e) || (f && !(cJSON_IsString(ft) && !strcmp(ft->valuestring, "text")))) {
            if (!e->status)
                api_errorf(e, 400, "invalid_request_error", "text.format", "unsupported_parameter", "'text.format' must be {type: text}");
            return NULL;
        }
    }
    const cJSON *in = get(root, "input"), *ins = get(root, "instructions");
    if (!in) return api_errorf(e, 400, "invalid_request_error", "input", "missing_required_parameter", "'input' is required"), NULL;
    if (ins && !cJSON_IsString(ins)) return bad(e, "instructions", "invalid_type", "must be a string"), NULL;
    cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(chat, "messages");
    if (ins) msg(msgs, "system", ins->valuestring);
    if (cJSON_IsString(in)) {
        msg(msgs, "user", in->valuestring);
    } else if (cJSON_IsArray(in)) {
        char *reasoning = NULL;
        int i = 0;
        for (const cJSON *it = in->child; it; it = it->next, i++)
            if (responses_item(it, i, msgs, &reasoning, e)) return free(reasoning), cJSON_Delete(chat), NULL;
        free(reasoning);
    } else {
        return cJSON_Delete(chat), bad(e, "input", "invalid_type", "must be a string or an array of items"), NULL;
    }
    if (responses_tools(root, chat, e)) return cJSON_Delete(chat), NULL;
    int rc = copy(chat, "max_tokens", root, "max_output_tokens") | copy(chat, "temperature", root, "temperature") |
             copy(chat, "top_p", root, "top_p") | copy(chat, "stream", root, "stream") | copy(chat, "model", root, "model") |
             copy(chat, "parallel_tool_calls", root, "parallel_tool_calls") | copy(chat, "think", root, "think") |
             copy(chat, "nebula_test_script", root, "nebula_test_script") | copy(chat, "user", root, "user") |
             copy(chat, "accuracy_level", root, "accuracy_level");
    if (rc) return cJSON_Delete(chat), oom(e), NULL;
    return chat;
}

int api_parse_any(enum api_kind kind, const char *body, size_t len, struct api_request *r, struct api_error *e)
{
    if (kind != API_MESSAGES && kind != API_RESPONSES) return api_parse_request(kind, body, len, r, e);
    int rc = api_parse_translated(kind, body, len, kind == API_MESSAGES ? messages_to_chat : responses_to_chat, r, e);
    r->dialect = kind == API_MESSAGES ? API_ANTHROPIC : API_OPENAI_RESPONSES;
    return rc;
}
