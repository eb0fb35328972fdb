/* api_run.c — the HTTP API's jobs on the coordinator's main thread.
 *
 * The main thread is the only one that talks to the workers.  The HTTP
 * threads queue a job and write an eventfd; its event (api_on_wake) moves
 * the jobs into the coordinator's one request queue (requests.c), beside
 * ctl.sock's generates, with this file's callbacks: on_start when the job's
 * turn comes, on_prefill after each prefill step (the progress that
 * /api/status and the streams show), on_token for each sampled token,
 * on_done at the end.  For each token it decodes the text (the
 * tokenizer's streaming decoder: whole UTF-8 characters only), passes it
 * through the reasoning/stop filter (api_text.c) and appends what is final
 * to the job, waking the HTTP thread that streams it.  Cancellation (the
 * client went away, or shutdown) is checked at the start, after every
 * prefill step and every token.  api_publish copies what /api/status and
 * /metrics show about the workers into the shared snapshot, so the HTTP
 * threads never read the coordinator's own state. */
#include "coordinator/api.h"
#include "coordinator/coord.h"

#include "core/gen/gen.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void api_set_phase(struct api *a, const char *phase, double progress, const char *message)
{
    if (!a || !a->daemon) return;
    pthread_mutex_lock(&a->mu);
    snprintf(a->phase, sizeof a->phase, "%s", phase);
    a->progress = progress;
    snprintf(a->message, sizeof a->message, "%s", message);
    pthread_mutex_unlock(&a->mu);
}

void api_publish(struct coord *c)
{
    struct api *a = c->api;
    if (!a || !a->daemon) return;
    double vram = 0, ram = 0, ssd = 0;
    if (c->stats) {
        uint64_t h = shm_stats_get(c->stats, 0, SHM_STAT_EXPERT_HITS), m = shm_stats_get(c->stats, 0, SHM_STAT_EXPERT_MISSES);
        uint64_t rh = shm_stats_get(c->stats, 1, SHM_STAT_EXPERT_HITS), rm = shm_stats_get(c->stats, 1, SHM_STAT_EXPERT_MISSES);
        uint64_t tok = shm_stats_get(c->stats, 0, SHM_STAT_TOKENS), rd = shm_stats_get(c->stats, 2, SHM_STAT_BYTES_READ);
        vram = h + m ? (double)h / (double)(h + m) : 0;
        ram = rh + rm ? (double)rh / (double)(rh + rm) : 0;
        ssd = tok ? (double)rd / (double)tok : 0;
    }
    pthread_mutex_lock(&a->mu);
    a->n_workers = c->n_workers < API_MAX_WORKERS ? c->n_workers : API_MAX_WORKERS;
    double done = 0;
    for (int i = 0; i < a->n_workers; i++) {
        const struct coord_worker *w = &c->w[i];
        struct api_worker_view *v = &a->workers[i];
        snprintf(v->role, sizeof v->role, "%s", w->role);
        snprintf(v->state, sizeof v->state, "%s", coord_wstate_name(w->state));
        v->pid = (int)w->pid, v->restarts = w->restarts;
        done += w->state == W_READY ? 1.0 : w->state == W_CONFIGURING ? 0.5 : w->state == W_STARTING ? 0.1 : 0;
    }
    /* Loading: the model is open (0.1); the rest is the workers' start-up
     * (a gpu-worker loading a large model sits in "configuring"). */
    if (!strcmp(a->phase, "loading") && a->n_workers) a->progress = 0.1 + 0.9 * done / a->n_workers;
    a->vram_hit_rate = vram, a->ram_hit_rate = ram, a->ssd_bytes_per_token = ssd;
    a->cache = coord_cache_numbers(c);
    pthread_mutex_unlock(&a->mu);
}

