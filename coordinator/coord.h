/* coord.h — the pieces of nebula-coordinator and the state they share.
 *
 * One thread talks to the workers, and it runs one event loop (core/event:
 * fd events and timers with callbacks, never re-entered).  The pieces and
 * who may call whom — a DAG, checked by tests/tools/test_coord_deps.sh:
 *
 *   main      → control, api_run, api_http, requests, step, workers, context, cache, util
 *   control   → generate, requests, workers, cache api_run → requests, api_http, workers, cache
 *   generate  → requests                           api_http → api_request, api_text, api_views
 *   requests  → step, workers, cache               workers → cpu_plan, cache
 *   (util, context, cpu_plan, step, cache, api_text, api_request: leaves; util is below all)
 *
 * main.c: flags, the instance, regions, the loop's events, start-up as a
 * state, teardown.  workers.c: spawning, hello → configure → ready,
 * heartbeats and restarts.  control.c: ctl.sock (REP) and its requests.
 * generate.c: ctl's generate → a request.  requests.c: the one queue of
 * requests (ctl generates and HTTP jobs), each a state machine driving a
 * core/gen session over the step ring.  cache.c: the prompt cache's index.  step.c: the step ring as an fd
 * event (a waiter thread and an eventfd).  Upward news travels by callbacks
 * registered in struct coord (on_workers, on_idle), never by name. */
#ifndef NB_COORD_H
#define NB_COORD_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include <cJSON.h>

#include "core/ctl/ctl.h"
#include "core/gen/spec.h"
#include "core/grammar/grammar.h"
#include "core/sampling/sampling.h"
#include "shm/shm.h"

struct model;
struct api;
struct coord_step;
struct coord_cache;
struct coord_request;
struct coord_worker;
typedef struct event_loop event_loop;
typedef struct tok_tokenizer tok_tokenizer;

#define COORD_MAX_WORKERS 3
#define COORD_GRAMMARS 4          /* structured output's matchers kept between requests (grammars.c) */
#define COORD_STATS_BLOCKS 4  /* gpu-worker, cpu-moe-worker, ssd-pager, (coordinator, reserved) */
#define COORD_HEARTBEAT_MISS_S 3.0
#define COORD_READY_TIMEOUT_S 60.0
/* A configuring worker is loading (a RAM arena of tens of GB from disk, dense
 * weights to the GPU) for as long as it takes, but every worker heartbeats
 * from another thread meanwhile (core/ctl/worker.c; the gpu-worker's
 * setup_beat): silence this long means the process is stuck. */
#define COORD_CONFIGURE_SILENCE_S 30.0
#define COORD_MAX_FAILED_STARTS 5

enum coord_wstate { W_DOWN, W_STARTING, W_CONFIGURING, W_READY, W_FAILED };

struct coord_worker {
    const char *role;     /* the DEALER identity, "gpu-worker" */
    char binary[PATH_MAX];
    uint32_t stats_block;
    pid_t pid;
    enum coord_wstate state;
    double started_at, last_beat, down_since;
    int restarts;         /* over the instance's life */
    int failed_starts;    /* in a row, without reaching ready */
    char log_path[PATH_MAX];
    int threads;           /* configure's threads (0: the worker's default) */
    uint32_t ring_spin_us; /* configure's ring_spin_us */
    bool omp_spin;         /* started without OMP_WAIT_POLICY=passive (cpu_plan.c) */
    const char *kernels;   /* configure's kernels: --kernels for the gpu-worker, --cpu-kernels for the cpu-moe-worker */
};

struct coord_tiers {
    int64_t experts[3];   /* vram, ram, ssd */
    uint64_t bytes[3];
    uint64_t arena_bytes;    /* the `experts` region: a header page + Σ RAM-tier blobs */
    uint64_t max_blob_bytes; /* a staging slot holds the largest blob */
    bool ple_ssd;            /* request.ple_tier "ssd": the gpu-worker pages the n-gram table */
    bool ple_vram;           /* request.ple_tier "vram": a cuda gpu-worker holds it on the device */
    int64_t vram_ctx;        /* request.vram_ctx: positions the VRAM plan reserved K/V for (0: none) */
};

