/* worker.h — a worker's side of the control plane, and the one definition of
 * the `configure` message (docs/PIPELINE.md, "Control messages").
 *
 * Every worker process runs the same conversation with the coordinator:
 * connect a DEALER named by its role, send hello, wait for configure, set
 * itself up, send ready, then heartbeat every second until shutdown.  The
 * key idea: after ready, one thread of the worker owns the socket (heartbeats
 * out, shutdown in) and the serving loop only polls a flag, so control never
 * waits behind a ring and a ring never waits behind control.  The configure
 * fields live in struct ctl_configure and its two converters, used by the
 * coordinator (or a test) to build the message and by workers to read it. */
#ifndef NB_CTL_WORKER_H
#define NB_CTL_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#define CTL_PATH_MAX 1024

/* Fields of `configure`.  Each ring pair lies in the region of its name
 * ("moe", "pager") at the given byte offset. */
struct ctl_configure {
    char instance[32];             /* shm instance id */
    char model[CTL_PATH_MAX];      /* the input GGUF ("" if the worker needs none) */
    char mtp[CTL_PATH_MAX];        /* a separate MTP GGUF for the model ("": the model file's own, or none) */
    char prepared[CTL_PATH_MAX];   /* the nebula-prepare directory */
    char placement[CTL_PATH_MAX];  /* placement.json ("": PREPARED/placement.json; none without PREPARED) */
    int threads;                   /* compute threads (0: the worker's default) */
    uint32_t ring_spin_us;         /* a ring wait spins this long before it sleeps (0: the ring's default) */
    uint32_t stats_worker;         /* this worker's block in the stats region */
    uint64_t moe_offset;           /* ring pair `moe` in region "moe" */
    uint64_t pager_offset;         /* ring pair `pager` in region "pager" */
    uint64_t staging_slot_bytes;   /* region "staging": slot s at s · staging_slot_bytes */
    uint32_t staging_slots;        /* slots in the region */
    uint32_t staging_first;        /* this worker's slots, when it is a pager client */
    uint32_t staging_count;
    /* The compute settings, each one a coordinator flag (docs/RUNNING.md),
     * carried here rather than in the environment so that a restarted worker
     * gets the same.  All are the gpu-worker's but kernels, which the
     * cpu-moe-worker reads too (its own: --cpu-kernels); the pager ignores them. */
    char backend[16];              /* "cpu" or "cuda" ("": cpu) */
    char kernels[16];              /* matrix kernels of this worker, "ref" or "fast" ("": the worker's default) */
    uint64_t vram_budget;          /* device-memory cap in bytes (0: placement.json's request.vram_budget, else none) */
    int64_t n_ctx;                 /* positions to reserve K/V for (0: placement.json's request.vram_ctx, else the model's) */
    bool layer_times;              /* time each layer (nebulactl profile): a synchronisation per layer on cuda */
    uint32_t stream_rows;          /* a prefill piece of more rows streams its RAM-tier experts (cuda; 0: the
                                    * backend's GW_STREAM_MIN_ROWS): engine.prefill_stream_rows */
    /* the adaptive slot cache (nebula.conf [slots]; engine/slot_policy.h); optional: slots_every 0 sends
     * none, and a configure without them keeps the slots static */
    bool slots_adaptive;
    uint32_t slots_every, slots_swaps;
    double slots_decay, slots_hysteresis;
    char cache_dir[CTL_PATH_MAX];  /* the prompt cache's spill directory ("": checkpoints in RAM only); optional */
    char cache_identity[512];      /* what its files must say made them (core/kvfile); optional */
};

/* configure → JSON ({"type": "configure", ...}); NULL when out of memory. */
cJSON *ctl_configure_to_json(const struct ctl_configure *c);
/* JSON → configure; NB_EFORMAT naming the first missing or bad field. */
int ctl_configure_parse(const cJSON *msg, struct ctl_configure *c, char *err, size_t errlen);

typedef struct ctl_worker ctl_worker;

/* Connects to endpoint as `role`, sends hello {role, pid, version} and waits
 * up to timeout_ms for configure, then starts the heartbeat thread
 * (heartbeat {role, t} every second, during the worker's setup too; a
 * shutdown message sets the stop flag, and so does the death of the process
 * that started the worker: a worker never outlives its coordinator, which
 * ZeroMQ alone would not tell it).  A shutdown instead of configure is
 * NB_EINVAL with err "shutdown". */
int ctl_worker_start(const char *endpoint, const char *role, int timeout_ms, ctl_worker **out,
                     struct ctl_configure *conf, char *err, size_t errlen);
/* Sends ready {role}: setup is done. */
int ctl_worker_ready(ctl_worker *w, char *err, size_t errlen);
/* The serving loop every worker runs after ready: calls turn(ctx) until
 * shutdown.  A turn serves at most one request and returns 0 (also when it
 * found none within its short wait, so the stop flag is seen); an error
 * ends the loop: it is logged, sent as error {role, message}, and returned. */
typedef int (*ctl_worker_turn)(void *ctx, char *err, size_t errlen);
int ctl_worker_serve(ctl_worker *w, ctl_worker_turn turn, void *ctx);
/* Sends error {role, message} (thread-safe). */
void ctl_worker_error(ctl_worker *w, const char *message);
/* True once shutdown arrived (or the worker asked to stop). */
bool ctl_worker_stopping(const ctl_worker *w);
void ctl_worker_request_stop(ctl_worker *w);
/* Stops the thread, closes the socket and ends ZeroMQ (ctl_term). */
void ctl_worker_close(ctl_worker *w);

/* The whole life of a worker process once its flags are read, the same for
 * every worker: ctl_worker_start, setup(ctx), ready (then on_ready(ctx),
 * where given), ctl_worker_serve until shutdown, teardown(ctx) whether or
 * not setup got through, ctl_worker_close.  conf is where configure goes
 * (setup reads it, usually inside ctx).  A failure to connect is logged
 * ("control: ..."), one of setup or ready logged ("setup: ...") and sent as
 * error.  Returns the process's exit status: 0, or 1 after any failure. */
struct ctl_worker_life {
    int (*setup)(void *ctx, char *err, size_t errlen);
    void (*on_ready)(void *ctx); /* may be NULL */
    ctl_worker_turn turn;
    void (*teardown)(void *ctx);
};
int ctl_worker_run(const char *endpoint, const char *role, int timeout_ms, struct ctl_configure *conf,
                   const struct ctl_worker_life *life, void *ctx);

#endif
