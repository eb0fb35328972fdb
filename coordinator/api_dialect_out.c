/* api_dialect_out.c — Anthropic Messages and OpenAI Responses: the finished
 * job as a response, its stream of events, and their error shape
 * (docs/API.md).  Called with a.mu held, like api_respond.c and api_stream.c.
 *
 * The one idea of the streams: the job's output is a sequence of runs —
 * reasoning, content, tool calls — and each run is one content block
 * (Anthropic) or output item (Responses): a run of a new kind closes the open
 * block and opens the next, each call is a block of its own, and the end of
 * the job closes what is open before the closing events. */
#include "coordinator/api.h"

#include "core/util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RUN_NONE, RUN_THINKING, RUN_TEXT };

cJSON *api_error_json_dialect(const struct api_error *e, enum api_dialect d)
{
    if (d != API_ANTHROPIC) return api_error_json(e);
    const char *type = e->status == 404 ? "not_found_error" : e->status == 413 ? "request_too_large" : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 ? "overloaded_error" : e->status >= 500 ? "api_error" : "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *x;
    cJSON_AddStringToObject(o, "type", "error");
    x = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(x, "type", type);
    cJSON_AddStringToObject(x, "message", e->message);
    return o;
}

/* The hex part of the response id: the other ids are built from it. */
static const char *hex(const struct gen_info *g) { return g->id + strcspn(g->id, "_") + 1; }

static const char *model(const struct api *a, const struct gen_info *g) { return g->model[0] ? g->model : a->name; }

static const char *stop_reason(const struct gen_info *g, const struct api_job *j, const char **sequence)
{
    *sequence = NULL;
    if (!j->finish_reason) return NULL;
    if (!strcmp(j->finish_reason, "tool_calls")) return "tool_use";
    if (!strcmp(j->finish_reason, "length")) return "max_tokens";
    if (j->stop_hit >= 0 && j->stop_hit < API_MAX_STOP && g->stop[j->stop_hit]) return *sequence = g->stop[j->stop_hit], "stop_sequence";
    return "end_turn";
}

static void add_nebula_error(cJSON *o, const struct api_job *j)
{
    if (j->tool_error[0]) cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "nebula"), "tool_call_error", j->tool_error);
}

static cJSON *tool_use_block(const struct gen_info *g, const struct api_job *j, int k, bool with_input)
{
    char id[64];
    snprintf(id, sizeof id, "toolu_%s%d", hex(g), k);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", j->calls[k].name);
    cJSON *in = with_input ? cJSON_Parse(j->calls[k].arguments) : NULL;
    cJSON_AddItemToObject(b, "input", in ? in : cJSON_CreateObject());
    return b;
}

static cJSON *anthropic_usage(const struct api_job *j)
{
    cJSON *u = cJSON_CreateObject();
    /* Anthropic counts the cached part apart: input_tokens + cache_read_input_tokens = the prompt */
    cJSON_AddNumberToObject(u, "input_tokens", (double)(j->n_ids - j->cached_ids));
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", (double)j->cached_ids);
    cJSON_AddNumberToObject(u, "output_tokens", (double)j->completion_tokens);
    return u;
}

static cJSON *message_head(const struct api *a, const struct gen_info *g)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", model(a, g));
    return o;
}

cJSON *api_messages_json(const struct api *a, const struct gen_info *g, const struct api_job *j)
{
    cJSON *o = message_head(a, g), *content = cJSON_AddArrayToObject(o, "content"), *b;
    if (j->reasoning.n) {
        cJSON_AddItemToArray(content, b = cJSON_CreateObject());
        cJSON_AddStringToObject(b, "type", "thinking");
        api_add_text(b, "thinking", j->reasoning.p, j->reasoning.n);
        cJSON_AddStringToObject(b, "signature", "");
    }
    if (j->content.n || (!j->n_calls && !j->reasoning.n)) {
        cJSON_AddItemToArray(content, b = cJSON_CreateObject());
        cJSON_AddStringToObject(b, "type", "text");
        api_add_text(b, "text", j->content.p, j->content.n);
    }
    for (int k = 0; k < j->n_calls; k++) cJSON_AddItemToArray(content, tool_use_block(g, j, k, true));
    const char *seq, *why = stop_reason(g, j, &seq);
    cJSON_AddStringToObject(o, "stop_reason", why);
    if (seq) cJSON_AddStringToObject(o, "stop_sequence", seq);
    else cJSON_AddNullToObject(o, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", anthropic_usage(j));
    add_nebula_error(o, j);
    return o;
}

/* ---------- Responses ---------- */

static void item_id(const struct gen_info *g, const char *prefix, int k, char *out, size_t n)
{
    if (k) snprintf(out, n, "%s_%s_%d", prefix, hex(g), k);
    else snprintf(out, n, "%s_%s", prefix, hex(g));
}

static cJSON *reasoning_item(const struct gen_info *g, const char *text, size_t n, bool done)
{
    char id[64];
    item_id(g, "rs", 0, id, sizeof id);
    cJSON *it = cJSON_CreateObject(), *c, *part;
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddArrayToObject(it, "summary");
    c = cJSON_AddArrayToObject(it, "content");
    if (done) {
        cJSON_AddItemToArray(c, part = cJSON_CreateObject());
        cJSON_AddStringToObject(part, "type", "reasoning_text");
        api_add_text(part, "text", text, n);
    }
    return it;
}

static cJSON *text_part(const char *text, size_t n)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    api_add_text(p, "text", text ? text : "", text ? n : 0);
    cJSON_AddArrayToObject(p, "annotations");
    return p;
}

