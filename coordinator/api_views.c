/* api_views.c — the bodies of the HTTP API's read-only endpoints: the model
 * object (/v1/models), /api/status and /metrics (docs/API.md).
 *
 * Everything they show comes from struct api, under its mutex: the model's
 * sizes fixed at start, the queue, the counters, and the snapshot of the
 * workers that the main thread publishes (api_publish) — never the
 * coordinator's own state, which only the main thread touches. */
#include "coordinator/api.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char random_notice[] =
    "This is the bundled demo model: a tiny model with random weights. Its answers are noise; it exists so that "
    "the chat, the API and the pipeline can be tried without downloading a real model.";

void api_demo_notice(struct api *a, const char *description)
{
    snprintf(a->notice, sizeof a->notice, "%s", description && description[0] ? description : random_notice);
}

/* OpenAI's model object, plus what a client needs to know about ours. */
cJSON *api_model_json(const struct api *a)
{
    cJSON *m = cJSON_CreateObject(), *n;
    cJSON_AddStringToObject(m, "id", a->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", floor(a->t_created));
    cJSON_AddStringToObject(m, "owned_by", "nebula");
    n = cJSON_AddObjectToObject(m, "nebula");
    cJSON_AddBoolToObject(n, "demo", a->cfg.demo);
    if (a->cfg.demo) cJSON_AddStringToObject(n, "notice", a->notice);
    cJSON_AddNumberToObject(n, "context_length", (double)a->ctx);
    return m;
}

cJSON *api_status_json(struct api *a)
{
    cJSON *r = cJSON_CreateObject(), *m, *ws, *q, *l, *st;
    pthread_mutex_lock(&a->mu);
    cJSON_AddStringToObject(r, "phase", a->phase);
    cJSON_AddNumberToObject(r, "progress", a->progress);
    cJSON_AddStringToObject(r, "message", a->message);
    m = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(m, "id", a->name);
    cJSON_AddStringToObject(m, "path", a->model_path);
    cJSON_AddBoolToObject(m, "demo", a->cfg.demo);
    if (a->cfg.demo) cJSON_AddStringToObject(m, "notice", a->notice);
    cJSON_AddNumberToObject(m, "context_length", (double)a->ctx);
    cJSON_AddNumberToObject(m, "vocab", (double)a->vocab);
    cJSON_AddNumberToObject(m, "layers", a->layers);
    cJSON_AddBoolToObject(m, "has_mtp", a->has_mtp);
    cJSON_AddBoolToObject(m, "has_tokenizer", a->tok != NULL);
    ws = cJSON_AddArrayToObject(r, "workers");
    for (int i = 0; i < a->n_workers; i++) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "role", a->workers[i].role);
        cJSON_AddStringToObject(w, "state", a->workers[i].state);
        cJSON_AddNumberToObject(w, "pid", a->workers[i].pid);
        cJSON_AddNumberToObject(w, "restarts", a->workers[i].restarts);
        cJSON_AddItemToArray(ws, w);
    }
    q = cJSON_AddObjectToObject(r, "queue");
    cJSON_AddNumberToObject(q, "running", a->running ? 1 : 0);
    cJSON_AddNumberToObject(q, "waiting", a->waiting);
    cJSON_AddNumberToObject(q, "capacity", a->cfg.max_queue);
    if (a->running && api_job_prefilling(a->running)) {
        cJSON *p = cJSON_AddObjectToObject(r, "prefill");
        cJSON_AddNumberToObject(p, "done", (double)a->running->prefill_done);
        cJSON_AddNumberToObject(p, "total", (double)a->running->n_ids);
        cJSON_AddNumberToObject(p, "chunk", a->running->prefill_chunk_tok);
    } else {
        cJSON_AddNullToObject(r, "prefill");
    }
    l = cJSON_AddObjectToObject(r, "limits");
    cJSON_AddNumberToObject(l, "max_body_bytes", (double)a->cfg.max_body);
    cJSON_AddNumberToObject(l, "context_length", (double)a->ctx);
    cJSON_AddNumberToObject(l, "max_prefill_chunk", a->chunk_max);
    cJSON *df = cJSON_AddObjectToObject(r, "defaults"); /* what a request that gives none gets */
    cJSON_AddNumberToObject(df, "accuracy_level", a->cfg.accuracy_level ? a->cfg.accuracy_level : 3);
    st = cJSON_AddObjectToObject(r, "stats");
    cJSON_AddNumberToObject(st, "requests", (double)(a->req_ok + a->req_cancelled + a->req_invalid + a->req_rejected + a->req_failed));
    cJSON_AddNumberToObject(st, "requests_ok", (double)a->req_ok);
    cJSON_AddNumberToObject(st, "requests_cancelled", (double)a->req_cancelled);
    cJSON_AddNumberToObject(st, "tokens_generated", (double)a->tokens_generated);
    cJSON_AddNumberToObject(st, "last_tokens_per_s", a->last_tps);
    cJSON_AddNumberToObject(st, "last_ttft_ms", a->last_ttft_ms);
    cJSON_AddNumberToObject(st, "vram_hit_rate", a->vram_hit_rate);
    cJSON_AddNumberToObject(st, "ram_hit_rate", a->ram_hit_rate);
    cJSON_AddNumberToObject(st, "ssd_bytes_per_token", a->ssd_bytes_per_token);
    cJSON_AddItemToObject(st, "speculative", api_spec_json(&a->spec, false));
    pthread_mutex_unlock(&a->mu);
    return r;
}

