/* api.h — the HTTP API of nebula-coordinator (docs/API.md).
 *
 * Three layers, so that each can be tested on its own:
 *   - api_request.c (pure): a request body (JSON) → struct api_request, or an
 *     OpenAI-style error naming the parameter at fault.  Fuzzed
 *     (tests/fuzz/fuzz_api_request.c) and unit-tested (tests/api/).
 *   - api_text.c (pure): the generated text → reasoning_content / content
 *     (the `</think>` split) with stop strings; text that could still become a
 *     stop string or `</think>` is held back, so nothing a client saw is ever
 *     taken back.
 *   - api_http.c (libmicrohttpd threads; api_views.c the read-only
 *     endpoints' bodies) and api_run.c (the coordinator's main thread): the HTTP server parses, tokenizes and validates in its own
 *     threads, then hands a job to a bounded queue; the main thread, the only
 *     one that talks to the workers, runs one job at a time (its request
 *     queue, requests.c) and publishes text as it is generated.  Jobs, the
 *     queue, the statistics and a snapshot of the workers' state are guarded
 *     by one mutex (struct api.mu) and one condition variable; an eventfd,
 *     one of the main loop's fd events, says a job arrived. */
#ifndef NB_COORD_API_H
#define NB_COORD_API_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "coordinator/coord.h"
#include "core/chat/chat.h"
#include "core/conf/conf.h"
#include "core/gen/spec.h"
#include "core/grammar/grammar.h"
#include "core/sampling/sampling.h"

#define API_MAX_STOP 4
#define API_MAX_STOP_BYTES 256
#define API_MAX_PREFILL_CHUNK NB_MAX_PREFILL_CHUNK
#define API_MAX_TOKENS_LIMIT (1 << 24)

/* ---------- requests (api_request.c) ---------- */

enum api_kind { API_CHAT, API_COMPLETION, API_TOKENIZE, API_TEMPLATE, API_MESSAGES, API_RESPONSES };

/* The API a generation request speaks: its body, its response and its stream
 * (API_MESSAGES and API_RESPONSES parse into a chat request, kind API_CHAT). */
enum api_dialect { API_OPENAI, API_ANTHROPIC, API_OPENAI_RESPONSES };

struct api_error {
    int status;        /* HTTP status */
    char type[32];     /* "invalid_request_error", "server_error", ... */
    char param[64];    /* "" → null */
    char code[40];     /* "" → null */
    char message[400];
};

/* Fills e and returns e->status. param and code may be NULL. */
int api_errorf(struct api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
               ...) __attribute__((format(printf, 6, 7)));
/* {"error":{"message","type","param","code"}} */
cJSON *api_error_json(const struct api_error *e);

/* One function of a request's `tools` (api_tools.c). */
struct api_tool {
    char *name;
    char *json;    /* the whole tool as the template's `tojson` prints it (Python's json.dumps) */
    cJSON *props;  /* parameters.properties (a copy), or NULL: every argument is a string */
};

/* tool_choice: auto (the model decides), none (tools not rendered, calls not
 * parsed), required (the answer starts with a call: a forced prefix), a
 * named function (the prefix names it). */
enum api_tool_choice { API_TOOLS_AUTO, API_TOOLS_NONE, API_TOOLS_REQUIRED, API_TOOLS_NAMED };

/* A tool call parsed from the generated text. */
struct api_call {
    char *name;
    char *arguments; /* a JSON object, as text */
};

struct api_request {
    enum api_kind kind;
    char *model;                /* NULL when absent */
    struct chat_msg *msgs;      /* chat, and tokenize with "messages"; contents owned */
    int n_msgs;
    char *prompt;               /* completion prompt, tokenize text */
    long long max_tokens;       /* -1: up to the context's end */
    struct sampling_params sp;  /* the model's defaults for `think`, then the request's fields */
    bool has_seed;
    char *stop[API_MAX_STOP];
    int n_stop;
    bool stream, include_usage;
    bool think;                 /* default on */
    bool ignore_eos;            /* end-of-turn tokens do not end the generation */
    bool no_cache;              /* cache_prompt false: neither resumed from nor saved in the prompt cache */
    int accuracy_level;         /* 1-3, default 3 */
    bool has_accuracy_level;    /* the body gave it (else the server's default applies) */
    long long context_length;   /* 0: the model's */
    int prefill_chunk;          /* 0: the server's --chunk */
    struct api_tool *tools;     /* chat: `tools` (functions) */
    int n_tools;
    enum api_tool_choice tool_choice;
    char *tool_name;            /* API_TOOLS_NAMED: the function */
    bool parallel_tool_calls;   /* default true; false: the generation ends after the first call */
    char *script;               /* `nebula_test_script`: the text to emit instead of the model's (coordinator --test-hooks) */
    enum api_dialect dialect;
    long long think_budget;     /* reasoning tokens at most, then the server closes the think block (0: none) */
    bool logprobs;              /* chat `logprobs: true`, completions `logprobs: k` */
    int top_logprobs;           /* 0-20 alternatives a token */
    gram_grammar *grammar;      /* response_format json_object / json_schema (api_format.c); NULL: free text */
    char *grammar_key;          /* "json_object" or "json_schema:" + the schema's JSON text: the coordinator's cache key */
};

