/* api_http.c — the HTTP server of nebula-coordinator (libmicrohttpd), docs/API.md.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION, at most 128
 * connections, idle ones closed after 300 s): a request may block its own
 * thread while its job is queued or running, and nothing else waits for it
 * (a handler blocked longer than the idle timeout still answers: MHD checks
 * the timeout only while the connection waits for the client).  Each request is parsed (api_request.c), rendered and
 * tokenized here (the tokenizer is immutable and thread-safe), checked
 * against the context, and only then queued, so every 4xx is answered at
 * once and the main thread only ever sees valid jobs.  The queue is bounded:
 * --max-queue jobs wait, one runs, more get 429.
 *
 * Bodies: a Content-Length over --max-body is answered 413 before any of it
 * is read; a chunked body is counted as it arrives and dropped (not stored)
 * once it is over the limit, then answered 413.
 *
 * A job's text comes back through the job itself (api.h): the main thread
 * appends, this side copies what is new under the mutex.  A client that goes
 * away is noticed while waiting (poll for POLLRDHUP on its socket every
 * 200 ms) or when a write fails; either way the job is marked cancelled and
 * the main thread stops it between two tokens or prefill steps.  Streams send
 * comments, which every SSE client skips: `: prefill DONE/TOTAL` after each
 * prefill step (steps that end faster than the client reads are reported
 * together) and, when nothing was written for --sse-keepalive seconds, the
 * same again during a long step or `: keep-alive` while queued. */
#include "coordinator/api.h"
#include "coordinator/coord.h"

#include "core/chat/chat.h"
#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/err.h"
#include "core/util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#define API_POLL_MS 200

enum route { R_NONE, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS, R_STATUS, R_TOKENIZE, R_TEMPLATE, R_METRICS, R_MESSAGES, R_RESPONSES };

static const struct {
    const char *path;
    const char *method;
    enum route id;
} routes[] = {
    {"/v1/models", "GET", R_MODELS},          {"/v1/chat/completions", "POST", R_CHAT},
    {"/v1/completions", "POST", R_COMPLETIONS}, {"/api/status", "GET", R_STATUS},
    {"/api/tokenize", "POST", R_TOKENIZE},    {"/metrics", "GET", R_METRICS},
    {"/apply-template", "POST", R_TEMPLATE},  {"/v1/messages", "POST", R_MESSAGES},
    {"/v1/responses", "POST", R_RESPONSES},
};

/* Per request (MHD's con_cls). */
struct req_ctx {
    enum route route;
    bool too_large;
    size_t received;
    struct api_buf body;
    struct api_job *job; /* one reference */
};

static double now_s(void) { return coord_now(); }

static void random_hex(char *out, size_t n_hex)
{
    unsigned char b[32];
    size_t nb = (n_hex + 1) / 2 > sizeof b ? sizeof b : (n_hex + 1) / 2;
    if (getrandom(b, nb, 0) != (ssize_t)nb)
        for (size_t i = 0; i < nb; i++) b[i] = (unsigned char)(rand() & 0xff);
    for (size_t i = 0; i < n_hex && i / 2 < nb; i++) out[i] = "0123456789abcdef"[(b[i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out[n_hex] = 0;
}

static uint64_t random_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) s = (uint64_t)time(NULL) ^ (uint64_t)now_s() * 1000003u;
    return s;
}

void api_job_release(struct api *a, struct api_job *j)
{
    (void)a;
    if (--j->refs > 0) return;
    free(j->ids);
    free(j->script);
    api_tools_free(j->tools, j->n_tools);
    free(j->forced);
    for (int k = 0; k < j->n_calls; k++) api_call_free(&j->calls[k]);
    free(j->calls);
    free(j->lp);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    api_buf_free(&j->reasoning);
    api_buf_free(&j->content);
    gram_free(j->grammar), free(j->grammar_key);
    free(j);
}

/* ---------- responses ---------- */

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status, const char *type, char *text)
{
    if (!text) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) return free(text), MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == 429) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1"); /* the queue moves at the next job's end */
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, cJSON *o)
{
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return send_text(conn, status, "application/json", text);
}

