/* api_respond.c — the bodies of generation responses (docs/API.md): the
 * OpenAI envelope, usage, timings, the `nebula` object, a finished chat or
 * completion, and tool calls as OpenAI shows them.  Called with a.mu held
 * (the job's fields are shared with the main thread). */
#include "coordinator/api.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


void api_add_timings(cJSON *o, const struct api_job *j)
{
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "prompt_tokens", (double)j->n_ids);
    cJSON_AddNumberToObject(t, "prompt_cached", (double)j->cached_ids);
    cJSON_AddNumberToObject(t, "prompt_prefilled", (double)(j->n_ids - j->cached_ids)); /* the prompt ids this request evaluated */
    cJSON_AddNumberToObject(t, "prompt_ms", j->prompt_ms);
    cJSON_AddNumberToObject(t, "ttft_ms", j->ttft_ms);
    cJSON_AddNumberToObject(t, "completion_tokens", (double)j->completion_tokens);
    cJSON_AddNumberToObject(t, "decode_ms", j->decode_ms);
    cJSON_AddNumberToObject(t, "tokens_per_s",
                            j->completion_tokens > 1 && j->decode_ms > 0 ? (double)(j->completion_tokens - 1) / (j->decode_ms / 1e3) : 0);
    cJSON_AddNumberToObject(t, "queue_ms", j->queue_ms);
    if (j->spec.passes) cJSON_AddItemToObject(t, "speculative", api_spec_json(&j->spec, true));
}

void api_add_usage(cJSON *o, const struct api_job *j)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_ids);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->completion_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", (double)j->cached_ids);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_ids + (size_t)j->completion_tokens));
}

void api_add_nebula(cJSON *o, const struct gen_info *g, const struct api_job *j)
{
    cJSON *n = cJSON_AddObjectToObject(o, "nebula");
    cJSON_AddNumberToObject(n, "accuracy_level", g->accuracy_level);
    cJSON_AddNumberToObject(n, "accuracy_level_effective", j->accuracy_effective); /* 3 without --spec or with a grammar */
    cJSON_AddBoolToObject(n, "think", g->think);
}

/* Tool call k of the job: {id, type, function:{name, arguments}} (whole), or
 * its streamed opening {index, id, type, function:{name, arguments:""}}. */
cJSON *api_call_json(const struct gen_info *g, const struct api_job *j, int k, bool whole)
{
    cJSON *c = cJSON_CreateObject(), *f;
    char id[48];
    snprintf(id, sizeof id, "call_%.24s%d", g->id + strcspn(g->id, "-") + 1, k);
    if (!whole) cJSON_AddNumberToObject(c, "index", k);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", j->calls[k].name);
    cJSON_AddStringToObject(f, "arguments", whole ? j->calls[k].arguments : "");
    return c;
}

cJSON *api_envelope(const struct api *a, const struct gen_info *g, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object", g->kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", floor(g->created));
    cJSON_AddStringToObject(o, "model", g->model[0] ? g->model : a->name);
    return o;
}

/* The finished job as one response (non-streaming); with a.mu held. */
cJSON *api_completion_json(const struct api *a, const struct gen_info *g, const struct api_job *j)
{
    cJSON *o = api_envelope(a, g, false), *cs = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    if (g->kind == API_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (j->n_calls && !j->content.n) cJSON_AddNullToObject(m, "content"); /* OpenAI's shape for calls only */
        else api_add_text(m, "content", j->content.p, j->content.n);
        if (g->think) api_add_text(m, "reasoning_content", j->reasoning.p, j->reasoning.n);
        if (j->n_calls) {
            cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
            for (int k = 0; k < j->n_calls; k++) cJSON_AddItemToArray(calls, api_call_json(g, j, k, true));
        }
        if (j->logprobs) cJSON_AddItemToObject(ch, "logprobs", api_logprobs_chat_json(a->tok, j->lp, 0, j->n_lp));
    } else {
        size_t offset = 0;
        api_add_text(ch, "text", j->content.p, j->content.n);
        if (j->logprobs) cJSON_AddItemToObject(ch, "logprobs", api_logprobs_completion_json(a->tok, j->lp, 0, j->n_lp, &offset));
        else cJSON_AddNullToObject(ch, "logprobs");
    }
    cJSON_AddStringToObject(ch, "finish_reason", j->finish_reason);
    api_add_usage(o, j);
    api_add_timings(o, j);
    api_add_nebula(o, g, j);
    if (j->tool_error[0]) cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(o, "nebula"), "tool_call_error", j->tool_error);
    return o;
}