/* One HTTP job in the request queue. */
struct run_ctx {
    struct coord *c;
    struct api *a;
    struct api_job *j;
    tok_decoder *dec;
    struct api_text text;
    struct api_toolscan scan; /* the content channel's tool calls (job->tools) */
    long long seen;     /* tokens handled (a retried run replays the same ones) */
    double t_start, t_first, t_last;
    bool started;
    bool text_stop;     /* a stop string matched */
    bool script_end;    /* nebula_test_script's last token was emitted */
    /* think_budget: after that many reasoning tokens the think block is closed by the server
     * ("\n</think>\n\n") and the answer continues in a second request (a leg) from there. */
    long long think_tokens;  /* reasoning tokens so far */
    bool budget_hit;         /* this leg ended at the budget */
    bool chained;            /* this is the leg after the close */
    long long base;          /* the model's tokens of earlier legs: a leg's token i is the job's base + i */
    long long forced;        /* tokens the server wrote (the close): counted in completion_tokens */
    double prompt_s;         /* the first leg's prefill */
    int32_t *leg_ids;        /* the second leg's prompt (owned) */
    bool cancelled;
    int fail;           /* out of memory while appending */
};

/* With a->mu held. */
static int emit_text(void *ctx, bool reasoning, const char *s, size_t n)
{
    struct run_ctx *r = ctx;
    return api_buf_add(reasoning ? &r->j->reasoning : &r->j->content, s, n);
}

/* A parsed tool call joins the job (with a->mu held). */
static int add_call(void *ctx, struct api_call *c)
{
    struct api_job *j = ((struct run_ctx *)ctx)->j;
    if (j->n_calls == j->cap_calls) {
        int cap = j->cap_calls ? 2 * j->cap_calls : 4;
        struct api_call *p = realloc(j->calls, (size_t)cap * sizeof *p);
        if (!p) return NB_ENOMEM;
        j->calls = p, j->cap_calls = cap;
    }
    j->calls[j->n_calls++] = *c;
    return 0;
}

/* The filter's output: reasoning as it is, content through the tool-call scanner when the job has tools. */
static int emit(void *ctx, bool reasoning, const char *s, size_t n)
{
    struct run_ctx *r = ctx;
    if (reasoning || !r->j->tools) return emit_text(ctx, reasoning, s, n);
    return api_toolscan_push(&r->scan, s, n, emit_text, add_call, r);
}

static bool cancelled_locked(struct run_ctx *r) { return r->j->cancelled || r->a->stopping || r->c->stop; }

/* The job reaches the front of the queue. */
static int on_start(void *ctx)
{
    struct run_ctx *r = ctx;
    struct api *a = r->a;
    if (r->chained) return 0; /* the second leg: the job is running already */
    pthread_mutex_lock(&a->mu);
    a->waiting--;
    a->running = r->j;
    r->j->state = JOB_RUNNING;
    r->j->prefill_chunk_tok = coord_request_chunk(r->c, r->j->chunk);
    r->j->queue_ms = (coord_now() - r->j->t_arrival) * 1e3;
    r->started = true, r->t_start = coord_now();
    r->cancelled = r->j->cancelled;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return r->cancelled;
}

static int on_prefill(void *ctx, size_t done, size_t total)
{
    struct run_ctx *r = ctx;
    (void)total; /* the job's n_ids */
    if (r->chained) return 0; /* the second leg's prefill is not the prompt's progress */
    pthread_mutex_lock(&r->a->mu);
    r->j->prefill_done = done;
    r->cancelled = cancelled_locked(r);
    pthread_cond_broadcast(&r->a->cv); /* a stream reports the progress */
    pthread_mutex_unlock(&r->a->mu);
    return r->cancelled;
}

/* The prompt cache's lookup is settled: the Anthropic stream's message_start can say what it reused. */
static void on_cached(void *ctx, size_t n_cached)
{
    struct run_ctx *r = ctx;
    if (r->chained) return; /* the job's cached part is its first leg's */
    pthread_mutex_lock(&r->a->mu);
    r->j->cached_ids = n_cached, r->j->cache_known = true;
    pthread_cond_broadcast(&r->a->cv);
    pthread_mutex_unlock(&r->a->mu);
}