/* Parses body (len bytes, no NUL needed) as a request of this kind.  0, or
 * the HTTP status of the error (400, or 500 for out of memory) with e filled.
 * Unknown fields are ignored; a known field of the wrong type or out of
 * range is an error naming it.  r is always safe to api_request_free. */
int api_parse_request(enum api_kind kind, const char *body, size_t len, struct api_request *r, struct api_error *e);
void api_request_free(struct api_request *r);
/* Another API's body → the OpenAI chat body it means (NULL with e filled). */
typedef cJSON *(*api_translate_fn)(const cJSON *root, struct api_error *e);
/* api_parse_request for a body that translate turns into a chat body (r->kind is then API_CHAT). */
int api_parse_translated(enum api_kind kind, const char *body, size_t len, api_translate_fn translate, struct api_request *r,
                         struct api_error *e);
/* api_format.c: `response_format` → r->grammar (NULL for none or "text").
 * 0, or the error's HTTP status (400 naming the schema keyword at fault, 500). */
int api_parse_format(const cJSON *root, struct api_request *r, struct api_error *e);
void api_format_free(struct api_request *r);

/* ---------- generated text → reasoning / content (api_text.c) ---------- */

/* Receives the text as it becomes final; reasoning says which channel. */
typedef int (*api_emit_fn)(void *ctx, bool reasoning, const char *s, size_t n);

struct api_text {
    bool reasoning;     /* inside the think block */
    bool strip_lead;    /* content just began after </think>: leading newlines are dropped */
    bool stopped;       /* a stop string matched: nothing more is emitted */
    int stop_hit;       /* which one (-1: none) */
    char *const *stops;
    int n_stops;
    char *held;         /* text not emitted yet */
    size_t n_held, cap;
};

/* reasoning: the generation starts inside an open think block (chat with
 * think on).  stops: n_stops non-empty strings, kept by the caller. */
void api_text_init(struct api_text *t, bool reasoning, char *const *stops, int n_stops);
/* Takes the next piece of decoded text; emits what is final.  Returns 1 when
 * a stop string matched (the text before it was emitted, it and what follows
 * are dropped), 0 otherwise, or NB_ENOMEM / an emit function's non-zero. */
int api_text_push(struct api_text *t, const char *s, size_t n, api_emit_fn emit, void *ctx);
/* End of the generation: emits what was held back (unless stopped). */
int api_text_finish(struct api_text *t, api_emit_fn emit, void *ctx);
void api_text_free(struct api_text *t);

/* ---------- jobs, queue and server (api_http.c, api_run.c) ---------- */

struct api_buf {
    char *p;
    size_t n, cap;
};
/* api_text.c */
int api_buf_add(struct api_buf *b, const char *s, size_t n); /* 0 or NB_ENOMEM; keeps p NUL-terminated */
/* obj[key] = the n bytes at s as a JSON string (by length: cJSON's strings
 * end at a NUL, which cut answers there), a NUL the model generated and a
 * byte that is not valid UTF-8 each as U+FFFD — a NUL never crosses the API,
 * so a client can send any answer back in its history (a NUL in a request is
 * a 400); 0 or NB_ENOMEM. */
int api_add_text(cJSON *obj, const char *key, const char *s, size_t n);
/* api_stream.c: o (freed) as one SSE event into out: `event: NAME` (name not NULL) and `data: {…}`. */
int api_sse_event(struct api_buf *out, const char *name, cJSON *o);
void api_buf_free(struct api_buf *b);

/* ---------- logprobs (api_logprobs.c) ---------- */

#define API_MAX_TOP_LOGPROBS 20

/* One generated token's log-probability and its k most likely alternatives,
 * under the model's distribution: the log-softmax of the raw logits (before
 * temperature, top-k, top-p, min-p and penalties). */