#define COORD_STAGING_SLOTS 4u    /* slot 0 kept for the gpu-worker's PLE rows; 1-3 the cpu-moe-worker's */
#define COORD_PLE_RING_ROWS 256u  /* PLE rows per request on the pager-gw ring */

struct coord {
    /* configuration */
    char exe_dir[PATH_MAX];
    const char *config_path;       /* the nebula.conf read ("": none) */
    const char *model_path, *prepared;
    const char *mtp_path; /* --mtp: a separate MTP GGUF, passed on to the workers that load the model (NULL: none) */
    char placement_path[PATH_MAX]; /* "" without --prepared: every expert local */
    int threads;
    int chunk;                     /* prefill tokens per step message */
    int stream_rows;               /* configure's stream_rows (engine.prefill_stream_rows) */
    /* the gpu-worker's and cpu-moe-worker's compute settings, sent in their
     * configure (core/ctl/worker.h; docs/RUNNING.md has the flags) */
    const char *backend;           /* --backend: "cpu" or "cuda" ("auto", the default, resolved at start) */
    const char *kernels;           /* --kernels: the CUDA matrix kernels ("": the backend's default, fast) */
    const char *cpu_kernels;       /* --cpu-kernels: the CPU experts' ("": fast beside cuda, else ref) */
    uint64_t vram_budget;          /* --vram-budget bytes (0: placement.json's) */
    int64_t ctx;                   /* --ctx: positions for a request and the K/V reserve (0: placement's, model's) */
    bool layer_times;              /* --layer-times: the gpu-worker times each layer on cuda too */
    int spec;                      /* --spec: COORD_SPEC_OFF, _MTP, _LOOKUP or _AUTO (speculative decoding, requests.c) */
    struct spec_stats spec_total;  /* the verify windows of every request served (nebulactl stats) */
    struct coord_cache_cfg {       /* the prompt cache: nebula.conf [cache], --cache* (cache.c) */
        int enable;                /* 0 off, 1 on, 2 auto (coord_cache_open decides by backend) */
        int ram_entries;
        uint64_t ram_bytes, disk_bytes;
        const char *dir;           /* "": none */
        bool grid_only;            /* cache.resume = grid: checkpoints on the grid only, the output bit for bit */
    } cache_cfg;
    struct coord_cache *cache;     /* cache.c's index (NULL: off) */
    bool gw_cuda;                  /* backend is cuda */
    /* the instance */
    shm_instance *inst;
    char rundir[PATH_MAX];
    bool rundir_made;
    struct shm_region step_reg, moe_reg, stats_reg, experts_reg, staging_reg, pager_reg, pager_gw_reg;
    struct ring_pair step;
    shm_stats *stats;
    ctl_sock *router, *rep;
    event_loop *loop;              /* the one loop (main.c sets it up) */
    struct coord_step *stepper;    /* step.c: the response ring as an event source */
    /* the model as the coordinator sees it: sizes and the tokenizer */
    struct model *m;
    tok_tokenizer *tok;
    gram_vocab *gram_vocab;        /* the tokenizer's trie for structured output, built at the first such request */
    struct coord_grammar {         /* grammars.c: a matcher kept for the next request with the same response_format */
        char *key;
        gram_grammar *g;
        gram_matcher *m;
        uint64_t used;
        bool lent;
    } grammars[COORD_GRAMMARS];
    uint64_t grammar_clock;
    struct coord_tiers tiers;
    int64_t n_ctx;                 /* positions a request may use (coord_context_limit) */
    /* workers */
    struct coord_worker w[COORD_MAX_WORKERS];
    int n_workers;
    double t_start;
    uint64_t next_tag;
    uint64_t deaths;               /* workers reaped so far: a request that failed while one died is retried once */
    bool step_in_flight;           /* the gpu-worker is busy for us: its heartbeats may be late */
    volatile sig_atomic_t stop;    /* shutdown requested (ctl.sock or a signal) */
    volatile sig_atomic_t got_sigchld; /* a child exited: reap before the next wait */
    struct api *api;               /* the HTTP API (api.h); NULL with --http off */
    /* ctl.sock (control.c) */
    bool ctl_serving;              /* read requests (from ready to teardown) */
    bool ctl_pending;              /* REP has a request not answered yet (a generate, a restart) */
    bool ctl_in_serve;
    struct coord_restart_wait {
        struct coord_worker *w;    /* the worker a restart waits for (NULL: none) */
        pid_t old_pid;
        bool begun;                /* killed; else waiting for the running request to end */
        long long timer;
    } restart;
    /* the request queue (requests.c); the head is the one that runs */
    struct coord_request *rq_head, *rq_tail;
    /* callbacks main.c registers: a worker's state changed; a request ended (none runs) */
    void (*on_workers)(struct coord *c);
    void (*on_idle)(struct coord *c);
};