static int on_token(void *ctx, long long i, int32_t id)
{
    struct run_ctx *r = ctx;
    i += r->base; /* the job's index */
    if (i < r->seen) return 0;
    r->seen = i + 1;
    if (r->j->script) { /* --test-hooks: the scripted text instead of the model's */
        id = i < (long long)r->j->n_script ? r->j->script[i] : 0;
        r->script_end = i + 1 >= (long long)r->j->n_script;
    }
    r->t_last = coord_now();
    if (i == 0) r->t_first = r->t_last;
    const char *t = "";
    size_t tl = 0;
    char err[128];
    if (tok_decoder_push(r->dec, id, &t, &tl, err, sizeof err)) tl = 0; /* an id outside the vocabulary: no text */
    pthread_mutex_lock(&r->a->mu);
    r->j->completion_tokens = r->seen + r->forced;
    bool thinking = r->text.reasoning;
    int rc = tl ? api_text_push(&r->text, t, tl, emit, r) : 0;
    if (thinking && r->j->think_budget && !r->chained && ++r->think_tokens >= r->j->think_budget && r->text.reasoning && !rc)
        r->budget_hit = true;
    if (rc == 1) r->text_stop = true;
    else if (rc) r->fail = rc;
    r->cancelled = cancelled_locked(r);
    pthread_cond_broadcast(&r->a->cv);
    pthread_mutex_unlock(&r->a->mu);
    return r->text_stop || r->script_end || r->budget_hit || r->cancelled || r->fail;
}

static void finish(struct coord *c, struct api_job *j, const char *finish_reason, const struct api_error *e, bool cancelled)
{
    struct api *a = c->api;
    pthread_mutex_lock(&a->mu);
    if (j->state == JOB_QUEUED) a->waiting--; /* ended before it ran (shutdown) */
    j->finish_reason = finish_reason;
    if (e) j->err = *e;
    j->state = JOB_DONE;
    if (a->running == j) a->running = NULL;
    if (cancelled) a->req_cancelled++;
    else if (e) a->req_failed++;
    else a->req_ok++;
    a->tokens_generated += (uint64_t)j->completion_tokens;
    a->cache = coord_cache_numbers(c);
    if (!e && !cancelled) {
        a->prompt_tokens += j->n_ids;
        spec_stats_merge(&a->spec, &j->spec);
        if (j->completion_tokens > 0) a->last_ttft_ms = j->ttft_ms;
        if (j->completion_tokens > 1 && j->decode_ms > 0) a->last_tps = (double)(j->completion_tokens - 1) / (j->decode_ms / 1e3);
    }
    pthread_cond_broadcast(&a->cv);
    api_job_release(a, j);
    pthread_mutex_unlock(&a->mu);
}

static void free_ctx(struct run_ctx *r)
{
    tok_decoder_free(r->dec);
    free(r->leg_ids);
    api_text_free(&r->text);
    api_toolscan_free(&r->scan);
    free(r);
}

static const struct coord_request_ops job_ops;

/* The reasoning reached think_budget: the server closes the think block (the
 * text goes through the filter as if the model wrote it) and the answer
 * continues in a second request whose prompt is the first one's, what was
 * generated, and the close.  0: the leg is queued (its on_done ends the
 * job); else the job ends here with what it has. */
static int next_leg(struct run_ctx *r, const struct gen_result *res)
{
    static const char close_think[] = "\n</think>\n\n";
    struct api_job *j = r->j;
    int32_t *close = NULL;
    size_t n_close = 0;
    char err[256];
    if (!res) return -1;
    long long made = res->made, left = j->max_tokens - made;
    if (tok_encode_alloc(r->c->tok, close_think, sizeof close_think - 1, true, &close, &n_close, err, sizeof err)) return NB_ENOMEM;
    left -= (long long)n_close;
    size_t n = j->n_ids + (size_t)made + n_close;
    if (left < 1 || !(r->leg_ids = malloc(n * sizeof *r->leg_ids))) return free(close), -1; /* no room for an answer: it ends as length */
    memcpy(r->leg_ids, j->ids, j->n_ids * sizeof *j->ids);
    memcpy(r->leg_ids + j->n_ids, res->ids, (size_t)made * sizeof *res->ids);
    memcpy(r->leg_ids + j->n_ids + made, close, n_close * sizeof *close);
    free(close);
    pthread_mutex_lock(&r->a->mu);
    int trc = api_text_push(&r->text, close_think, sizeof close_think - 1, emit, r);
    r->forced = (long long)n_close;
    j->completion_tokens = made + r->forced;
    pthread_mutex_unlock(&r->a->mu);
    if (trc) return trc;
    nb_log("http job: thinking reached its budget of %lld tokens: closed, the answer continues (%zu tokens of prompt)", j->think_budget, n);
    r->base = made, r->budget_hit = false, r->chained = true;
    /* The think block is closed in the leg's prompt: a grammar applies from its first token. */
    struct coord_request_spec spec = {.ids = r->leg_ids, .n = n, .sp = j->sp, .budget = left, .chunk = j->chunk, .no_cache = j->no_cache,
                                      .no_end_ckpt = j->chat && !j->tools, /* no third leg */
                                      .ignore_stop = j->ignore_eos, .want_logits = j->logprobs, .grammar = j->grammar,
                                      .grammar_key = j->grammar_key, .constrain_after = -1, .accuracy_level = j->accuracy_level};
    return coord_request_submit(r->c, &spec, &job_ops, r, err, sizeof err);
}

