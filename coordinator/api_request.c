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
#include "core/util/utf8.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(struct api_error *e, const char *param, const char *fmt, const char *detail)
{
    return api_errorf(e, 400, "invalid_request_error", param, "invalid_value", fmt, detail ? detail : "");
}

static int oom(struct api_error *e) { return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory"); }

/* x as a message shows it: integers as integers (never 1.67772e+07), other
 * values with the digits that read back the same. */
static const char *fmt_num(double x, char out[32])
{
    if (x == floor(x) && fabs(x) < 1e19) {
        snprintf(out, 32, "%.0f", x);
        return out;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, 32, "%.*g", p, x);
        if (strtod(out, NULL) == x) break;
    }
    return out;
}

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
    if (x < lo || x > hi) {
        char a[32], b[32], c[32];
        return api_errorf(e, 400, "invalid_request_error", name, "invalid_value", "'%s' is %s; it must be in [%s, %s]", name,
                          fmt_num(x, a), fmt_num(lo, b), fmt_num(hi, c));
    }
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

/* ---- every field is known: served, refused with a 400 naming it, or unknown (also a 400) ---- */

static const char *const chat_fields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "seed", "stop", "stream", "stream_options", "n", "think",
    "chat_template_kwargs", "accuracy_level", "context_length", "prefill_chunk", "ignore_eos", "response_format",
    "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs", "user", "logit_bias", "nebula_test_script", "think_budget", "cache_prompt", NULL};
static const char *const completion_fields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "seed", "stop", "stream", "stream_options", "n", "think", "chat_template_kwargs", "accuracy_level", "context_length",
    "prefill_chunk", "ignore_eos", "logprobs", "echo", "best_of", "suffix", "user", "logit_bias", "nebula_test_script",
    "response_format", "cache_prompt", NULL};
static const char *const tokenize_fields[] = {"model", "text", "messages", "think", "chat_template_kwargs", "tools", "tool_choice",
                                              "parallel_tool_calls", NULL};
/* OpenAI fields this server does not implement: any value but the harmless
 * one (checked in refuse_unserved) is a 400 naming them. */