static void count_error(struct api *a, int status)
{
    pthread_mutex_lock(&a->mu);
    if (status == 429 || status == 503) a->req_rejected++;
    else if (status >= 500) a->req_failed++;
    else a->req_invalid++;
    pthread_mutex_unlock(&a->mu);
}

static enum MHD_Result send_error_as(struct api *a, struct MHD_Connection *conn, const struct api_error *e, enum api_dialect d)
{
    count_error(a, e->status);
    return send_json(conn, (unsigned)e->status, api_error_json_dialect(e, d));
}

static enum MHD_Result send_error(struct api *a, struct MHD_Connection *conn, const struct api_error *e)
{
    return send_error_as(a, conn, e, API_OPENAI);
}

static enum MHD_Result fail_as(struct api *a, struct MHD_Connection *conn, enum api_dialect d, int status, const char *type, const char *param,
                               const char *code, const char *message)
{
    struct api_error e;
    api_errorf(&e, status, type, param, code, "%s", message);
    return send_error_as(a, conn, &e, d);
}

static enum MHD_Result fail(struct api *a, struct MHD_Connection *conn, int status, const char *type, const char *param,
                            const char *code, const char *message)
{
    return fail_as(a, conn, API_OPENAI, status, type, param, code, message);
}

static enum api_dialect route_dialect(enum route r) { return r == R_MESSAGES ? API_ANTHROPIC : r == R_RESPONSES ? API_OPENAI_RESPONSES : API_OPENAI; }

/* ---------- tokenizing ---------- */

/* ids of text (control tokens parsed: the chat template's own markers). */
static int encode(const struct api *a, const char *text, int32_t **ids, size_t *n, struct api_error *e)
{
    char err[256];
    int rc = tok_encode_alloc(a->tok, text, strlen(text), true, ids, n, err, sizeof err);
    return rc ? api_errorf(e, 500, "server_error", NULL, NULL, "tokenizer: %s", err) : 0;
}

/* The request's prompt as ids: the chat template for messages, else the text. */
static int prompt_ids(const struct api *a, const struct api_request *r, int32_t **ids, size_t *n, struct api_error *e)
{
    *ids = NULL, *n = 0;
    if (!a->tok) return api_errorf(e, 400, "invalid_request_error", NULL, "no_tokenizer", "this model has no tokenizer");
    if (!r->msgs) return encode(a, r->prompt, ids, n, e);
    char *text;
    size_t len;
    int rc = api_render_prompt(r, &text, &len, e);
    if (rc) return rc;
    rc = encode(a, text, ids, n, e);
    free(text);
    return rc;
}

/* POST /apply-template (as llama.cpp's server has it): the prompt text a chat request renders. */
static enum MHD_Result apply_template(struct api *a, struct MHD_Connection *conn, struct req_ctx *rc)
{
    struct api_request r;
    struct api_error e;
    char *text = NULL;
    size_t len;
    if (api_parse_request(API_TEMPLATE, rc->body.p ? rc->body.p : "", rc->body.n, &r, &e) || api_render_prompt(&r, &text, &len, &e)) {
        api_request_free(&r);
        return send_error(a, conn, &e);
    }
    api_request_free(&r);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return send_json(conn, 200, o);
}

static enum MHD_Result tokenize(struct api *a, struct MHD_Connection *conn, struct req_ctx *rc)
{
    struct api_request r;
    struct api_error e;
    int32_t *ids = NULL;
    size_t n = 0;
    if (api_parse_request(API_TOKENIZE, rc->body.p ? rc->body.p : "", rc->body.n, &r, &e) || prompt_ids(a, &r, &ids, &n, &e)) {
        api_request_free(&r);
        free(ids);
        return send_error(a, conn, &e);
    }
    api_request_free(&r);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(o, "count", (double)n);
    free(ids);
    return send_json(conn, 200, o);
}

/* ---------- generation ---------- */