struct api_logprob {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[API_MAX_TOP_LOGPROBS];
    float top_logprob[API_MAX_TOP_LOGPROBS]; /* descending (ties: the lower id first) */
};
void api_logprob_row(const float *row, int32_t n_vocab, int32_t id, int k, struct api_logprob *out);
struct tok_tokenizer;
/* OpenAI's chat shape of entries [from, to): {"content":[{token, logprob, bytes, top_logprobs}], "refusal":null}. */
cJSON *api_logprobs_chat_json(const struct tok_tokenizer *tok, const struct api_logprob *lp, size_t from, size_t to);
/* The legacy completions shape: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset};
 * *offset: characters of the text before entry from (advanced past to). */
cJSON *api_logprobs_completion_json(const struct tok_tokenizer *tok, const struct api_logprob *lp, size_t from, size_t to, size_t *offset);

/* ---------- tools (api_tools.c) ---------- */

/* Python json.dumps(v, ensure_ascii=False): ", " and ": " separators, keys in
 * their order, non-ASCII as is (what the template's `tojson` prints). */
int api_pyjson(const cJSON *v, struct api_buf *b);
/* `tools`, `tool_choice`, `parallel_tool_calls` of a chat request. */
int api_parse_tools(const cJSON *root, struct api_request *r, struct api_error *e);
/* messages[i].tool_calls of an assistant message into m->calls (owned). */
int api_parse_msg_calls(const cJSON *calls, int i, struct chat_msg *m, struct api_error *e);
void api_free_msg_calls(struct chat_msg *m);
void api_tools_free(struct api_tool *t, int n);
/* The request's prompt text: the chat template with its tools (or none with
 * tool_choice none), then the forced opening of a required or named call.
 * 0, or the error's status. */
int api_render_prompt(const struct api_request *r, char **text, size_t *len, struct api_error *e);
/* The text the generation starts from when a call is forced ("" if none). */
const char *api_forced_call(const struct api_request *r, char *buf, size_t n);

/* One <tool_call>…</tool_call> block → name + arguments, the values typed by
 * the tool's parameter schema.  0, or NB_EFORMAT with err saying why. */
int api_tool_parse_block(const char *s, size_t n, const struct api_tool *tools, int n_tools, struct api_call *out, char *err,
                         size_t errlen);
void api_call_free(struct api_call *c);

typedef int (*api_call_fn)(void *ctx, struct api_call *c); /* takes c's strings */

/* The content channel split into text and tool calls as it streams: text
 * outside <tool_call> blocks is content (whitespace next to a block
 * dropped), each complete block becomes a call.  A block that does not parse,
 * or one the generation ends inside, is malformed: it and everything after
 * it stay content, and `error` says why. */
struct api_toolscan {
    const struct api_tool *tools;
    int n_tools;
    bool parallel;      /* false: push returns 1 after the first call */
    bool in_call, failed, strip_lead;
    int n_calls;
    char error[200];
    struct api_buf buf;  /* text not emitted yet */
};
void api_toolscan_init(struct api_toolscan *t, const struct api_tool *tools, int n_tools, bool parallel);
/* 0, 1 (the one call parallel_tool_calls:false allows is complete: stop), or an error. */
int api_toolscan_push(struct api_toolscan *t, const char *s, size_t n, api_emit_fn content, api_call_fn call, void *ctx);
int api_toolscan_finish(struct api_toolscan *t, api_emit_fn content, void *ctx);
void api_toolscan_free(struct api_toolscan *t);

enum api_job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