static const char *const unserved_fields[] = {
    "audio", "modalities", "prediction", "web_search_options", "functions", "function_call", "reasoning_effort",
    "verbosity", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key", NULL};

static bool listed(const char *const *list, const char *name)
{
    for (; *list; list++)
        if (!strcmp(*list, name)) return true;
    return false;
}

static int unsupported(struct api_error *e, const char *param, const char *why)
{
    return api_errorf(e, 400, "invalid_request_error", param, "unsupported_parameter", "'%s' is not supported by this server%s%s", param,
                      why ? ": " : "", why ? why : "");
}

/* Keys of object o that are not in list: a 400 naming the first ("prefix.key"). */
static int only_known(const cJSON *o, const char *prefix, const char *const *list, struct api_error *e)
{
    for (const cJSON *k = o->child; k; k = k->next) {
        if (listed(list, k->string)) continue;
        char param[96];
        snprintf(param, sizeof param, "%s%s%.60s", prefix, *prefix ? "." : "", k->string);
        if (!*prefix && listed(unserved_fields, k->string)) {
            if (cJSON_IsNull(k)) continue;
            if (!strcmp(k->string, "store") && cJSON_IsFalse(k)) continue;
            if (!strcmp(k->string, "service_tier") && cJSON_IsString(k) &&
                (!strcmp(k->valuestring, "auto") || !strcmp(k->valuestring, "default")))
                continue;
            if (!strcmp(k->string, "modalities") && cJSON_IsArray(k) && cJSON_GetArraySize(k) == 1 &&
                cJSON_IsString(k->child) && !strcmp(k->child->valuestring, "text"))
                continue;
            return unsupported(e, param, NULL);
        }
        return api_errorf(e, 400, "invalid_request_error", param, "unknown_parameter", "Unrecognized request argument supplied: %s", param);
    }
    return 0;
}

/* Known fields whose only served value is their default. */
static int refuse_unserved(const cJSON *root, struct api_error *e)
{
    const cJSON *v;
    if ((v = field(root, "frequency_penalty")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return unsupported(e, "frequency_penalty", "only 0 (presence_penalty is served)");
    if ((v = field(root, "logit_bias")) && !(cJSON_IsObject(v) && !v->child)) return unsupported(e, "logit_bias", NULL);
    if ((v = field(root, "echo")) && !cJSON_IsFalse(v)) return unsupported(e, "echo", NULL);
    if ((v = field(root, "suffix")) && !(cJSON_IsString(v) && !v->valuestring[0])) return unsupported(e, "suffix", NULL);
    if ((v = field(root, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) return unsupported(e, "best_of", "only 1");
    if ((v = field(root, "user")) && !cJSON_IsString(v))
        return api_errorf(e, 400, "invalid_request_error", "user", "invalid_type", "'user' must be a string");
    return 0;
}

/* Chat: logprobs true/false and top_logprobs 0-20 (only with logprobs);
 * completions: logprobs k (0-20), the alternatives a token. */
static int parse_logprobs(const cJSON *root, struct api_request *r, struct api_error *e)
{
    double x;
    int rc;
    if (r->kind == API_COMPLETION) {
        if ((rc = number(root, "logprobs", 0, API_MAX_TOP_LOGPROBS, true, &x, e)) > 1) return rc;
        if (rc) r->logprobs = true, r->top_logprobs = (int)x;
        return 0;
    }
    if ((rc = boolean(root, "logprobs", &r->logprobs, e)) > 1) return rc;
    if ((rc = number(root, "top_logprobs", 0, API_MAX_TOP_LOGPROBS, true, &x, e)) > 1) return rc;
    if (rc && !r->logprobs)
        return api_errorf(e, 400, "invalid_request_error", "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
    if (rc) r->top_logprobs = (int)x;
    return 0;
}

/* Every string (and key) of the body is valid UTF-8 without NUL: a 400
 * naming where.  A `\u0000` escape reaches here as the bytes C0 80 (see
 * api_parse_request), which UTF-8 forbids. */
static int check_strings(const cJSON *v, char *path, size_t at, struct api_error *e)
{
    if (cJSON_IsString(v)) {
        const unsigned char *s = (const unsigned char *)v->valuestring;
        size_t n = strlen(v->valuestring);
        for (size_t i = 0; i < n;) {
            size_t k = nb_utf8_len(s + i, n - i);
            if (k) {
                i += k;
                continue;
            }
            const char *p = at ? path : "the body";
            if (i + 1 < n && s[i] == 0xC0 && s[i + 1] == 0x80)
                return api_errorf(e, 400, "invalid_request_error", at ? path : NULL, "invalid_value", "'%s' contains a NUL character (\\u0000)", p);
            return api_errorf(e, 400, "invalid_request_error", at ? path : NULL, "invalid_value", "'%s' is not valid UTF-8 (byte %zu)", p, i);
        }
        return 0;
    }
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v)) return 0;
    int i = 0, rc;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        size_t m = at;
        if (cJSON_IsObject(v)) {
            const cJSON key = {.type = cJSON_String, .valuestring = c->string};
            if ((rc = check_strings(&key, path, at, e))) return rc;
            snprintf(path + at, 200 - at, "%s%.40s", at ? "." : "", c->string);
        } else {
            snprintf(path + at, 200 - at, "[%d]", i);
        }
        m = strlen(path);
        if ((rc = check_strings(c, path, m, e))) return rc;
        path[at] = 0;
    }
    return 0;
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
    static const char *const kw_fields[] = {"enable_thinking", NULL};
    int krc = only_known(kw, "chat_template_kwargs", kw_fields, e);
    if (krc) return krc;
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
        static const char *const part_fields[] = {"type", "text", NULL};
        int prc = !strcmp(type->valuestring, "text") ? only_known(part, param, part_fields, e) : 0;
        if (prc) return prc;
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
        r->msgs[i] = (struct chat_msg){(enum chat_role)rl, text, NULL, NULL, 0};
        r->n_msgs = i + 1;
        if (rc) return rc;
        static const char *const msg_fields[] = {"role", "content", "reasoning_content", "tool_calls", "tool_call_id", NULL};
        snprintf(param, sizeof param, "messages[%d]", i);
        if (field(m, "name")) return snprintf(param, sizeof param, "messages[%d].name", i), unsupported(e, param, "participant names are not rendered");
        if ((rc = only_known(m, param, msg_fields, e))) return rc;
        const cJSON *calls = field(m, "tool_calls"), *call_id = field(m, "tool_call_id");
        if (calls && rl != CHAT_ASSISTANT)
            return snprintf(param, sizeof param, "messages[%d].tool_calls", i),
                   api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s': only assistant messages carry tool calls", param);
        if (calls && (rc = api_parse_msg_calls(calls, i, &r->msgs[i], e))) return rc;
        if (call_id && (rl != CHAT_TOOL || !cJSON_IsString(call_id)))
            return snprintf(param, sizeof param, "messages[%d].tool_call_id", i),
                   api_errorf(e, 400, "invalid_request_error", param, "invalid_value", "'%s' must be a string, on a tool message", param);
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
    static const char *const so_fields[] = {"include_usage", NULL};
    if (so && (rc = only_known(so, "stream_options", so_fields, e))) return rc;
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
    bool cache_prompt = true; /* llama.cpp's name: false keeps the request out of the prompt cache */
    if ((rc = boolean(root, "cache_prompt", &cache_prompt, e)) > 1) return rc;
    r->no_cache = !cache_prompt;
    const cJSON *script = field(root, "nebula_test_script");
    if (script && (!cJSON_IsString(script) || !script->valuestring[0]))
        return api_errorf(e, 400, "invalid_request_error", "nebula_test_script", "invalid_type", "'nebula_test_script' must be a non-empty string");
    if (script && !(r->script = strdup(script->valuestring))) return oom(e);
    if ((rc = parse_logprobs(root, r, e))) return rc;
    if (r->kind != API_COMPLETION) {
        if ((rc = number(root, "think_budget", 1, API_MAX_TOKENS_LIMIT, true, &x, e)) > 1) return rc;
        if (rc && !r->think)
            return api_errorf(e, 400, "invalid_request_error", "think_budget", "invalid_value", "'think_budget' needs thinking on");
        if (rc) r->think_budget = (long long)x;
    }
    if ((rc = api_parse_format(root, r, e))) return rc;
    return refuse_unserved(root, e);
}

static int parse_root(enum api_kind kind, const cJSON *root, struct api_request *r, struct api_error *e)
{
    int rc;
    if (!cJSON_IsObject(root)) return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    char path[200] = "";
    if ((rc = check_strings(root, path, 0, e))) return rc;
    if ((rc = only_known(root, "", kind == API_CHAT ? chat_fields : kind == API_COMPLETION ? completion_fields : tokenize_fields, e)))
        return rc;
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return api_errorf(e, 400, "invalid_request_error", "model", "invalid_type", "'model' must be a string");
    if (model && !(r->model = strdup(model->valuestring))) return oom(e);
    if ((rc = parse_think(root, &r->think, e))) return rc;
    if (kind == API_CHAT || kind == API_TEMPLATE) {
        if ((rc = parse_messages(root, r, e))) return rc;
    } else {
        const char *name = kind == API_TOKENIZE ? "text" : "prompt";
        const cJSON *p = field(root, name);
        if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child; /* ["text"] */
        if (kind == API_TOKENIZE && !p && field(root, "messages")) {
            if ((rc = parse_messages(root, r, e))) return rc;
            return api_parse_tools(root, r, e);
        }
        if (!p)
            return api_errorf(e, 400, "invalid_request_error", name, "missing_required_parameter",
                              kind == API_TOKENIZE ? "'text' or 'messages' is required" : "'prompt' is required");
        if (!cJSON_IsString(p)) return api_errorf(e, 400, "invalid_request_error", name, "invalid_type", "'%s' must be a string", name);
        if (!(r->prompt = strdup(p->valuestring))) return oom(e);
    }
    if (kind != API_COMPLETION && r->msgs && (rc = api_parse_tools(root, r, e))) return rc;
    return kind == API_TOKENIZE || kind == API_TEMPLATE ? 0 : parse_generation(root, r, e);
}

/* The translated body (a dialect's: api_dialects.c) as a chat request, after the original's strings are checked. */
static int parse_translated(const cJSON *root, api_translate_fn translate, struct api_request *r, struct api_error *e)
{
    char path[200] = "";
    int rc;
    if (!cJSON_IsObject(root)) return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    if ((rc = check_strings(root, path, 0, e))) return rc;
    cJSON *chat = translate(root, e);
    if (!chat) return e->status ? e->status : oom(e);
    rc = parse_root(API_CHAT, chat, r, e);
    cJSON_Delete(chat);
    return rc;
}

int api_parse_request(enum api_kind kind, const char *body, size_t len, struct api_request *r, struct api_error *e)
{
    return api_parse_translated(kind, body, len, NULL, r, e);
}

int api_parse_translated(enum api_kind kind, const char *body, size_t len, api_translate_fn translate, struct api_request *r,
                         struct api_error *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind, r->max_tokens = -1, r->think = true, r->accuracy_level = 3;
    r->sp = sampling_defaults(true);
    /* A \u0000 escape would end cJSON's C string early: it becomes the bytes
     * C0 80 C0 80 C0 80 (the same length, so byte offsets hold), which no
     * valid UTF-8 holds and check_strings reports as NUL. */
    char *copy = malloc(len + 1);
    if (!copy) return oom(e);
    memcpy(copy, body, len);
    copy[len] = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (copy[i] != '\\') continue;
        if (i + 5 < len && copy[i + 1] == 'u' && !memcmp(copy + i + 2, "0000", 4)) {
            memcpy(copy + i, "\xC0\x80\xC0\x80\xC0\x80", 6);
            i += 5;
        } else {
            i++; /* the escaped character */
        }
    }
    body = copy;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        free(copy);
        if (!len) return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body is empty: send a JSON object");
        return api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body is not valid JSON (error near byte %zu)", at);
    }
    /* Only whitespace may follow the value. */
    while (end && end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    int rc = end && end < body + len
                 ? api_errorf(e, 400, "invalid_request_error", NULL, "invalid_json", "the body has bytes after its JSON value (at byte %zu)", (size_t)(end - body))
                 : translate ? parse_translated(root, translate, r, e) : parse_root(kind, root, r, e);
    cJSON_Delete(root);
    free(copy);
    if (translate) r->kind = API_CHAT;
    return rc;
}

void api_request_free(struct api_request *r)
{
    for (int i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].content), free((char *)r->msgs[i].reasoning);
        api_free_msg_calls(&r->msgs[i]);
    }
    api_tools_free(r->tools, r->n_tools);
    free(r->tool_name);
    free(r->script);
    free(r->msgs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->model);
    free(r->prompt);
    api_format_free(r);
    memset(r, 0, sizeof *r);
}