static cJSON *message_item(const struct gen_info *g, int k, const char *text, size_t n, bool done)
{
    char id[64];
    item_id(g, "msg", k, id, sizeof id);
    cJSON *it = cJSON_CreateObject(), *c;
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(it, "role", "assistant");
    c = cJSON_AddArrayToObject(it, "content");
    if (done) cJSON_AddItemToArray(c, text_part(text, n));
    return it;
}

static cJSON *call_item(const struct gen_info *g, const struct api_job *j, int k, bool done)
{
    char id[64], call[64];
    snprintf(id, sizeof id, "fc_%s%d", hex(g), k);
    snprintf(call, sizeof call, "call_%s%d", hex(g), k);
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "call_id", call);
    cJSON_AddStringToObject(it, "name", j->calls[k].name);
    cJSON_AddStringToObject(it, "arguments", done ? j->calls[k].arguments : "");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    return it;
}

cJSON *api_responses_json(const struct api *a, const struct gen_info *g, const struct api_job *j, const char *status)
{
    cJSON *o = cJSON_CreateObject(), *out, *u;
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", floor(g->created));
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddNullToObject(o, "error");
    bool done = strcmp(status, "in_progress");
    if (done && j->finish_reason && !strcmp(j->finish_reason, "length"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", model(a, g));
    out = cJSON_AddArrayToObject(o, "output");
    if (done) {
        if (j->reasoning.n) cJSON_AddItemToArray(out, reasoning_item(g, j->reasoning.p, j->reasoning.n, true));
        if (j->content.n || !j->n_calls) cJSON_AddItemToArray(out, message_item(g, 0, j->content.p, j->content.n, true));
        for (int k = 0; k < j->n_calls; k++) cJSON_AddItemToArray(out, call_item(g, j, k, true));
    }
    if (done) {
        u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", (double)j->n_ids);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", (double)j->cached_ids);
        cJSON_AddNumberToObject(u, "output_tokens", (double)j->completion_tokens);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_ids + (size_t)j->completion_tokens));
    }
    add_nebula_error(o, j);
    return o;
}

/* ---------- streams ---------- */

/* `event: NAME` + `data: {…}`; Responses events also carry their type and sequence_number. */
static int ev(struct api_stream *s, const char *name, cJSON *o)
{
    cJSON_AddStringToObject(o, "type", name);
    if (s->g.dialect == API_OPENAI_RESPONSES) cJSON_AddNumberToObject(o, "sequence_number", (double)s->seq++);
    return api_sse_event(&s->out, name, o);
}

static cJSON *obj_with(const char *k, cJSON *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, k, v);
    return o;
}

static cJSON *at_index(cJSON *o, const char *k, int i) { return cJSON_AddNumberToObject(o, k, i), o; }

/* {k: the n bytes at t} (api_add_text), or NULL when out of memory. */
static cJSON *with_text(const char *k, const char *t, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    if (o && api_add_text(o, k, t, n)) cJSON_Delete(o), o = NULL;
    return o;
}

static const struct api_buf *run_buf(const struct api_stream *s, int kind) { return kind == RUN_THINKING ? &s->j->reasoning : &s->j->content; }