struct api_job {
    /* Set by the HTTP thread before it queues the job; read-only after. */
    int32_t *ids;
    size_t n_ids;
    size_t cached_ids;    /* of them, held by a prompt-cache checkpoint (set by the main thread before JOB_DONE) */
    int32_t *script;      /* nebula_test_script's ids: emitted instead of the sampled ones */
    size_t n_script;
    struct api_tool *tools; /* the calls are parsed (tools given, tool_choice not none) */
    int n_tools;
    bool parallel_calls;
    char *forced;         /* the forced opening of a call, already in the prompt: the text starts with it */
    bool logprobs;        /* the rows come back (no argmax shortcut): an api_logprob per token */
    long long think_budget; /* reasoning tokens at most (0: none): then the think block is closed (api_run.c) */
    int top_logprobs;
    long long max_tokens;
    struct sampling_params sp;
    int chunk;            /* prefill tokens per step */
    int accuracy_level;   /* asked (1-3): the verify windows' acceptance */
    bool think_split;     /* chat with think on: text starts as reasoning */
    bool ignore_eos;
    bool no_cache;        /* the request's cache_prompt false */
    gram_grammar *grammar; /* structured output (owned), or NULL */
    char *grammar_key;     /* its key (owned): api_request's */
    char *stop[API_MAX_STOP];
    int n_stop;
    double t_arrival;
    /* Shared, under api.mu. */
    enum api_job_state state;
    bool cancelled;       /* the client went away */
    struct api_buf reasoning, content;
    struct api_call *calls;  /* tool calls parsed so far */
    int n_calls, cap_calls;
    char tool_error[200];    /* a malformed call ("" when none) */
    int stop_hit;            /* the stop string that ended it (-1: none) */
    struct api_logprob *lp;  /* one per token handed to on_token (the end-of-turn token has none) */
    size_t n_lp, cap_lp;
    long long completion_tokens;
    size_t prefill_done;  /* prompt ids evaluated so far (after each prefill step; a retry starts again from 0) */
    int prefill_chunk_tok; /* prefill tokens per step as run: chunk capped at --chunk (coord_request_chunk) */
    const char *finish_reason; /* "stop", "length"; NULL on error or cancel */
    struct api_error err;      /* err.status != 0: failed */
    double queue_ms, prompt_ms, ttft_ms, decode_ms;
    int accuracy_effective;    /* the level the windows ran at (3 without speculation or with a grammar) */
    struct spec_stats spec;    /* its verify windows, every leg's (timings.speculative) */
    int refs;
    struct api_job *next;
};

/* The job is running and its prompt is not all evaluated yet: /api/status's
 * "prefill" and the streams' `: prefill DONE/TOTAL` comments; with a.mu held. */
static inline bool api_job_prefilling(const struct api_job *j) { return j->state == JOB_RUNNING && j->prefill_done < j->n_ids; }

#define API_MAX_WORKERS 4
#define API_MAX_UNKNOWN_IDS 32

struct api_worker_view {
    char role[24], state[16];
    int pid, restarts;
};

struct api_config {
    const char *host;     /* IPv4 address */
    int port;             /* 0: any free port */
    int max_queue;
    size_t max_body;
    double keepalive_s;
    bool demo;
    const char *name;     /* NULL: GGUF general.name, else the file's basename */
    int accuracy_level;   /* a request's when it gives none (nebula.conf generate.accuracy_level; 1-3) */
    bool test_hooks;      /* --test-hooks: nebula_test_script is served (tests only) */
};

struct api {
    struct api_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake;             /* eventfd: a job was queued (an fd event of the coordinator's loop: api_on_wake) */
    struct MHD_Daemon *daemon;
    int port;             /* bound */
    /* The model, fixed before the server starts. */
    char name[128];
    char notice[1024]; /* with cfg.demo: what the model is (the GGUF's general.description, else the random one's) */
    const char *model_path;
    int64_t ctx, vocab;
    int layers;
    bool has_mtp;
    const struct tok_tokenizer *tok;
    int chunk_max;        /* the step ring's tokens per message */
    double t_created;
    /* Queue (under mu). */
    struct api_job *head, *tail, *running;
    int waiting;
    int in_flight;        /* requests being answered (api_stop lets them finish) */
    bool stopping;
    /* Published by the main thread (under mu). */
    char phase[16];       /* starting, loading, ready, error */
    double progress;
    char message[256];
    struct api_worker_view workers[API_MAX_WORKERS];
    int n_workers;
    double vram_hit_rate, ram_hit_rate, ssd_bytes_per_token;
    struct coord_cache_numbers cache; /* the prompt cache's counters (api_publish) */
    /* Statistics (under mu). */
    uint64_t req_ok, req_cancelled, req_invalid, req_rejected, req_failed;
    uint64_t tokens_generated, prompt_tokens;
    double last_tps, last_ttft_ms;
    struct spec_stats spec;    /* the verify windows of completed HTTP requests (/metrics) */
    /* Model ids asked for that are not ours: each logged once (under mu). */
    char *unknown_ids[API_MAX_UNKNOWN_IDS];
    int n_unknown_ids;
};

/* api_spec.c: speculative decoding's counters (issue 16's faces) as an
 * object — passes, tokens, tokens_per_pass, drafted, accepted, acceptance,
 * nongreedy_accepted, {drafted,accepted,acceptance}_by_position, drafters
 * {mtp, lookup}, and with `windows` the trajectory (each window's drafts). */