/* True when the client closed its side (or the socket broke). */
static bool peer_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double d = t - now_s();
    if (d < 0) d = 0;
    long long ns = (long long)ts.tv_nsec + (long long)(d * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000ll);
    ts.tv_nsec = (long)(ns % 1000000000ll);
    pthread_cond_timedwait(cv, mu, &ts);
}

/* A streamed response: the events (api_stream.c), handed to MHD piece by piece. */
struct stream {
    struct api_stream s;
    struct MHD_Connection *conn;
    size_t out_off;
    double last_write;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st = cls;
    struct api_stream *s = &st->s;
    struct api *a = s->a;
    (void)pos;
    for (;;) {
        if (st->out_off < s->out.n) {
            size_t n = s->out.n - st->out_off < max ? s->out.n - st->out_off : max;
            memcpy(buf, s->out.p + st->out_off, n);
            st->out_off += n;
            if (st->out_off == s->out.n) s->out.n = st->out_off = 0;
            st->last_write = now_s();
            return (ssize_t)n;
        }
        if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&a->mu);
        struct api_job *j = s->j;
        if (!s->started) {
            int rc = s->g.dialect == API_OPENAI ? api_stream_start(s) : api_dialect_stream_start(s);
            pthread_mutex_unlock(&a->mu);
            if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        for (;;) {
            if (api_stream_has_news(s)) break;
            double t = now_s(), ka = st->last_write + a->cfg.keepalive_s;
            if (t >= ka) break;
            wait_until(&a->cv, &a->mu, ka < t + API_POLL_MS / 1e3 ? ka : t + API_POLL_MS / 1e3);
            if (peer_gone(st->conn)) {
                j->cancelled = true;
                pthread_mutex_unlock(&a->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        int rc = s->g.dialect == API_OPENAI ? api_stream_news(s) : api_dialect_stream_news(s);
        if (!rc && s->out.n == 0) rc = api_job_prefilling(j) ? api_stream_prefill_comment(s) : api_buf_add(&s->out, ": keep-alive\n\n", 14);
        pthread_mutex_unlock(&a->mu);
        if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    struct stream *st = cls;
    struct api_stream *s = &st->s;
    pthread_mutex_lock(&s->a->mu);
    if (s->j->state != JOB_DONE) s->j->cancelled = true;
    api_job_release(s->a, s->j);
    pthread_mutex_unlock(&s->a->mu);
    api_buf_free(&s->out);
    free(st);
}

/* A model id that is not ours is served by ours (as llama.cpp's server
 * does); each such id is logged once, the first API_MAX_UNKNOWN_IDS of them. */
static void note_unknown_model(struct api *a, const char *id)
{
    pthread_mutex_lock(&a->mu);
    bool seen = false;
    for (int i = 0; i < a->n_unknown_ids && !seen; i++) seen = !strcmp(a->unknown_ids[i], id);
    if (!seen && a->n_unknown_ids < API_MAX_UNKNOWN_IDS && (a->unknown_ids[a->n_unknown_ids] = strdup(id))) {
        a->n_unknown_ids++;
        char shown[100];
        snprintf(shown, sizeof shown, "%.80s", id);
        for (char *p = shown; *p; p++)
            if ((unsigned char)*p < 0x20) *p = '?';
        nb_log("http: a request names the model '%s'; serving '%s'%s", shown, a->name,
               a->n_unknown_ids == API_MAX_UNKNOWN_IDS ? " (further unknown ids are not logged)" : "");
    }
    pthread_mutex_unlock(&a->mu);
}

static enum MHD_Result generate(struct api *a, struct MHD_Connection *conn, struct req_ctx *rc, enum api_kind kind)
{
    struct api_request r;
    struct api_error e = {0};
    struct api_job *j = NULL;
    char ready[16];
    double progress;
    int st = api_parse_any(kind, rc->body.p ? rc->body.p : "", rc->body.n, &r, &e);
    const enum api_dialect dialect = route_dialect(rc->route);
    if (kind != API_COMPLETION) kind = API_CHAT; /* the dialects parse into a chat request */
    pthread_mutex_lock(&a->mu);
    snprintf(ready, sizeof ready, "%s", a->phase);
    progress = a->progress;
    pthread_mutex_unlock(&a->mu);
    const char *pname = kind == API_CHAT ? "messages" : "prompt";
    if (st) goto fail;
    if (!r.has_accuracy_level && a->cfg.accuracy_level) r.accuracy_level = a->cfg.accuracy_level;
    if (r.model && strcmp(r.model, a->name)) note_unknown_model(a, r.model);
    if (r.script && !a->cfg.test_hooks) {
        api_errorf(&e, 400, "invalid_request_error", "nebula_test_script", "unknown_parameter",
                   "Unrecognized request argument supplied: nebula_test_script (served with --test-hooks only)");
        goto fail;
    }
    if (strcmp(ready, "ready")) {
        api_errorf(&e, 503, "server_error", NULL, "model_not_ready", "the model is not ready yet (phase %s, %.0f%%): see /api/status",
                   ready, progress * 100);
        goto fail;
    }
    int64_t ctx = a->ctx;
    if (r.context_length > a->ctx) {
        api_errorf(&e, 400, "invalid_request_error", "context_length", "invalid_value",
                   "'context_length' is %lld; this model's context holds %lld tokens", r.context_length, (long long)a->ctx);
        goto fail;
    }
    if (r.context_length) ctx = r.context_length;
    if (!(j = calloc(1, sizeof *j))) {
        api_errorf(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    j->refs = 1;
    j->stop_hit = -1;
    if (prompt_ids(a, &r, &j->ids, &j->n_ids, &e)) goto fail;
    if (j->n_ids == 0) {
        api_errorf(&e, 400, "invalid_request_error", pname, "invalid_value", "the prompt is empty");
        goto fail;
    }
    if ((int64_t)j->n_ids >= ctx) {
        api_errorf(&e, 400, "invalid_request_error", pname, "context_length_exceeded",
                   "the prompt has %zu tokens; the context holds %lld, and at least one must be left to generate", j->n_ids, (long long)ctx);
        goto fail;
    }
    if (r.max_tokens >= 0 && (int64_t)j->n_ids + r.max_tokens > ctx) {
        api_errorf(&e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                   "the prompt has %zu tokens and max_tokens is %lld: %lld in all, over the context of %lld", j->n_ids, r.max_tokens,
                   (long long)j->n_ids + r.max_tokens, (long long)ctx);
        goto fail;
    }
    j->max_tokens = r.max_tokens >= 0 ? r.max_tokens : ctx - (int64_t)j->n_ids;
    j->sp = r.sp;
    if (!r.has_seed) j->sp.seed = random_seed();
    j->chunk = r.prefill_chunk;
    j->accuracy_level = r.accuracy_level, j->accuracy_effective = 3;
    j->think_split = kind == API_CHAT && r.think;
    j->ignore_eos = r.ignore_eos, j->no_cache = r.no_cache;
    for (int i = 0; i < r.n_stop; i++) j->stop[i] = r.stop[i], r.stop[i] = NULL;
    j->n_stop = r.n_stop;
    /* The script as plain text (control tokens not parsed): its ids decode to exactly its text; only
     * its end (or max_tokens) ends the generation, not an end-of-turn token the model samples. */
    if (r.script) j->ignore_eos = true;
    char terr[256];
    if (r.script && tok_encode_alloc(a->tok, r.script, strlen(r.script), false, &j->script, &j->n_script, terr, sizeof terr)) {
        api_errorf(&e, 500, "server_error", NULL, NULL, "tokenizer: %s", terr);
        goto fail;
    }
    if (r.n_tools && r.tool_choice != API_TOOLS_NONE) {
        char forced[96];
        const char *pre = api_forced_call(&r, forced, sizeof forced);
        if (*pre && !(j->forced = strdup(pre))) {
            api_errorf(&e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        if (*pre) j->think_split = false; /* the think block was closed for the forced call */
        j->tools = r.tools, j->n_tools = r.n_tools, r.tools = NULL, r.n_tools = 0;
        j->parallel_calls = r.parallel_tool_calls;
    }
    j->logprobs = r.logprobs, j->top_logprobs = r.top_logprobs;
    j->think_budget = j->think_split ? r.think_budget : 0;
    j->grammar = r.grammar, r.grammar = NULL, j->grammar_key = r.grammar_key, r.grammar_key = NULL;
    j->t_arrival = now_s();
    struct gen_info g = {.kind = kind, .created = (double)time(NULL), .accuracy_level = r.accuracy_level,
                         .include_usage = r.include_usage, .think = j->think_split};
    snprintf(g.model, sizeof g.model, "%s", r.model ? r.model : "");
    g.dialect = dialect;
    for (int i = 0; i < j->n_stop; i++) g.stop[i] = j->stop[i];
    strcpy(g.id, dialect == API_ANTHROPIC ? "msg_" : dialect == API_OPENAI_RESPONSES ? "resp_" : kind == API_CHAT ? "chatcmpl-" : "cmpl-");
    random_hex(g.id + strlen(g.id), 24);
    bool stream = r.stream;
    api_request_free(&r);

    pthread_mutex_lock(&a->mu);
    if (a->stopping) st = api_errorf(&e, 503, "server_error", NULL, "shutting_down", "the server is stopping");
    /* One job may run and max_queue wait: counting the running one (or, on an
     * idle server, the first queued, which the main loop is about to take)
     * keeps --max-queue 0 serving one request at a time instead of none. */
    else if (a->waiting + (a->running ? 1 : 0) >= a->cfg.max_queue + 1)
        st = api_errorf(&e, 429, "rate_limit_exceeded", NULL, "queue_full",
                        "the queue is full (%d waiting, 1 running): try again later", a->waiting - (a->running ? 0 : 1));
    if (st) {
        pthread_mutex_unlock(&a->mu);
        api_job_release(a, j);
        return send_error_as(a, conn, &e, dialect);
    }
    j->refs = 2; /* the queue's (the main thread releases it when done) and this request's */
    if (a->tail) a->tail->next = j;
    else a->head = j;
    a->tail = j;
    a->waiting++;
    pthread_mutex_unlock(&a->mu);
    rc->job = j;
    uint64_t one = 1; /* the loop's event for the queue (api_on_wake) */
    if (write(a->wake, &one, sizeof one) < 0 && errno != EAGAIN) nb_log("http: cannot wake the main loop: %s", strerror(errno));

    if (stream) {
        struct stream *s = calloc(1, sizeof *s);
        if (!s) return MHD_NO;
        *s = (struct stream){.s = {.a = a, .j = j, .g = g}, .conn = conn, .last_write = now_s()};
        pthread_mutex_lock(&a->mu);
        j->refs++;
        pthread_mutex_unlock(&a->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        if (!resp) return stream_free(s), MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result res = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        return res;
    }
    /* Non-streaming: this connection's thread waits for the job. */
    pthread_mutex_lock(&a->mu);
    while (j->state != JOB_DONE) {
        wait_until(&a->cv, &a->mu, now_s() + API_POLL_MS / 1e3);
        if (j->state != JOB_DONE && peer_gone(conn)) {
            j->cancelled = true;
            pthread_mutex_unlock(&a->mu);
            return MHD_NO;
        }
    }
    cJSON *o = NULL;
    if (j->err.status) e = j->err;
    else if (!j->finish_reason) api_errorf(&e, 503, "server_error", NULL, "cancelled", "the generation was cancelled (the server is stopping)");
    else if (dialect == API_ANTHROPIC) o = api_messages_json(a, &g, j);
    else if (dialect == API_OPENAI_RESPONSES) o = api_responses_json(a, &g, j, !strcmp(j->finish_reason, "length") ? "incomplete" : "completed");
    else o = api_completion_json(a, &g, j);
    pthread_mutex_unlock(&a->mu);
    return o ? send_json(conn, 200, o) : send_json(conn, (unsigned)e.status, api_error_json_dialect(&e, dialect));
fail:
    api_request_free(&r);
    if (j) api_job_release(a, j);
    return send_error_as(a, conn, &e, dialect);
}

/* ---------- dispatch ---------- */

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct api *a = cls;
    struct req_ctx *rc = *con_cls;
    (void)version;
    if (!rc) {
        if (!(rc = calloc(1, sizeof *rc))) return MHD_NO;
        *con_cls = rc;
        pthread_mutex_lock(&a->mu);
        a->in_flight++;
        pthread_mutex_unlock(&a->mu);
        bool path_known = false;
        bool head = !strcmp(method, "HEAD");
        for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
            if (strcmp(url, routes[i].path)) continue;
            path_known = true;
            if (!strcmp(method, routes[i].method) || (head && !strcmp(routes[i].method, "GET"))) rc->route = routes[i].id;
        }
        if (!path_known && !strncmp(url, "/v1/models/", 11) && url[11]) {
            path_known = true;
            if (!strcmp(method, "GET") || head) rc->route = R_MODEL;
        }
        if (!path_known) {
            char msg[200];
            snprintf(msg, sizeof msg, "no such endpoint: %s %.120s", method, url);
            return fail(a, conn, 404, "invalid_request_error", NULL, "not_found", msg);
        }
        if (rc->route == R_NONE) {
            struct api_error e;
            api_errorf(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "%s is not allowed on %.120s", method, url);
            count_error(a, 405);
            cJSON *o = api_error_json(&e);
            char *t = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            struct MHD_Response *resp = t ? MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE) : NULL;
            if (!resp) return free(t), MHD_NO;
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
            bool post = false;
            for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
                if (!strcmp(url, routes[i].path)) post = !strcmp(routes[i].method, "POST");
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, post ? "POST" : "GET, HEAD");
            enum MHD_Result r = MHD_queue_response(conn, 405, resp);
            MHD_destroy_response(resp);
            return r;
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > a->cfg.max_body) {
            char msg[160];
            snprintf(msg, sizeof msg, "the body has %.20s bytes; the limit is %zu", cl, a->cfg.max_body);
            return fail(a, conn, 413, "invalid_request_error", NULL, "request_too_large", msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        rc->received += *upload_size;
        if (rc->received > a->cfg.max_body) rc->too_large = true, api_buf_free(&rc->body);
        else if (api_buf_add(&rc->body, upload_data, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (rc->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", a->cfg.max_body);
        return fail_as(a, conn, route_dialect(rc->route), 413, "invalid_request_error", NULL, "request_too_large", msg);
    }
    switch (rc->route) {
    case R_MODELS: {
        cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data");
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(d, api_model_json(a));
        return send_json(conn, 200, o);
    }
    case R_MODEL:
        if (strcmp(url + 11, a->name)) {
            char msg[320];
            snprintf(msg, sizeof msg, "the model '%.80s' does not exist; this server has '%.80s'", url + 11, a->name);
            return fail(a, conn, 404, "invalid_request_error", "model", "model_not_found", msg);
        }
        return send_json(conn, 200, api_model_json(a));
    case R_STATUS: return send_json(conn, 200, api_status_json(a));
    case R_METRICS: return send_text(conn, 200, "text/plain; version=0.0.4; charset=utf-8", api_metrics_text(a));
    case R_TOKENIZE: return tokenize(a, conn, rc);
    case R_TEMPLATE: return apply_template(a, conn, rc);
    case R_CHAT: return generate(a, conn, rc, API_CHAT);
    case R_COMPLETIONS: return generate(a, conn, rc, API_COMPLETION);
    case R_MESSAGES: return generate(a, conn, rc, API_MESSAGES);
    case R_RESPONSES: return generate(a, conn, rc, API_RESPONSES);
    case R_NONE: break;
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct api *a = cls;
    struct req_ctx *rc = *con_cls;
    (void)conn, (void)toe;
    if (!rc) return;
    pthread_mutex_lock(&a->mu);
    if (rc->job) {
        if (rc->job->state != JOB_DONE) rc->job->cancelled = true;
        api_job_release(a, rc->job);
    }
    a->in_flight--;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    api_buf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    nb_log("http: %s", line);
}

int api_start(struct api *a, struct coord *c, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    a->model_path = c->model_path;
    a->ctx = c->n_ctx;
    a->vocab = hp->n_vocab, a->layers = hp->n_layer, a->has_mtp = hp->n_nextn > 0;
    a->tok = c->tok;
    a->chunk_max = c->chunk;
    a->t_created = (double)time(NULL);
    const char *name = a->cfg.name;
    if (!name && gguf_find_key(c->m->gguf, "general.name") >= 0 && gguf_get_str(c->m->gguf, "general.name", &name, NULL, 0)) name = NULL;
    if (!name) {
        const char *slash = strrchr(c->model_path, '/');
        name = slash ? slash + 1 : c->model_path;
    }
    snprintf(a->name, sizeof a->name, "%s", name);
    /* The demo's notice: a trained demo model says what it is in general.description (nebula-convert
     * --description); the random-weight one has none. */
    const char *desc = NULL;
    if (gguf_find_key(c->m->gguf, "general.description") < 0 || gguf_get_str(c->m->gguf, "general.description", &desc, NULL, 0))
        desc = NULL;
    api_demo_notice(a, desc);
    snprintf(a->phase, sizeof a->phase, "loading");
    snprintf(a->message, sizeof a->message, "starting the workers");
    a->progress = 0.1;
    if (pthread_mutex_init(&a->mu, NULL) || pthread_cond_init(&a->cv, NULL)) return nb_errf(err, errlen, NB_ENOMEM, "cannot create a mutex");
    if ((a->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return nb_errf(err, errlen, NB_EIO, "eventfd: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->cfg.port)};
    if (inet_pton(AF_INET, a->cfg.host, &sa.sin_addr) != 1)
        return nb_errf(err, errlen, NB_EINVAL, "--http: '%s' is not an IPv4 address", a->cfg.host);
    /* The server's threads inherit this thread's signal mask: they leave
     * SIGINT, SIGTERM and SIGCHLD to the main thread, whose poll they end. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT), sigaddset(&block, SIGTERM), sigaddset(&block, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    a->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                                     MHD_USE_ERROR_LOG, 0, NULL,
                                 NULL, handle, a, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, a, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, completed, a,
                                 MHD_OPTION_CONNECTION_LIMIT, 128u, MHD_OPTION_CONNECTION_TIMEOUT, 300u, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!a->daemon) return nb_errf(err, errlen, NB_EIO, "cannot listen on %s:%d (in use, or not an address of this host)", a->cfg.host, a->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->daemon, MHD_DAEMON_INFO_BIND_PORT);
    a->port = di ? di->port : a->cfg.port;
    fprintf(stderr, "nebula-coordinator: http on http://%s:%d\n", a->cfg.host, a->port);
    return 0;
}

void api_stop(struct api *a)
{
    if (!a->daemon) return;
    /* No new connections; the requests in flight get their answer (an error
     * event and [DONE] for a stream, 503 otherwise) before the connections
     * are closed: up to 3 s. */
    MHD_socket listen = MHD_quiesce_daemon(a->daemon);
    pthread_mutex_lock(&a->mu);
    a->stopping = true;
    /* Jobs the loop has not taken yet end without running; those it took
     * were ended by the loop before this (coord_requests_cancel_all). */
    while (a->head) {
        struct api_job *j = a->head;
        a->head = j->next;
        j->state = JOB_DONE;
        api_job_release(a, j);
    }
    a->tail = NULL, a->waiting = 0;
    for (int i = 0; i < a->n_unknown_ids; i++) free(a->unknown_ids[i]);
    a->n_unknown_ids = 0;
    pthread_cond_broadcast(&a->cv);
    double until = now_s() + 3.0;
    while (a->in_flight > 0 && now_s() < until) wait_until(&a->cv, &a->mu, until);
    if (a->in_flight > 0) nb_log("http: %d requests still open after 3 s: closing them", a->in_flight);
    pthread_mutex_unlock(&a->mu);
    MHD_stop_daemon(a->daemon);
    if (listen != MHD_INVALID_SOCKET) close(listen);
    a->daemon = NULL;
    close(a->wake);
    a->wake = -1;
}
