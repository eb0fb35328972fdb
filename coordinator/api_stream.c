/* api_stream.c — the events of a streamed generation (docs/API.md, "Streaming"),
 * built from what the job produced since the last call, with a.mu held:
 * OpenAI chunks (chat and completions: text deltas, logprobs, tool-call
 * deltas, the last chunk with finish_reason, usage), `: prefill` comments, an
 * error event (the other dialects' events: api_dialect_out.c). */
#include "coordinator/api.h"

#include "core/util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_sse_event(struct api_buf *out, const char *name, cJSON *o)
{
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return NB_ENOMEM;
    int rc = 0;
    if (name) {
        rc = api_buf_add(out, "event: ", 7);
        if (!rc) rc = api_buf_add(out, name, strlen(name));
        if (!rc) rc = api_buf_add(out, "\n", 1);
    }
    if (!rc) rc = api_buf_add(out, "data: ", 6);
    if (!rc) rc = api_buf_add(out, t, strlen(t));
    if (!rc) rc = api_buf_add(out, "\n\n", 2);
    free(t);
    return rc;
}

static int add_event(struct api_stream *s, cJSON *o) { return api_sse_event(&s->out, NULL, o); }

/* A chunk with one choice: delta (chat) or text (completions). */
static int add_chunk(struct api_stream *s, const char *field, const char *text, size_t n, const char *finish)
{
    cJSON *o = api_envelope(s->a, &s->g, true), *cs = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    int rc = 0;
    if (s->g.kind == API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (!s->started) cJSON_AddStringToObject(d, "role", "assistant");
        if (field) rc = api_add_text(d, field, text, n);
    } else {
        rc = api_add_text(ch, "text", field ? text : "", field ? n : 0);
        cJSON_AddNullToObject(ch, "logprobs");
    }
    if (rc) return cJSON_Delete(o), rc;
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    return add_event(s, o);
}

/* The logprobs entries since the last chunk, in a chunk of their own (an empty delta / text). */
static int add_logprobs_chunk(struct api_stream *s)
{
    cJSON *o = api_envelope(s->a, &s->g, true), *cs = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (s->g.kind == API_CHAT) {
        cJSON_AddObjectToObject(ch, "delta");
        cJSON_AddItemToObject(ch, "logprobs", api_logprobs_chat_json(s->a->tok, s->j->lp, s->lp_sent, s->j->n_lp));
    } else {
        cJSON_AddStringToObject(ch, "text", "");
        cJSON_AddItemToObject(ch, "logprobs", api_logprobs_completion_json(s->a->tok, s->j->lp, s->lp_sent, s->j->n_lp, &s->lp_offset));
    }
    cJSON_AddNullToObject(ch, "finish_reason");
    s->lp_sent = s->j->n_lp;
    return add_event(s, o);
}

/* Tool call k as OpenAI streams one: a delta that opens it (id, name, empty
 * arguments), then one with its arguments. */
static int add_call_deltas(struct api_stream *s, int k)
{
    for (int part = 0; part < 2; part++) {
        cJSON *o = api_envelope(s->a, &s->g, true), *cs = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(cs, ch);
        cJSON_AddNumberToObject(ch, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(ch, "delta"), *tc = cJSON_AddArrayToObject(d, "tool_calls"), *c;
        if (!part) {
            c = api_call_json(&s->g, s->j, k, false);
        } else {
            c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", k);
            cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "arguments", s->j->calls[k].arguments);
        }
        cJSON_AddItemToArray(tc, c);
        cJSON_AddNullToObject(ch, "finish_reason");
        int rc = add_event(s, o);
        if (rc) return rc;
    }
    return 0;
}

/* `: prefill DONE/TOTAL`, a comment: SSE clients (the openai package's among
 * them) skip comment lines, where a data event of a shape they do not know
 * would break them. */
int api_stream_prefill_comment(struct api_stream *s)
{
    char line[64];
    int n = snprintf(line, sizeof line, ": prefill %zu/%zu\n\n", s->j->prefill_done, s->j->n_ids);
    s->prefill_sent = s->j->prefill_done;
    return api_buf_add(&s->out, line, (size_t)n);
}

/* What the job produced since the last call, as events; with a.mu held. */
int api_stream_news(struct api_stream *s)
{
    struct api_job *j = s->j;
    int rc = 0;
    if (j->prefill_done != s->prefill_sent) rc = api_stream_prefill_comment(s);
    if (!rc && j->reasoning.n > s->r_off) {
        rc = add_chunk(s, "reasoning_content", j->reasoning.p + s->r_off, j->reasoning.n - s->r_off, NULL);
        s->r_off = j->reasoning.n;
    }
    if (!rc && j->content.n > s->c_off) {
        rc = add_chunk(s, s->g.kind == API_CHAT ? "content" : "text", j->content.p + s->c_off, j->content.n - s->c_off, NULL);
        s->c_off = j->content.n;
    }
    if (!rc && j->n_lp > s->lp_sent) rc = add_logprobs_chunk(s);
    for (; !rc && s->calls_sent < j->n_calls; s->calls_sent++) rc = add_call_deltas(s, s->calls_sent);
    if (rc || j->state != JOB_DONE) return rc;
    if (j->err.status || !j->finish_reason) {
        struct api_error e = j->err;
        if (!e.status) api_errorf(&e, 503, "server_error", NULL, "cancelled", "the generation was cancelled (the server is stopping)");
        rc = add_event(s, api_error_json(&e));
    } else {
        cJSON *o = api_envelope(s->a, &s->g, true), *cs = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(cs, ch);
        cJSON_AddNumberToObject(ch, "index", 0);
        if (s->g.kind == API_CHAT) cJSON_AddObjectToObject(ch, "delta");
        else cJSON_AddStringToObject(ch, "text", ""), cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", j->finish_reason);
        api_add_timings(o, j);
        api_add_nebula(o, &s->g, j);
        if (j->tool_error[0]) cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(o, "nebula"), "tool_call_error", j->tool_error);
        rc = add_event(s, o);
        if (!rc && s->g.include_usage) {
            o = api_envelope(s->a, &s->g, true);
            cJSON_AddArrayToObject(o, "choices");
            api_add_usage(o, j);
            rc = add_event(s, o);
        }
    }
    if (!rc) rc = api_buf_add(&s->out, "data: [DONE]\n\n", 14);
    s->finished = true;
    return rc;
}


bool api_stream_has_news(const struct api_stream *s)
{
    const struct api_job *j = s->j;
    return j->reasoning.n > s->r_off || j->content.n > s->c_off || j->n_calls > s->calls_sent || j->n_lp > s->lp_sent ||
           j->prefill_done != s->prefill_sent || j->state == JOB_DONE;
}

int api_stream_start(struct api_stream *s)
{
    int rc = add_chunk(s, s->g.kind == API_CHAT ? "content" : NULL, "", 0, NULL); /* carries the role: before started */
    s->started = true;
    return rc;
}