/* cache.c: the prompt cache's index (its top comment has the rule).  open
 * after the model and the backend are known (reads cache.dir's files);
 * match: the checkpoint a prompt resumes from (false: none; *anywhere: it is
 * one of grid 0, so what follows is exact within tolerance only); has: a
 * checkpoint of exactly these ids exists; cut: where its prefill saves one on
 * the grid (0: nowhere), the last resumable position in (from, n]; saved: a
 * STEP_SAVE's answer checked and recorded (chunk 0: a checkpoint anywhere; a
 * refused one is dropped by the next evict); evict: the next STEP_DROP a
 * budget asks for (false: none); forget: a checkpoint that failed to load;
 * count: a request's lookup (hit or miss, ids reused, ids prefilled). */
struct coord_cache_numbers {
    uint64_t hits, misses, tokens_reused, tokens_prefilled, saves, load_failures;
    uint64_t ram_entries, ram_bytes, disk_entries, disk_bytes;
};
int coord_cache_open(struct coord *c, char *err, size_t errlen);
void coord_cache_close(struct coord *c);
const char *coord_cache_identity(const struct coord *c);
bool coord_cache_match(struct coord *c, const int32_t *ids, size_t n, int chunk, uint32_t *id, int64_t *pos, bool *anywhere);
bool coord_cache_has(const struct coord *c, const int32_t *ids, int64_t n);
int64_t coord_cache_cut(const struct coord *c, size_t n, int chunk, int64_t from);
uint32_t coord_cache_new_id(struct coord *c);
int coord_cache_saved(struct coord *c, uint32_t id, const int32_t *ids, int64_t n, int chunk, const int32_t *answer,
                      uint32_t bytes, char *err, size_t errlen);
bool coord_cache_evict(struct coord *c, uint32_t *id, bool *file);
void coord_cache_forget(struct coord *c, uint32_t id);
void coord_cache_ram_lost(struct coord *c); /* the gpu-worker died: only the files remain */
void coord_cache_count(struct coord *c, bool hit, int64_t reused, int64_t prefilled);
struct coord_cache_numbers coord_cache_numbers(const struct coord *c);

/* util.c */
double coord_now(void);
/* dst = DIR/NAME; NB_EINVAL when it does not fit. */
int coord_path(char *dst, size_t len, const char *dir, const char *name);


/* cpu_plan.c: the cpu-moe-worker's threads and whether the workers spin
 * while they wait, from nproc, --threads (0: not given), the environment's
 * OMP_NUM_THREADS and OMP_WAIT_POLICY (NULL: unset) and the gpu-worker's
 * backend.  The rule and its reasons are at the top of cpu_plan.c. */