static void on_done(void *ctx, const struct coord_outcome *o)
{
    struct run_ctx *r = ctx;
    struct coord *c = r->c;
    struct api *a = r->a;
    struct api_job *j = r->j;
    struct api_error e = {0};
    if (!r->started) {
        finish(c, j, NULL, NULL, true);
        return free_ctx(r);
    }
    r->cancelled = r->cancelled || o->cancelled;
    const struct gen_result *res = o->res;
    long long made = res ? res->made : 0;
    int rc = o->rc && !o->cancelled;
    if (!r->chained) {
        r->prompt_s = res ? res->prompt_s : 0;
        pthread_mutex_lock(&a->mu);
        j->cached_ids = o->n_cached, j->cache_known = true;
        pthread_mutex_unlock(&a->mu);
    }
    if (res) { /* this leg's verify windows join the job's (the loosest level that ran is the one reported) */
        pthread_mutex_lock(&a->mu);
        spec_stats_merge(&j->spec, res->spec);
        if (!r->chained || res->accuracy_level < j->accuracy_effective) j->accuracy_effective = res->accuracy_level;
        pthread_mutex_unlock(&a->mu);
    }
    if (!rc && !r->cancelled && !r->fail && r->budget_hit && next_leg(r, res) == 0) return;
    made += r->base + r->forced;
    if (rc) {
        nb_log("http job failed: %s", o->err);
        api_errorf(&e, 503, "server_error", NULL, "worker_failure", "the generation failed: %s", o->err);
    } else if (!r->cancelled && !r->fail) {
        /* The end of the text: what the decoder and the filter held back. */
        const char *t;
        size_t tl;
        tok_decoder_flush(r->dec, &t, &tl);
        pthread_mutex_lock(&a->mu);
        int trc = r->text_stop ? 1 : tl ? api_text_push(&r->text, t, tl, emit, r) : 0;
        if (trc == 1) r->text_stop = true;
        else if (!trc) trc = api_text_finish(&r->text, emit, r);
        if (trc >= 0 && j->tools) trc = api_toolscan_finish(&r->scan, emit_text, r);
        if (trc < 0) r->fail = trc;
        snprintf(j->tool_error, sizeof j->tool_error, "%s", r->scan.error);
        j->stop_hit = r->text.stop_hit;
        j->completion_tokens = made; /* the stop token counts: it was generated */
        pthread_mutex_unlock(&a->mu);
    }
    if (r->fail) api_errorf(&e, 500, "server_error", NULL, NULL, "out of memory");
    double now = coord_now();
    j->prompt_ms = r->prompt_s * 1e3;
    j->ttft_ms = r->t_first > 0 ? (r->t_first - j->t_arrival) * 1e3 : 0;
    j->decode_ms = r->t_first > 0 ? (r->t_last - r->t_first) * 1e3 : 0;
    bool stopped = r->text_stop || r->script_end || (res && (!strcmp(res->why, "stop token") || !strcmp(res->why, "grammar")));
    if (!rc && !r->cancelled && !r->fail)
        nb_log("http job: prompt %zu tokens, %lld generated in %.2f s (queued %.0f ms), finish %s", j->n_ids, made,
               now - r->t_start, j->queue_ms, stopped ? "stop" : "length");
    if (r->cancelled) nb_log("http job cancelled after %lld tokens (the client went away or shutdown)", r->seen);
    const char *why = stopped ? "stop" : "length";
    if (j->n_calls && !j->tool_error[0]) why = "tool_calls";
    finish(c, j, rc || r->cancelled || r->fail ? NULL : why, rc || r->fail ? &e : NULL, r->cancelled);
    free_ctx(r);
}