char *api_metrics_text(struct api *a)
{
    struct api_buf b = {0};
    char line[512];
#define M(...) (snprintf(line, sizeof line, __VA_ARGS__), api_buf_add(&b, line, strlen(line)))
    pthread_mutex_lock(&a->mu);
    M("# HELP nebula_up 1 when the model is loaded and every worker ready.\n# TYPE nebula_up gauge\nnebula_up %d\n",
      !strcmp(a->phase, "ready"));
    M("# HELP nebula_requests_total HTTP generation and API requests by outcome.\n# TYPE nebula_requests_total counter\n");
    M("nebula_requests_total{status=\"ok\"} %llu\n", (unsigned long long)a->req_ok);
    M("nebula_requests_total{status=\"cancelled\"} %llu\n", (unsigned long long)a->req_cancelled);
    M("nebula_requests_total{status=\"invalid\"} %llu\n", (unsigned long long)a->req_invalid);
    M("nebula_requests_total{status=\"rejected\"} %llu\n", (unsigned long long)a->req_rejected);
    M("nebula_requests_total{status=\"failed\"} %llu\n", (unsigned long long)a->req_failed);
    M("# HELP nebula_tokens_generated_total Tokens sampled for HTTP requests.\n# TYPE nebula_tokens_generated_total counter\n"
      "nebula_tokens_generated_total %llu\n", (unsigned long long)a->tokens_generated);
    M("# HELP nebula_prompt_tokens_total Prompt tokens of completed HTTP requests.\n# TYPE nebula_prompt_tokens_total counter\n"
      "nebula_prompt_tokens_total %llu\n", (unsigned long long)a->prompt_tokens);
    M("# HELP nebula_tokens_per_second Decode speed of the last completed request.\n# TYPE nebula_tokens_per_second gauge\n"
      "nebula_tokens_per_second %.6g\n", a->last_tps);
    M("# HELP nebula_time_to_first_token_seconds Time to first token of the last completed request (queue included).\n"
      "# TYPE nebula_time_to_first_token_seconds gauge\nnebula_time_to_first_token_seconds %.6g\n", a->last_ttft_ms / 1e3);
    M("# HELP nebula_queue_waiting Requests waiting.\n# TYPE nebula_queue_waiting gauge\nnebula_queue_waiting %d\n", a->waiting);
    M("# HELP nebula_queue_running Requests generating (0 or 1).\n# TYPE nebula_queue_running gauge\nnebula_queue_running %d\n",
      a->running ? 1 : 0);
    M("# HELP nebula_queue_capacity Requests that may wait.\n# TYPE nebula_queue_capacity gauge\nnebula_queue_capacity %d\n",
      a->cfg.max_queue);
    M("# HELP nebula_vram_hit_rate Routed experts found in the VRAM tier.\n# TYPE nebula_vram_hit_rate gauge\nnebula_vram_hit_rate %.6g\n",
      a->vram_hit_rate);
    M("# HELP nebula_ram_hit_rate Experts of the cpu-moe-worker found in the RAM tier.\n# TYPE nebula_ram_hit_rate gauge\n"
      "nebula_ram_hit_rate %.6g\n", a->ram_hit_rate);
    M("# HELP nebula_ssd_bytes_per_token Bytes read from SSD per token evaluated.\n# TYPE nebula_ssd_bytes_per_token gauge\n"
      "nebula_ssd_bytes_per_token %.6g\n", a->ssd_bytes_per_token);
    const struct spec_stats *sp = &a->spec;
    M("# HELP nebula_spec_passes_total Verify windows (speculative decoding) of completed HTTP requests, by drafter.\n"
      "# TYPE nebula_spec_passes_total counter\nnebula_spec_passes_total{drafter=\"mtp\"} %lld\n"
      "nebula_spec_passes_total{drafter=\"lookup\"} %lld\n", sp->by_src[SPEC_SRC_MTP], sp->by_src[SPEC_SRC_LOOKUP]);
    M("# HELP nebula_spec_tokens_total Tokens the verify windows gave.\n# TYPE nebula_spec_tokens_total counter\n"
      "nebula_spec_tokens_total %lld\n", sp->tokens);
    M("# HELP nebula_spec_tokens_per_pass Tokens a verify window gave, on average.\n# TYPE nebula_spec_tokens_per_pass gauge\n"
      "nebula_spec_tokens_per_pass %.6g\n", sp->passes ? (double)sp->tokens / (double)sp->passes : 0.0);
    M("# HELP nebula_spec_drafts_total Drafts proposed and accepted (accepted_nongreedy: by accuracy level 1-2's rule).\n"
      "# TYPE nebula_spec_drafts_total counter\nnebula_spec_drafts_total{outcome=\"proposed\"} %lld\n"
      "nebula_spec_drafts_total{outcome=\"accepted\"} %lld\nnebula_spec_drafts_total{outcome=\"accepted_nongreedy\"} %lld\n",
      sp->drafted, sp->accepted, sp->nongreedy);
    M("# HELP nebula_spec_acceptance_by_position Accepted / proposed drafts at each position of a window (1: the first).\n"
      "# TYPE nebula_spec_acceptance_by_position gauge\n");
    for (int i = 0; i < SPEC_MAX_POS && sp->drafted_at[i]; i++)
        M("nebula_spec_acceptance_by_position{position=\"%d\"} %.6g\n", i + 1, (double)sp->accepted_at[i] / (double)sp->drafted_at[i]);
    const struct coord_cache_numbers *k = &a->cache;
    M("# HELP nebula_prompt_cache_hits_total Requests resumed from a prompt-cache checkpoint.\n# TYPE nebula_prompt_cache_hits_total counter\n"
      "nebula_prompt_cache_hits_total %llu\n", (unsigned long long)k->hits);
    M("# HELP nebula_prompt_cache_misses_total Requests prefilled from their first token (cache on).\n"
      "# TYPE nebula_prompt_cache_misses_total counter\nnebula_prompt_cache_misses_total %llu\n", (unsigned long long)k->misses);
    M("# HELP nebula_prompt_cache_tokens_reused_total Prompt tokens not evaluated again.\n"
      "# TYPE nebula_prompt_cache_tokens_reused_total counter\nnebula_prompt_cache_tokens_reused_total %llu\n", (unsigned long long)k->tokens_reused);
    M("# HELP nebula_prompt_cache_bytes Checkpoint bytes kept, by where.\n# TYPE nebula_prompt_cache_bytes gauge\n"
      "nebula_prompt_cache_bytes{where=\"ram\"} %llu\nnebula_prompt_cache_bytes{where=\"disk\"} %llu\n", (unsigned long long)k->ram_bytes,
      (unsigned long long)k->disk_bytes);
    M("# HELP nebula_prompt_cache_entries Checkpoints kept, by where.\n# TYPE nebula_prompt_cache_entries gauge\n"
      "nebula_prompt_cache_entries{where=\"ram\"} %llu\nnebula_prompt_cache_entries{where=\"disk\"} %llu\n", (unsigned long long)k->ram_entries,
      (unsigned long long)k->disk_entries);
    M("# HELP nebula_worker_up 1 when the worker is ready.\n# TYPE nebula_worker_up gauge\n");
    for (int i = 0; i < a->n_workers; i++) M("nebula_worker_up{role=\"%s\"} %d\n", a->workers[i].role, !strcmp(a->workers[i].state, "ready"));
    M("# HELP nebula_worker_restarts_total Restarts of each worker.\n# TYPE nebula_worker_restarts_total counter\n");
    for (int i = 0; i < a->n_workers; i++) M("nebula_worker_restarts_total{role=\"%s\"} %d\n", a->workers[i].role, a->workers[i].restarts);
#undef M
    pthread_mutex_unlock(&a->mu);
    return b.p;
}