#define COORD_RING_SPIN_US 5000u
struct coord_cpu_plan {
    int moe_threads;       /* configure's threads for the cpu-moe-worker (0: its OpenMP default) */
    bool moe_spin;         /* its OpenMP team keeps libgomp's bounded spin */
    uint32_t ring_spin_us; /* both workers' ring waits (0: the rings' default) */
};
void coord_cpu_plan(int nproc, int threads, const char *omp_num_threads, const char *omp_wait_policy, bool gw_cuda,
                    struct coord_cpu_plan *p);

/* context.c: the positions a request may use — the model's context, or the
 * placement's vram_ctx where the gpu-worker runs CUDA under it and it is less;
 * asked (--ctx, 0: not given) instead of vram_ctx, on either backend. */
int64_t coord_context_limit(int64_t n_ctx_train, int64_t vram_ctx, bool gw_cuda, int64_t asked);

/* workers.c */
int coord_workers_init(struct coord *c, char *err, size_t errlen);
int coord_spawn(struct coord *c, struct coord_worker *w);
void coord_on_worker_msg(struct coord *c, const char *peer, const cJSON *msg);
/* control.sock has messages (its fd event, and before each poll). */
void coord_workers_serve(struct coord *c);
/* Reaps, restarts, checks deadlines: the loop's 100 ms timer. */
void coord_supervise(struct coord *c);
struct coord_worker *coord_worker_by_role(struct coord *c, const char *role);
/* Kills the worker (SIGKILL); supervision restarts it. */
void coord_restart(struct coord *c, struct coord_worker *w);
void coord_stop_workers(struct coord *c);
const char *coord_wstate_name(enum coord_wstate s);

/* control.c */
/* Reads and answers ctl.sock's requests while none is open (REP). */
void coord_ctl_serve(struct coord *c);
/* The open request's answer (a generate's, a restart's): sent, consumed. */
void coord_ctl_answer(struct coord *c, cJSON *reply);
void coord_ctl_on_workers(struct coord *c); /* a waiting restart may be answered */
void coord_ctl_on_idle(struct coord *c);    /* no request runs: a waiting restart may begin */
void coord_ctl_close(struct coord *c);      /* teardown: the open request gets an error */

enum { COORD_SPEC_OFF = 0, COORD_SPEC_MTP = 1, COORD_SPEC_LOOKUP = 2, COORD_SPEC_AUTO = 3 };

/* main.c: the step ring's geometry for this model and prefill chunk. */
struct ring_geometry coord_step_geometry(const struct model *m, int chunk);

/* generate.c: ctl's generate → a request.  Returns the reply when it is
 * known at once (an error), else NULL: reply() gets it when the request is
 * done. */
typedef void (*coord_reply_fn)(struct coord *c, cJSON *reply);
cJSON *coord_generate(struct coord *c, const cJSON *req, coord_reply_fn reply);

/* step.c: the step ring as an fd event.  send publishes a RESET or EVAL (the
 * last row's logits, or with argmax only their argmax); when the fd is
 * readable, take gives the answer (false: none yet, or one given up on). */
struct coord_step_reply {
    int rc;                  /* the ring failed: err says how */
    uint32_t flags, payload_bytes;
    const void *payload;     /* valid until the next send */
    char err[256];
};
int coord_step_open(struct coord *c, char *err, size_t errlen);
void coord_step_close(struct coord *c);
int coord_step_fd(const struct coord *c);
/* flags: STEP_FLAG_ARGMAX, STEP_FLAG_WIDE (gpu-worker/step_proto.h) */
int coord_step_send(struct coord *c, uint32_t op, const int32_t *ids, int n, uint32_t flags, char *err, size_t errlen);
bool coord_step_take(struct coord *c, struct coord_step_reply *r);
void coord_step_abandon(struct coord *c); /* the answer in flight is dropped when it comes */