static int open_run(struct api_stream *s, int kind)
{
    int i = s->n_blocks;
    s->open_kind = kind, s->open_from = run_buf(s, kind)->n;
    if (s->g.dialect == API_ANTHROPIC) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", kind == RUN_THINKING ? "thinking" : "text");
        cJSON_AddStringToObject(b, kind == RUN_THINKING ? "thinking" : "text", "");
        if (kind == RUN_THINKING) cJSON_AddStringToObject(b, "signature", "");
        return ev(s, "content_block_start", at_index(obj_with("content_block", b), "index", i));
    }
    cJSON *item = kind == RUN_THINKING ? reasoning_item(&s->g, "", 0, false) : message_item(&s->g, i, "", 0, false);
    char id[64];
    snprintf(id, sizeof id, "%s", cJSON_GetObjectItemCaseSensitive(item, "id")->valuestring);
    int rc = ev(s, "response.output_item.added", at_index(obj_with("item", item), "output_index", i));
    if (!rc && kind == RUN_TEXT) {
        cJSON *o = at_index(at_index(obj_with("part", text_part("", 0)), "output_index", i), "content_index", 0);
        cJSON_AddStringToObject(o, "item_id", id);
        rc = ev(s, "response.content_part.added", o);
    }
    return rc;
}

static int run_delta(struct api_stream *s, const char *p, size_t n)
{
    int i = s->n_blocks, rc;
    if (s->g.dialect == API_ANTHROPIC) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", s->open_kind == RUN_THINKING ? "thinking_delta" : "text_delta");
        if ((rc = api_add_text(d, s->open_kind == RUN_THINKING ? "thinking" : "text", p, n))) return cJSON_Delete(d), rc;
        rc = ev(s, "content_block_delta", at_index(obj_with("delta", d), "index", i));
    } else {
        char id[64];
        item_id(&s->g, s->open_kind == RUN_THINKING ? "rs" : "msg", s->open_kind == RUN_THINKING ? 0 : i, id, sizeof id);
        cJSON *o = with_text("delta", p, n);
        if (!o) return NB_ENOMEM;
        o = at_index(at_index(o, "output_index", i), "content_index", 0);
        cJSON_AddStringToObject(o, "item_id", id);
        rc = ev(s, s->open_kind == RUN_THINKING ? "response.reasoning_text.delta" : "response.output_text.delta", o);
    }
    return rc;
}

static int close_run(struct api_stream *s)
{
    if (s->open_kind == RUN_NONE) return 0;
    int i = s->n_blocks, kind = s->open_kind, rc = 0;
    s->open_kind = RUN_NONE, s->n_blocks++;
    if (s->g.dialect == API_ANTHROPIC) return ev(s, "content_block_stop", at_index(cJSON_CreateObject(), "index", i));
    const struct api_buf *b = run_buf(s, kind);
    const char *text = b->p ? b->p + s->open_from : "";
    size_t n = b->n - s->open_from;
    char id[64];
    item_id(&s->g, kind == RUN_THINKING ? "rs" : "msg", kind == RUN_THINKING ? 0 : i, id, sizeof id);
    if (kind == RUN_THINKING) {
        cJSON *o = with_text("text", text, n);
        if (!o) return NB_ENOMEM;
        o = at_index(at_index(o, "output_index", i), "content_index", 0);
        cJSON_AddStringToObject(o, "item_id", id);
        rc = ev(s, "response.reasoning_text.done", o);
        if (!rc) rc = ev(s, "response.output_item.done", at_index(obj_with("item", reasoning_item(&s->g, text, n, true)), "output_index", i));
    } else {
        cJSON *o = with_text("text", text, n);
        if (!o) return NB_ENOMEM;
        o = at_index(at_index(o, "output_index", i), "content_index", 0);
        cJSON_AddStringToObject(o, "item_id", id);
        rc = ev(s, "response.output_text.done", o);
        if (!rc) {
            o = at_index(at_index(obj_with("part", text_part(text, n)), "output_index", i), "content_index", 0);
            cJSON_AddStringToObject(o, "item_id", id);
            rc = ev(s, "response.content_part.done", o);
        }
        if (!rc) rc = ev(s, "response.output_item.done", at_index(obj_with("item", message_item(&s->g, i, text, n, true)), "output_index", i));
    }
    return rc;
}