cJSON *api_spec_json(const struct spec_stats *s, bool windows);

/* What a response needs besides the job. */
struct gen_info {
    enum api_kind kind;
    enum api_dialect dialect;
    char *stop[API_MAX_STOP]; /* the job's (Anthropic's stop_sequence names the one that matched) */
    char id[48];
    char model[128];   /* the id the request named ("" : ours), echoed back */
    double created;
    int accuracy_level;
    bool include_usage, think;
};

/* api_dialects.c: any request body, the Anthropic Messages and OpenAI Responses ones
 * (API_MESSAGES, API_RESPONSES: translated into chat requests) included (pure) */
int api_parse_any(enum api_kind kind, const char *body, size_t len, struct api_request *r, struct api_error *e);
/* api_dialect_out.c (with a.mu held): their responses and stream events */
cJSON *api_messages_json(const struct api *a, const struct gen_info *g, const struct api_job *j);
cJSON *api_responses_json(const struct api *a, const struct gen_info *g, const struct api_job *j, const char *status);
cJSON *api_error_json_dialect(const struct api_error *e, enum api_dialect d);
struct api_stream;
int api_dialect_stream_start(struct api_stream *s);
int api_dialect_stream_news(struct api_stream *s);

/* api_respond.c (with a.mu held) */
void api_add_timings(cJSON *o, const struct api_job *j);
void api_add_usage(cJSON *o, const struct api_job *j);
void api_add_nebula(cJSON *o, const struct gen_info *g, const struct api_job *j); /* the `nebula` object: accuracy levels, think */
cJSON *api_envelope(const struct api *a, const struct gen_info *g, bool chunk);
cJSON *api_completion_json(const struct api *a, const struct gen_info *g, const struct api_job *j);
cJSON *api_call_json(const struct gen_info *g, const struct api_job *j, int k, bool whole);

/* A streamed response's state: what of the job was sent (api_stream.c). */
struct api_stream {
    struct api *a;
    struct api_job *j;    /* one reference (the HTTP side's) */
    struct gen_info g;
    size_t r_off, c_off;  /* job text already sent */
    int calls_sent;       /* the job's tool calls already sent */
    size_t lp_sent;       /* the job's logprobs entries already sent */
    size_t lp_offset;     /* completions: characters before the next entry (text_offset) */
    size_t prefill_sent;  /* the job's prefill_done last reported */
    bool started, finished;
    struct api_buf out;   /* events not handed out yet */
    /* Anthropic and Responses streams: content blocks / output items */
    int open_kind;        /* the open block: 0 none, 1 thinking, 2 text */
    int n_blocks;         /* blocks (items) opened so far: the next one's index */
    size_t open_from;     /* where the open block's text starts in the job's buffer */
    long long seq;        /* Responses: sequence_number */
};
/* api_stream.c, with a.mu held */
int api_stream_start(struct api_stream *s);              /* the first events */
bool api_stream_has_news(const struct api_stream *s);    /* the job has something not sent */
int api_stream_news(struct api_stream *s);               /* events for it (the last ones when the job is done) */
int api_stream_prefill_comment(struct api_stream *s);    /* `: prefill DONE/TOTAL` */

struct coord;

/* api_http.c */
/* Fills a->name etc. from the coordinator's model and starts the server.
 * Prints "nebula-coordinator: http on http://HOST:PORT" on stderr. */
int api_start(struct api *a, struct coord *c, char *err, size_t errlen);
/* Refuses new jobs, fails the queued ones, stops the server (joins its threads). */
void api_stop(struct api *a);
void api_job_release(struct api *a, struct api_job *j); /* with a.mu held */

/* api_views.c: response bodies of the read-only endpoints (they take a.mu). */
cJSON *api_model_json(const struct api *a); /* fixed fields only: no lock */
void api_demo_notice(struct api *a, const char *description); /* a->notice: the description, else the random demo's */
cJSON *api_status_json(struct api *a);
char *api_metrics_text(struct api *a); /* malloc'ed, NULL when out of memory */

/* api_run.c (main thread) */
/* Copies the workers' state and the hit rates into the snapshot. */
void api_publish(struct coord *c);
void api_set_phase(struct api *a, const char *phase, double progress, const char *message);
/* The wake eventfd fired: the queued jobs move to the request queue
 * (requests.c), which runs them one after the other as events come. */
void api_on_wake(struct coord *c);

#endif