/* requests.c: the request queue.  A request is a core/gen session plus its
 * owner's callbacks: on_start (its turn; non-zero: it was cancelled while
 * queued), on_prefill after each prefill step and on_token after each
 * sampled token that is not a stop id (non-zero: end it now, why "hook"),
 * on_done once, always (res: the outcome, NULL if it never ran). */
struct gen_result;
struct coord_outcome {
    int rc;                        /* 0, or NB_EIO with err */
    bool cancelled;                /* shutdown ended it */
    const struct gen_result *res;
    size_t n_prompt;
    size_t n_cached;               /* prompt ids a prompt-cache checkpoint held (not evaluated again) */
    const char *err;
};
struct coord_request_ops {
    int (*on_start)(void *ctx);
    int (*on_prefill)(void *ctx, size_t done, size_t total);
    int (*on_token)(void *ctx, long long i, int32_t id);
    void (*on_done)(void *ctx, const struct coord_outcome *o);
    /* Optional: once the prompt cache's lookup is settled, before the prefill's first step: the prompt ids a
     * checkpoint holds (0: none; called again, with 0, when that checkpoint did not load; per attempt). */
    void (*on_cached)(void *ctx, size_t n_cached);
    /* With spec.want_logits: just before on_token, the row token i was sampled from (n_vocab raw logits). */
    void (*on_logits)(void *ctx, long long i, int32_t id, const float *row);
};
/* chunk: prefill tokens per step (≤ 0 or more than --chunk: --chunk);
 * ignore_stop: stop ids do not end it; logits_out: NULL or an absolute path
 * for the sampled rows.  The ids are copied. */
struct coord_request_spec {
    const int32_t *ids;
    size_t n;
    struct sampling_params sp;
    long long budget;
    const char *logits_out;
    int chunk;
    bool ignore_stop;
    bool no_cache;     /* neither resumed from nor saved in the prompt cache (cache_prompt false) */
    bool no_end_ckpt;  /* no checkpoint at the end: no next prompt extends the answer's tokens (a chat without tools:
                        * its history renders the answer without the generation prompt's think block) */
    bool want_logits;  /* every token's full row of logits (ops.on_logits): no argmax shortcut */
    const gram_grammar *grammar;   /* structured output (core/grammar), borrowed until on_done; NULL: none */
    const char *grammar_key;       /* its response_format's text (api_format.c): the matcher cache's key; NULL: not cached */
    int32_t constrain_after;       /* the grammar applies after this id (</think>); -1: from the first token */
    int accuracy_level;            /* the verify windows' acceptance (core/gen/spec.h; 0: exact); --spec off: exact */
};
/* Queues it (0), or fails at once (the session could not be made). */
int coord_request_submit(struct coord *c, const struct coord_request_spec *s, const struct coord_request_ops *ops, void *ctx,
                         char *err, size_t errlen);
int coord_request_chunk(const struct coord *c, int asked); /* the prefill tokens per step a spec's chunk gets */
bool coord_requests_busy(const struct coord *c); /* one runs (past waiting for the workers) */
void coord_requests_on_step(struct coord *c);    /* the step fd is readable */
void coord_requests_on_workers(struct coord *c); /* a worker's state changed */
void coord_requests_cancel_all(struct coord *c, const char *why);

/* grammars.c: the matcher for a spec's grammar — the cached one of its key
 * when not lent (*slot its entry), else a new one (*slot -1); the
 * vocabulary's trie is built at the first call.  Give it back when the
 * request ends.  0 or an error with the message. */
int coord_grammar_take(struct coord *c, const struct coord_request_spec *s, int32_t n_vocab, const int32_t *stop_ids, int n_stop,
                       gram_matcher **m, int *slot, char *err, size_t errlen);
void coord_grammar_give(struct coord *c, gram_matcher *m, int slot);
void coord_grammars_free(struct coord *c); /* shutdown: the entries and the trie */

#endif