static int call_run(struct api_stream *s, int k)
{
    int rc = close_run(s), i = s->n_blocks++;
    const struct api_job *j = s->j;
    if (rc) return rc;
    if (s->g.dialect == API_ANTHROPIC) {
        rc = ev(s, "content_block_start", at_index(obj_with("content_block", tool_use_block(&s->g, j, k, false)), "index", i));
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", j->calls[k].arguments);
        if (!rc) rc = ev(s, "content_block_delta", at_index(obj_with("delta", d), "index", i));
        else cJSON_Delete(d);
        return rc ? rc : ev(s, "content_block_stop", at_index(cJSON_CreateObject(), "index", i));
    }
    char id[64];
    snprintf(id, sizeof id, "fc_%s%d", hex(&s->g), k);
    rc = ev(s, "response.output_item.added", at_index(obj_with("item", call_item(&s->g, j, k, false)), "output_index", i));
    cJSON *o = at_index(obj_with("delta", cJSON_CreateString(j->calls[k].arguments)), "output_index", i);
    cJSON_AddStringToObject(o, "item_id", id);
    if (!rc) rc = ev(s, "response.function_call_arguments.delta", o);
    else cJSON_Delete(o);
    o = at_index(obj_with("arguments", cJSON_CreateString(j->calls[k].arguments)), "output_index", i);
    cJSON_AddStringToObject(o, "item_id", id);
    if (!rc) rc = ev(s, "response.function_call_arguments.done", o);
    else cJSON_Delete(o);
    return rc ? rc : ev(s, "response.output_item.done", at_index(obj_with("item", call_item(&s->g, j, k, true)), "output_index", i));
}

int api_dialect_stream_start(struct api_stream *s)
{
    s->started = true;
    if (s->g.dialect == API_ANTHROPIC) {
        cJSON *m = message_head(s->a, &s->g);
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", anthropic_usage(s->j));
        return ev(s, "message_start", obj_with("message", m));
    }
    int rc = ev(s, "response.created", obj_with("response", api_responses_json(s->a, &s->g, s->j, "in_progress")));
    return rc ? rc : ev(s, "response.in_progress", obj_with("response", api_responses_json(s->a, &s->g, s->j, "in_progress")));
}

static int finish_events(struct api_stream *s)
{
    const struct api_job *j = s->j;
    if (j->err.status || !j->finish_reason) {
        struct api_error e = j->err;
        if (!e.status) api_errorf(&e, 503, "server_error", NULL, "cancelled", "the generation was cancelled (the server is stopping)");
        if (s->g.dialect == API_ANTHROPIC) {
            cJSON *o = api_error_json_dialect(&e, API_ANTHROPIC);
            cJSON_DeleteItemFromObject(o, "type");
            return ev(s, "error", o);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", e.code[0] ? e.code : "server_error");
        cJSON_AddStringToObject(o, "message", e.message);
        cJSON_AddNullToObject(o, "param");
        return ev(s, "error", o);
    }
    if (s->g.dialect == API_ANTHROPIC) {
        const char *seq, *why = stop_reason(&s->g, j, &seq);
        cJSON *d = cJSON_CreateObject(), *o;
        cJSON_AddStringToObject(d, "stop_reason", why);
        if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
        else cJSON_AddNullToObject(d, "stop_sequence");
        o = obj_with("delta", d);
        cJSON_AddItemToObject(o, "usage", anthropic_usage(j)); /* the whole usage, as Anthropic's message_delta has it */
        add_nebula_error(o, j);
        int rc = ev(s, "message_delta", o);
        return rc ? rc : ev(s, "message_stop", cJSON_CreateObject());
    }
    bool incomplete = !strcmp(j->finish_reason, "length");
    const char *status = incomplete ? "incomplete" : "completed";
    return ev(s, incomplete ? "response.incomplete" : "response.completed", obj_with("response", api_responses_json(s->a, &s->g, j, status)));
}

int api_dialect_stream_news(struct api_stream *s)
{
    struct api_job *j = s->j;
    int rc = 0;
    if (j->prefill_done != s->prefill_sent) rc = api_stream_prefill_comment(s);
    if (!rc && j->reasoning.n > s->r_off) {
        if (s->open_kind != RUN_THINKING) rc = close_run(s), rc = rc ? rc : open_run(s, RUN_THINKING);
        if (!rc) rc = run_delta(s, j->reasoning.p + s->r_off, j->reasoning.n - s->r_off);
        s->r_off = j->reasoning.n;
    }
    if (!rc && j->content.n > s->c_off) {
        if (s->open_kind != RUN_TEXT) rc = close_run(s), rc = rc ? rc : open_run(s, RUN_TEXT);
        if (!rc) rc = run_delta(s, j->content.p + s->c_off, j->content.n - s->c_off);
        s->c_off = j->content.n;
    }
    for (; !rc && s->calls_sent < j->n_calls; s->calls_sent++) rc = call_run(s, s->calls_sent);
    s->lp_sent = j->n_lp; /* these dialects carry no logprobs */
    if (rc || j->state != JOB_DONE) return rc;
    rc = close_run(s);
    if (!rc) rc = finish_events(s);
    s->finished = true;
    return rc;
}
