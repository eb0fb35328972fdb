/* coord.h — the pieces of nebula-coordinator and the state they share.
 *
 * main.c: flags, the instance, runtime directory and regions, the event loop
 * and the teardown.  workers.c: spawning, handshake (hello → configure →
 * ready), heartbeats and restarts.  control.c: the ctl.sock requests of
 * nebulactl (status, stats, profile, restart, shutdown).  generate.c: the
 * generate request — tokenizer, chat template and sampling here, the model's
 * forward pass in the gpu-worker over the `step` ring.
 *
 * One thread talks to the workers.  coord_tick() is the loop's body: it
 * serves the control sockets and supervises the workers; long operations (a
 * generation, a restart) call it between their own waits so heartbeats keep
 * flowing.  The HTTP API (api.h) has threads of its own that hand jobs to
 * this one through a queue; the loop runs them (api_run_queued). */
#ifndef NB_COORD_H
#define NB_COORD_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include <cJSON.h>

#include "core/ctl/ctl.h"
#include "shm/shm.h"

struct model;
struct api;
typedef struct tok_tokenizer tok_tokenizer;

#define COORD_MAX_WORKERS 3
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
    /* the gpu-worker's and cpu-moe-worker's compute settings, sent in their
     * configure (core/ctl/worker.h; docs/RUNNING.md has the flags) */
    const char *backend;           /* --backend: "cpu" or "cuda" ("auto", the default, resolved at start) */
    const char *kernels;           /* --kernels: the CUDA matrix kernels ("": the backend's default, fast) */
    const char *cpu_kernels;       /* --cpu-kernels: the CPU experts' ("": fast beside cuda, else ref) */
    uint64_t vram_budget;          /* --vram-budget bytes (0: placement.json's) */
    int64_t ctx;                   /* --ctx: positions for a request and the K/V reserve (0: placement's, model's) */
    bool layer_times;              /* --layer-times: the gpu-worker times each layer on cuda too */
    bool gw_cuda;                  /* backend is cuda */
    /* the instance */
    shm_instance *inst;
    char rundir[PATH_MAX];
    bool rundir_made;
    struct shm_region step_reg, moe_reg, stats_reg, experts_reg, staging_reg, pager_reg, pager_gw_reg;
    struct ring_pair step;
    shm_stats *stats;
    ctl_sock *router, *rep;
    /* the model as the coordinator sees it: sizes and the tokenizer */
    struct model *m;
    tok_tokenizer *tok;
    struct coord_tiers tiers;
    int64_t n_ctx;                 /* positions a request may use (coord_context_limit) */
    /* workers */
    struct coord_worker w[COORD_MAX_WORKERS];
    int n_workers;
    double t_start;
    uint64_t next_tag;
    uint64_t deaths;               /* workers reaped so far: a request that failed while one died is retried once */
    bool step_in_flight;           /* the gpu-worker is busy for us: its heartbeats may be late */
    bool stop;                     /* shutdown requested */
    struct api *api;               /* the HTTP API (api.h); NULL with --http off */
    bool in_http_job;              /* the loop runs an HTTP job: ctl.sock is served from its ticks */
    cJSON *ctl_deferred;           /* a generate/restart received meanwhile, answered after the job */
    volatile int got_sigchld;
};

double coord_now(void);
/* dst = DIR/NAME; NB_EINVAL when it does not fit. */
int coord_path(char *dst, size_t len, const char *dir, const char *name);

/* main.c */
/* One round of the loop: waits up to timeout_ms for a control message, serves
 * it (ctl.sock when serve_ctl, or during an HTTP job all but generate and
 * restart, which wait for the loop), then supervises the workers. */
void coord_tick(struct coord *c, int timeout_ms, bool serve_ctl);

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
void coord_supervise(struct coord *c);
struct coord_worker *coord_worker_by_role(struct coord *c, const char *role);
/* Ticks until every worker is ready (or one failed for good); 0 or NB_EIO. */
int coord_wait_ready(struct coord *c, double timeout_s, char *err, size_t errlen);
/* Kills the worker (SIGKILL); supervision restarts it. */
void coord_restart(struct coord *c, struct coord_worker *w);
void coord_stop_workers(struct coord *c);
const char *coord_wstate_name(enum coord_wstate s);

/* control.c: one ctl.sock request → its reply (never NULL). */
cJSON *coord_handle_ctl(struct coord *c, const cJSON *req);

/* main.c: the step ring's geometry for this model and prefill chunk. */
struct ring_geometry coord_step_geometry(const struct model *m, int chunk);

/* generate.c: a generate request → result (or error) reply. */
cJSON *coord_generate(struct coord *c, const cJSON *req);

/* What a generation reports as it goes (the HTTP API's jobs).  chunk: prefill
 * tokens per step (≤ 0 or more than --chunk: --chunk); ignore_stop: stop
 * tokens do not end the generation.  on_prefill after each
 * prefill step (tokens done of total), on_token after each sampled token that
 * is not a stop token (i counts from 0); either returning non-zero ends the
 * generation at once, with *why = "hook". */
struct coord_hooks {
    int chunk;
    bool ignore_stop; /* stop tokens are generated like any other (benchmarks) */
    int (*on_prefill)(void *ctx, size_t done, size_t total);
    int (*on_token)(void *ctx, long long i, int32_t id);
    void *ctx;
};
struct sampling_params;
/* Prefill n ids, then sample up to budget tokens into out (budget + 1 slots),
 * stopping at a stop token (*why "stop token") or the budget ("length");
 * retried once from the start when a worker dies meanwhile.  logits_out:
 * NULL, or an absolute path for the sampled rows.  0 or NB_EIO. */
int coord_run(struct coord *c, const int32_t *ids, size_t n, const struct sampling_params *sp, long long budget,
              const char *logits_out, const struct coord_hooks *h, int32_t *out, long long *made, double *t_prompt,
              const char **why, char *err, size_t errlen);

#endif