/* The row a token was sampled from (logprobs requests): its log-probabilities join the job. */
static void on_logits(void *ctx, long long i, int32_t id, const float *row)
{
    struct run_ctx *r = ctx;
    struct api_job *j = r->j;
    i += r->base;
    if (i < (long long)j->n_lp) return; /* a retried run replays the same tokens */
    if (j->script) id = i < (long long)j->n_script ? j->script[i] : 0; /* the scripted token's probability */
    struct api_logprob lp;
    api_logprob_row(row, (int32_t)r->a->vocab, id, j->top_logprobs, &lp);
    pthread_mutex_lock(&r->a->mu);
    if (j->n_lp == j->cap_lp) {
        size_t cap = j->cap_lp ? 2 * j->cap_lp : 64;
        struct api_logprob *p = realloc(j->lp, cap * sizeof *p);
        if (p) j->lp = p, j->cap_lp = cap;
        else r->fail = NB_ENOMEM;
    }
    if (j->n_lp < j->cap_lp) j->lp[j->n_lp++] = lp;
    pthread_mutex_unlock(&r->a->mu);
}

static const struct coord_request_ops job_ops = {.on_start = on_start, .on_prefill = on_prefill, .on_token = on_token, .on_done = on_done,
                                                 .on_cached = on_cached, .on_logits = on_logits};

/* A job leaves the HTTP side's list for the request queue (it stays
 * JOB_QUEUED, and counted as waiting, until it starts). */
static void submit(struct coord *c, struct api_job *j)
{
    struct api_error e = {0};
    char err[1024];
    struct run_ctx *r = calloc(1, sizeof *r);
    if (r) *r = (struct run_ctx){.c = c, .a = c->api, .j = j};
    if (!r || tok_decoder_new(c->tok, false, &r->dec, err, sizeof err)) {
        free(r);
        api_errorf(&e, 500, "server_error", NULL, NULL, "out of memory");
        return finish(c, j, NULL, &e, false);
    }
    api_text_init(&r->text, j->think_split, j->stop, j->n_stop);
    api_toolscan_init(&r->scan, j->tools, j->n_tools, j->parallel_calls);
    /* A forced call's opening is in the prompt: the scanner starts inside it. */
    if (j->tools && j->forced && api_toolscan_push(&r->scan, j->forced, strlen(j->forced), emit_text, add_call, r)) {
        free_ctx(r);
        api_errorf(&e, 500, "server_error", NULL, NULL, "out of memory");
        return finish(c, j, NULL, &e, false);
    }
    /* With thinking on, the grammar applies to the answer: after </think> (docs/API.md, "Structured output"). */
    struct coord_request_spec spec = {.ids = j->ids, .n = j->n_ids, .sp = j->sp, .budget = j->max_tokens, .chunk = j->chunk, .no_cache = j->no_cache,
                                      .no_end_ckpt = j->chat && !j->tools && !j->think_budget, /* a second leg would extend it */
                                      .ignore_stop = j->ignore_eos, .want_logits = j->logprobs, .grammar = j->grammar,
                                      .grammar_key = j->grammar_key,
                                      .constrain_after = j->grammar && j->think_split ? tok_id_of(c->tok, "</think>") : -1,
                                      .accuracy_level = j->accuracy_level};
    if (coord_request_submit(c, &spec, &job_ops, r, err, sizeof err)) {
        api_errorf(&e, 500, "server_error", NULL, NULL, "%s", err);
        finish(c, j, NULL, &e, false);
        free_ctx(r);
    }
}

void api_on_wake(struct coord *c)
{
    struct api *a = c->api;
    uint64_t v;
    while (read(a->wake, &v, sizeof v) > 0) continue;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        struct api_job *j = a->head;
        if (j) a->head = j->next, j->next = NULL;
        if (!a->head) a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        if (!j) return;
        submit(c, j);
    }
}
