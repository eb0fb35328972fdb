/* main.c — nebula-gpu-worker: the process around a gpu-worker backend.
 *
 * Started by the coordinator with the control endpoint; everything else comes
 * in the configure message (docs/PIPELINE.md): hello → configure → ready, then
 * a heartbeat every second.  It serves the `step` ring (EVAL: tokens → logits
 * of the last row; RESET) with one sequence, and, when the placement leaves
 * experts outside the VRAM tier, installs the remote hook that sends them to
 * the cpu-moe-worker over the `moe` ring (remote.c); when it puts the PLE
 * table on SSD, the rows hook that asks the ssd-pager for them over the
 * `pager-gw` ring into staging (ple_pager.c).  One thread: it waits on
 * the step ring in short slices and looks at the control socket in between,
 * so a heartbeat is late only while an eval runs (the coordinator, which is
 * waiting for that eval, knows). */
#include "core/ctl/ctl.h"
#include "core/ctl/worker.h"
#include "core/model/model.h"
#include "core/prepared/prepared.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "engine/ffn.h"
#include "engine/vram.h"
#include "gpu-worker/proc/gw_proc.h"
#include "gpu-worker/step_proto.h"
#include "core/util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROLE "gpu-worker"
#define STATS_KIND_GPU 1u

struct gwp {
    ctl_sock *ctl;
    struct model *m;
    gw_backend *be;
    gw_seq *seq;
    uint8_t *local;
    uint64_t *ssd_blob; /* per (block, expert): blob bytes if SSD-tier */
    struct shm_region step_reg, moe_reg, stats_reg, staging_reg, pager_gw_reg;
    struct ring_pair step;
    int step_fd; /* --step-fd: an eventfd written after each step answer (coordinator/step.c), or -1 */
    struct gwp_moe_client moe;
    struct gwp_arena arena; /* the RAM arena, streamed by prefill chunks (arena.c) */
    struct gwp_spec spec;   /* speculative decoding's state (spec.c) */
    struct gwp_cache cache; /* the prompt cache's checkpoints (cache.c) */
    struct gwp_ple_client ple;
    struct gw_ple_host ple_host; /* the n-gram table kept in host memory (cuda, ple_tier ram or ssd) */
    bool have_moe, have_ple, ple_detached;
    shm_stats *stats;
    uint32_t block;
    uint64_t slots_pub[6]; /* the slot counters published so far (publish_slots) */
    bool slots_adaptive;   /* configure's slots.adapt: the arena's blobs are installed at the first eval */
    uint64_t layer_t0; /* per-layer timing through the layer tap */
    bool layer_times;  /* take it (configure's layer_times) */
    /* Flags given by hand (tests, a worker run alone); each one, where given,
     * overrides the configure field of the same name. */
    const char *backend;  /* --backend (NULL: configure's, else "cpu") */
    const char *kernels;  /* --kernels (NULL: configure's, else the backend's default, fast) */
    uint64_t vram_budget; /* --vram-budget (0: configure's, else the placement's, else none) */
    int64_t n_ctx;        /* --ctx: positions the budget reserves K/V for (0: configure's, else the placement's, model's) */
};

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig, stop_requested = 1; }

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula-gpu-worker --control ENDPOINT [--backend cpu|cuda] [--kernels ref|fast]\n"
               "                         [--vram-budget BYTES] [--ctx N] [--step-fd FD]\n"
               "       nebula-gpu-worker --probe cpu|cuda\n"
               "\n"
               "A worker of the Nebula pipeline, started by nebula-coordinator: it connects to the\n"
               "coordinator's control socket (ipc://RUNDIR/control.sock), says hello and waits for\n"
               "its configuration (model, placement, shared-memory regions).  Not run by hand.\n"
               "The coordinator's --backend, --kernels, --vram-budget, --ctx and --layer-times come in\n"
               "the configure message; the flags here, where given, override them.\n"
               "--backend picks the compute backend (default cpu); cuda\n"
               "runs the forward pass on the GPU and fails the configuration where there is none.\n"
               "--step-fd: an inherited eventfd the worker writes after each step answer it\n"
               "publishes (the coordinator's loop polls it; the ring's doorbell is a futex).\n"
               "--kernels picks its matrix kernels (default fast: fp32,\n"
               "within 1e-6 of the CPU reference; ref: bit-faithful to it, for parity checks).\n"
               "--vram-budget (like 80G) caps its device memory:\n"
               "dense weights + MTP + K/V for --ctx positions (default: placement.json's\n"
               "request.vram_ctx, else the model's context) + the VRAM-tier experts + scratch must\n"
               "fit, or the configuration fails naming each part.  Without it, placement.json's\n"
               "request.vram_budget (nebula-prepare --vram-budget: the whole device budget) is the cap.\n"
               "--probe KIND says whether that backend can run on this machine (exit 0) or why not\n"
               "(exit 1): deploy/start.sh --backend auto uses it.\n"
               "Time per layer (nebulactl profile) is taken on the CPU backend; on cuda only when\n"
               "configured so (nebula-coordinator --layer-times): it costs a synchronisation per layer\n"
               "and the CUDA graph.\n");
}

static int send_simple(struct gwp *w, const char *type, const char *message)
{
    char err[256];
    cJSON *m = ctl_msg(type);
    cJSON_AddStringToObject(m, "role", ROLE);
    if (message) cJSON_AddStringToObject(m, "message", message);
    if (!strcmp(type, "hello")) {
        cJSON_AddNumberToObject(m, "pid", getpid());
        cJSON_AddNumberToObject(m, "version", CTL_PROTOCOL_VERSION);
    }
    if (!strcmp(type, "heartbeat")) cJSON_AddNumberToObject(m, "t", (double)nb_now_ns() / 1e9);
    int rc = ctl_send(w->ctl, NULL, m, err, sizeof err);
    cJSON_Delete(m);
    if (rc) nb_log("cannot send %s: %s", type, err);
    return rc;
}

/* ---- time per layer ----
 *
 * Through the layer tap, a host call after each layer: free on the CPU
 * backend, but on the GPU it costs a synchronisation per layer and the
 * decode step's CUDA graph, so there it is taken only when asked
 * (configure's layer_times: nebula-coordinator --layer-times, for
 * `nebulactl profile`).  The VRAM hits and misses need no tap: the pairs the
 * backend computed are the hits (gw_backend_experts_computed), the rest of k
 * per row and layer missed. */

static void layer_tap(void *ctx, int layer, int n_tokens, const float *wide)
{
    struct gwp *w = ctx;
    (void)n_tokens, (void)wide;
    uint64_t t = nb_now_ns();
    shm_stats_add_layer(w->stats, w->block, (uint32_t)layer, t - w->layer_t0);
    w->layer_t0 = t;
}

/* The backend's peak device memory into the stats block (a high-water mark: raised by adds). */
static void publish_vram(struct gwp *w)
{
    uint64_t peak = gw_backend_vram_bytes(w->be), cur = shm_stats_get(w->stats, w->block, SHM_STAT_VRAM_PEAK_BYTES);
    if (peak > cur) shm_stats_add(w->stats, w->block, SHM_STAT_VRAM_PEAK_BYTES, peak - cur);
}

/* The slot cache's counters since the last call into the stats block (adds of what changed). */
static void publish_slots(struct gwp *w)
{
    struct gw_slot_stats s;
    gw_backend_slot_stats(w->be, &s);
    const uint64_t now[6] = {s.selections, s.hits, s.static_hits, s.swaps, s.bytes, s.waited};
    static const enum shm_stat at[6] = {SHM_STAT_SLOT_SELECTIONS, SHM_STAT_SLOT_HITS, SHM_STAT_SLOT_STATIC_HITS,
                                        SHM_STAT_SLOT_SWAPS, SHM_STAT_SLOT_BYTES, SHM_STAT_SLOT_WAITED};
    for (int i = 0; i < 6; i++)
        if (now[i] > w->slots_pub[i]) shm_stats_add(w->stats, w->block, at[i], now[i] - w->slots_pub[i]), w->slots_pub[i] = now[i];
}

/* ---- configure ---- */

static int open_regions(struct gwp *w, const char *inst, int64_t n_remote, char *err, size_t errlen)
{
    int rc = shm_region_open(inst, "step", &w->step_reg, err, errlen);
    if (!rc) rc = ring_pair_attach(&w->step, &w->step_reg, 0, RING_SERVER, NULL, err, errlen);
    if (!rc) rc = shm_region_open(inst, "stats", &w->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_open(&w->stats, &w->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_claim(w->stats, w->block, ROLE, STATS_KIND_GPU, err, errlen);
    if (rc || n_remote == 0) return rc;
    if ((rc = shm_region_open(inst, "moe", &w->moe_reg, err, errlen))) return rc;
    if ((rc = gwp_moe_client_open(&w->moe, &w->moe_reg, w->m, err, errlen))) return rc;
    w->have_moe = true;
    w->moe.stats = w->stats, w->moe.stats_block = w->block, w->moe.ssd_blob = w->ssd_blob;
    struct gw_moe_remote r = {.local = w->local, .fn = gwp_moe_remote, .ctx = &w->moe};
    return gw_backend_set_moe_remote(w->be, &r, err, errlen);
}

/* The PLE table on SSD: staging slots (configure's "staging") and the
 * `pager-gw` ring pair, then the rows hook. */
static int open_ple_pager(struct gwp *w, const struct ctl_configure *c, char *err, size_t errlen)
{
    if (!c->prepared[0] || !c->staging_count)
        return nb_errf(err, errlen, NB_EINVAL, "the PLE table is on SSD but configure lacks prepared or staging");
    int rc = shm_region_open(c->instance, "staging", &w->staging_reg, err, errlen);
    if (!rc) rc = shm_region_open(c->instance, "pager-gw", &w->pager_gw_reg, err, errlen);
    struct gwp_ple_config cfg = {c->prepared, &w->pager_gw_reg, &w->staging_reg, c->staging_slot_bytes,
                                 c->staging_first, c->staging_count};
    if (!rc) rc = gwp_ple_client_open(&w->ple, &cfg, w->m, w->ple_detached ? &w->ple_host : NULL, err, errlen);
    if (rc) return rc;
    w->have_ple = true;
    w->ple.stats = w->stats, w->ple.stats_block = w->block;
    struct gw_ple_rows r = {gwp_ple_rows, &w->ple};
    return gw_backend_set_ple_rows(w->be, &r, err, errlen);
}

static int configure(struct gwp *w, const cJSON *msg, char *err, size_t errlen)
{
    struct ctl_configure c;
    int rc = ctl_configure_parse(msg, &c, err, errlen);
    if (rc) return rc;
    if (!c.model[0]) return nb_errf(err, errlen, NB_EINVAL, "configure names no model");
    const char *backend = w->backend ? w->backend : c.backend[0] ? c.backend : "cpu";
    const char *kernels = w->kernels ? w->kernels : c.kernels[0] ? c.kernels : NULL;
    const uint64_t budget = w->vram_budget ? w->vram_budget : c.vram_budget;
    const int64_t n_ctx = w->n_ctx > 0 ? w->n_ctx : c.n_ctx;
    enum gw_kernels k;
    if (kernels && gw_kernels_parse_matrix(kernels, &k))
        return nb_errf(err, errlen, NB_EINVAL, "configure: kernels \"%s\": want ref or fast", kernels);
    w->block = c.stats_worker, w->layer_times = c.layer_times;
    if ((rc = model_open_mtp(c.model, c.mtp, &w->m, err, errlen))) return rc;
    char mtp_line[1200];
    model_mtp_describe(w->m, mtp_line, sizeof mtp_line);
    nb_log("%s", mtp_line);
    /* The placement (core/prepared reads it), when there is one. */
    int64_t n_remote = 0;
    struct prepared_idx x = {0};
    struct prepared_placement pl = {0};
    const bool placed = c.placement[0] != 0;
    if (placed && (rc = prepared_plan_load(c.prepared, c.placement, &x, &pl, err, errlen))) return rc;
    rc = gwp_placement_maps(placed ? &x : NULL, &pl, w->m, &w->local, &w->ssd_blob, &n_remote, err, errlen);
    if (!rc) rc = gwp_arena_open(&w->arena, c.instance, placed ? &x : NULL, &pl, w->m, err, errlen);
    w->arena.stream_rows = (int)c.stream_rows;
    const bool ple_ssd = pl.ple_ssd, ple_vram = pl.ple_vram, arena_vram = pl.arena_vram;
    const uint64_t placement_budget = pl.vram_budget;
    const int64_t placement_ctx = pl.vram_ctx;
    prepared_placement_free(&pl);
    prepared_idx_free(&x);
    if (rc) return rc;
    /* The n-gram table on a CUDA backend: in host memory unless the placement
     * says "vram" (engine/backend.h gw_ple_host: its rows are read there, a
     * token's few rows copied up), so neither uploaded nor counted. */
    if (!strcmp(backend, "cuda") && w->m->ple_table.data && !ple_vram) {
        gw_ple_host_detach(w->m, &w->ple_host);
        w->ple_detached = true;
    }
    /* The experts it computes are known before the backend exists: only those
     * are uploaded.  K/V for --ctx, else the context the placement reserved. */
    struct gw_vram_parts plan;
    gw_vram_plan(w->m, w->local, n_ctx > 0 ? n_ctx : placement_ctx, &plan);
    /* the experts adaptive slots may move: those the RAM arena holds (the cpu-moe-worker computes them once they leave) */
    const size_t n_map = (size_t)(w->m->hp.n_layer + w->m->hp.n_nextn) * (size_t)w->m->hp.n_expert;
    uint8_t *movable = c.slots_adaptive && w->arena.blob ? malloc(n_map) : NULL;
    for (size_t i = 0; movable && i < n_map; i++) movable[i] = w->arena.blob[i] != NULL;
    struct gw_backend_params bp = {.kind = backend,
                                   .n_threads = c.threads,
                                   .kernels = kernels,
                                   .local = w->local,
                                   .vram_budget = gw_vram_worker_budget(budget, placement_budget, placement_ctx > 0, &plan),
                                   .n_ctx = plan.n_ctx,
                                   .slots_adaptive = c.slots_adaptive,
                                   .slots = {(int)c.slots_every, c.slots_decay, (int)c.slots_swaps, c.slots_hysteresis},
                                   .slots_movable = movable};
    rc = gw_backend_create(w->m, &bp, &w->be, err, errlen);
    free(movable);
    if (rc) return rc;
    w->slots_adaptive = c.slots_adaptive;
    if (c.slots_adaptive)
        nb_log("slots adaptive (a round every %u tokens, up to %u swaps a layer, decay %g, hysteresis %g): %s", c.slots_every,
               c.slots_swaps, c.slots_decay, c.slots_hysteresis,
               arena_vram ? "the arena holds every slot's expert, so every one can move"
                          : "only experts with a copy in the RAM arena move, and the placement's VRAM tier has none "
                            "(nebula-prepare --arena-vram on gives them one)");
    if ((rc = gw_seq_create(w->be, &w->seq, err, errlen))) return rc;
    if ((rc = gwp_cache_open(&w->cache, c.cache_dir, c.cache_identity, err, errlen))) return rc;
    if ((rc = open_regions(w, c.instance, n_remote, err, errlen))) return rc;
    /* The answer of the cpu-moe-worker comes within a millisecond or so: when
     * the coordinator found a core for it (coordinator/cpu_plan.c), wait
     * spinning that long instead of being woken by a futex. */
    if (w->have_moe && c.ring_spin_us >= 1) ring_set_spin_ns(w->moe.rp.resp, (uint64_t)c.ring_spin_us * 1000ull);
    publish_vram(w);
    publish_slots(w);
    if (ple_ssd && (rc = open_ple_pager(w, &c, err, errlen))) return rc;
    if (!ple_ssd && w->ple_detached) {
        struct gw_ple_rows r = {gw_ple_host_rows, &w->ple_host};
        if ((rc = gw_backend_set_ple_rows(w->be, &r, err, errlen))) return rc;
    }
    /* the arena's page-locking takes seconds for tens of GiB: now if it is loaded already, else at the first prefill */
    if ((rc = gwp_arena_ready(&w->arena, w->be, err, errlen))) return rc;
    nb_log("configured: model %s, %s backend (kernels %s), %lld experts remote%s, PLE table %s, %d threads%s", c.model,
           bp.kind, kernels ? kernels : "default", (long long)n_remote, placed ? "" : " (no placement: all local)",
           ple_ssd ? "on SSD" : w->ple_detached || strcmp(bp.kind, "cuda") ? "in RAM" : "in VRAM", bp.n_threads, w->layer_times ? ", time per layer" : "");
    if (bp.vram_budget || gw_backend_vram_bytes(w->be))
        nb_log("VRAM: budget %.1f MiB (0: none) for %lld positions, %.1f MiB in use after loading",
               (double)bp.vram_budget / 1048576.0, (long long)plan.n_ctx, (double)gw_backend_vram_bytes(w->be) / 1048576.0);
    return 0;
}

/* ---- the step server ---- */

/* Serves one request into the reserved response slot. */
static int serve_one(struct gwp *w, const struct ring_slot *req, struct ring_slot *resp, char *err, size_t errlen)
{
    uint32_t op = req->hdr->layer, n = req->hdr->n_tokens;
    resp->hdr->n_tokens = 0, resp->hdr->payload_bytes = 0;
    if (op == STEP_RESET) {
        gw_seq_reset(w->seq);
        gwp_spec_reset(&w->spec);
        return 0;
    }
    if (op == STEP_SAVE || op == STEP_LOAD || op == STEP_DROP) {
        uint64_t t0 = nb_now_ns();
        if (op == STEP_LOAD) gwp_spec_reset(&w->spec);
        int rc = gwp_cache_serve(&w->cache, w->seq, req, resp, err, errlen);
        shm_stats_add(w->stats, w->block, SHM_STAT_BUSY_NS, nb_now_ns() - t0);
        return rc;
    }
    if (op == STEP_SPEC) {
        uint64_t t0 = nb_now_ns();
        int rc = gwp_spec_serve(&w->spec, w->be, w->seq, req, resp, err, errlen);
        shm_stats_add(w->stats, w->block, SHM_STAT_BUSY_NS, nb_now_ns() - t0);
        if (rc == 0) shm_stats_add(w->stats, w->block, SHM_STAT_TOKENS, resp->hdr->n_tokens);
        publish_slots(w);
        return rc;
    }
    if (op != STEP_EVAL || n == 0 || req->hdr->payload_bytes < n * 4)
        return nb_errf(err, errlen, NB_EINVAL, "bad step request (op %u, %u tokens)", op, n);
    const int32_t *ids = req->payload;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->m->hp.n_vocab) return nb_errf(err, errlen, NB_EINVAL, "token %d out of vocabulary", ids[i]);
    /* a prefill chunk streams the RAM-tier experts itself once the cpu-moe-worker has loaded them */
    /* the arena's blobs: what a long prefill streams, and where adaptive slots copy from */
    if (n > (uint32_t)gw_stream_min_rows(w->arena.stream_rows) || w->slots_adaptive) {
        int rc = gwp_arena_ready(&w->arena, w->be, err, errlen);
        if (rc) return rc;
    }
    const bool only_argmax = req->hdr->flags & STEP_FLAG_ARGMAX;
    struct gw_eval_args a = {.tokens = ids, .n_tokens = (int)n, .logits_rows = GW_ROWS_LAST,
                             .logits = only_argmax ? NULL : resp->payload, .tap = w->layer_times ? layer_tap : NULL,
                             .tap_ctx = w, .argmax = only_argmax ? (int32_t *)resp->payload : NULL};
    gwp_spec_reset(&w->spec);
    if (req->hdr->flags & STEP_FLAG_WIDE) { /* the first window's MTP input */
        if (!(a.wide = gwp_spec_wide(&w->spec, w->m))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        a.wide_rows = GW_ROWS_LAST;
    }
    uint64_t t0 = nb_now_ns(), computed0 = gw_backend_experts_computed(w->be), copied0 = gw_backend_bytes_copied(w->be);
    w->layer_t0 = t0;
    int rc = gw_eval(w->seq, &a, err, errlen);
    if (rc == 0 && a.wide) w->spec.have_wide = true;
    shm_stats_add(w->stats, w->block, SHM_STAT_BUSY_NS, nb_now_ns() - t0);
    const uint64_t hits = gw_backend_experts_computed(w->be) - computed0;
    const uint64_t pairs = (uint64_t)n * (uint64_t)w->m->hp.n_expert_used * (uint64_t)w->m->hp.n_layer;
    if (rc == 0) shm_stats_add(w->stats, w->block, SHM_STAT_EXPERTS_COMPUTED, hits);
    if (rc == 0) shm_stats_add(w->stats, w->block, SHM_STAT_EXPERT_HITS, hits);
    if (rc == 0) shm_stats_add(w->stats, w->block, SHM_STAT_EXPERT_MISSES, pairs > hits ? pairs - hits : 0);
    shm_stats_add(w->stats, w->block, SHM_STAT_TOKENS, n);
    shm_stats_add(w->stats, w->block, SHM_STAT_BYTES_COPIED, gw_backend_bytes_copied(w->be) - copied0);
    publish_vram(w);
    publish_slots(w);
    if (rc) return rc;
    resp->hdr->n_tokens = 1, resp->hdr->payload_bytes = only_argmax ? 4u : (uint32_t)(w->m->hp.n_vocab * 4);
    return 0;
}

/* Waits up to 100 ms for a request and answers it.  SHM_EPEER: the coordinator is gone. */
static int step_poll(struct gwp *w)
{
    char err[STEP_ERR_BYTES];
    struct ring_slot req, resp;
    int rc = ring_wait(w->step.req, &req, 100000000ull, err, sizeof err);
    if (rc == SHM_ETIMEDOUT) return 0;
    if (rc) return rc;
    if ((rc = ring_reserve(w->step.resp, &resp, RING_FOREVER, err, sizeof err))) return rc;
    resp.hdr->tag = req.hdr->tag, resp.hdr->flags = 0, resp.hdr->layer = req.hdr->layer;
    resp.hdr->n_experts = 0;
    if (serve_one(w, &req, &resp, err, sizeof err)) {
        nb_log("step %llu failed: %s", (unsigned long long)req.hdr->tag, err);
        shm_stats_add(w->stats, w->block, SHM_STAT_ERRORS, 1);
        snprintf(resp.payload, STEP_ERR_BYTES, "%s", err);
        resp.hdr->flags = RING_FLAG_ERROR, resp.hdr->n_tokens = 0;
        resp.hdr->payload_bytes = (uint32_t)strlen(err) + 1;
    }
    shm_stats_add(w->stats, w->block, SHM_STAT_STEPS, 1);
    shm_stats_add(w->stats, w->block, SHM_STAT_RING_MESSAGES, 2);
    if ((rc = ring_release(w->step.req, err, sizeof err)) || (rc = ring_publish(w->step.resp, err, sizeof err)))
        nb_log("step ring: %s", err);
    const uint64_t one = 1;
    if (!rc && w->step_fd >= 0 && write(w->step_fd, &one, sizeof one) != (ssize_t)sizeof one)
        nb_log("--step-fd %d: cannot write: %s", w->step_fd, strerror(errno));
    return rc;
}

/* Control messages waiting now; returns 1 on shutdown. */
static int control_poll(struct gwp *w, int timeout_ms)
{
    cJSON *m;
    char err[256];
    while (ctl_recv(w->ctl, timeout_ms, NULL, 0, &m, err, sizeof err) == 0) {
        const char *t = ctl_type(m);
        int stop = !strcmp(t, "shutdown");
        if (!strcmp(t, "configure")) send_simple(w, "ready", NULL); /* already configured: a resend */
        else if (!strcmp(t, "reset")) gw_seq_reset(w->seq);
        cJSON_Delete(m);
        if (stop) return 1;
        timeout_ms = 0;
    }
    return 0;
}

static int serve(struct gwp *w)
{
    uint64_t last_beat = 0;
    while (!stop_requested) {
        if (nb_now_ns() - last_beat >= 1000000000ull) send_simple(w, "heartbeat", NULL), last_beat = nb_now_ns();
        if (control_poll(w, 0)) {
            nb_log("shutdown requested");
            return 0;
        }
        int rc = step_poll(w);
        if (rc == SHM_EPEER) {
            nb_log("the coordinator left the step ring: exiting");
            return 1;
        }
        if (rc) return 1;
    }
    nb_log("signal: exiting");
    return 0;
}

/* Heartbeats while configure() runs (loading the model, uploading weights to
 * the GPU: seconds to minutes), so the coordinator tells a slow setup from a
 * hung one as it does for the other workers (core/ctl/worker.c).  configure()
 * does not touch the control socket, so this thread is its only user. */
struct setup_beat {
    struct gwp *w;
    atomic_bool done;
};

static void *setup_beat_main(void *arg)
{
    struct setup_beat *b = arg;
    for (int tick = 1; !atomic_load(&b->done); tick++) {
        usleep(100000);
        if (tick % 10 == 0 && !atomic_load(&b->done)) send_simple(b->w, "heartbeat", NULL);
    }
    return NULL;
}

/* hello, then wait for configure (30 s). */
static int handshake(struct gwp *w)
{
    char err[1024];
    cJSON *m = NULL;
    if (send_simple(w, "hello", NULL)) return 1;
    for (int waited = 0; waited < 30 && !stop_requested; waited++) {
        if (ctl_recv(w->ctl, 1000, NULL, 0, &m, err, sizeof err)) continue;
        int is_conf = !strcmp(ctl_type(m), "configure"), rc = 0;
        struct setup_beat beat = {w, false};
        pthread_t bt;
        const bool beating = is_conf && pthread_create(&bt, NULL, setup_beat_main, &beat) == 0;
        if (is_conf) rc = configure(w, m, err, sizeof err);
        if (beating) atomic_store(&beat.done, true), pthread_join(bt, NULL);
        if (is_conf && rc) {
            nb_log("configure failed: %s", err);
            send_simple(w, "error", err);
        }
        cJSON_Delete(m);
        if (is_conf) return rc ? 1 : send_simple(w, "ready", NULL);
    }
    nb_log("no configure message within 30 s");
    return 1;
}

static void teardown(struct gwp *w)
{
    ring_pair_detach(&w->step);
    if (w->have_moe) gwp_moe_client_close(&w->moe);
    if (w->have_ple) gwp_ple_client_close(&w->ple);
    shm_stats_close(w->stats);
    if (w->stats_reg.base) shm_region_close(&w->stats_reg);
    if (w->step_reg.base) shm_region_close(&w->step_reg);
    if (w->moe_reg.base) shm_region_close(&w->moe_reg);
    if (w->staging_reg.base) shm_region_close(&w->staging_reg);
    if (w->pager_gw_reg.base) shm_region_close(&w->pager_gw_reg);
    if (w->be && gw_backend_vram_bytes(w->be)) { /* measured vs the backend's own blocks, by the plan's parts */
        struct gw_vram_parts u;
        gw_backend_vram_used(w->be, &u);
        nb_log("VRAM: peak %.1f MiB measured; the backend's blocks at their peaks: dense %.1f + MTP %.1f + state, K/V and "
               "RoPE %.1f + slots %.1f + arena and pool %.1f MiB (the rest: the driver's pages and own)",
               gw_backend_vram_bytes(w->be) / 1048576.0, u.dense / 1048576.0, u.mtp / 1048576.0, u.kv / 1048576.0,
               u.slots / 1048576.0, u.scratch / 1048576.0);
    }
    gwp_cache_close(&w->cache); /* its queued files written first */
    if (w->seq) gw_seq_free(w->seq);
    if (w->be) gw_backend_free(w->be); /* before the arena goes: it may hold the arena page-locked */
    gwp_arena_close(&w->arena);
    gwp_spec_free(&w->spec);
    if (w->m) model_close(w->m);
    free(w->local);
    free(w->ssd_blob);
    ctl_close(w->ctl);
    ctl_term();
}

int main(int argc, char **argv)
{
    nb_log_set_name(ROLE);
    const char *endpoint = NULL, *backend = NULL, *kernels = NULL;
    uint64_t vram_budget = 0;
    long long n_ctx = 0;
    int step_fd = -1;
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        if (!strcmp(argv[i], "--probe") && i + 1 < argc) { /* can a backend of this kind run here? */
            int rc = gw_backend_probe(argv[i + 1], err, sizeof err);
            printf("%s: %s\n", argv[i + 1], err);
            return rc == 0 ? 0 : rc == NB_EINVAL ? 2 : 1;
        }
        if (!strcmp(argv[i], "--control") && i + 1 < argc) endpoint = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i][0] ? argv[i] : NULL;
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) {
            kernels = argv[++i];
            enum gw_kernels k;
            if (gw_kernels_parse_matrix(kernels, &k)) {
                fprintf(stderr, "nebula-gpu-worker: --kernels \"%s\": want ref or fast\n", kernels);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--vram-budget") && i + 1 < argc) {
            if (gw_vram_parse_bytes(argv[++i], &vram_budget, err, sizeof err)) {
                fprintf(stderr, "nebula-gpu-worker: --vram-budget: %s\n", err);
                return 2;
            }
        } else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            char *end;
            n_ctx = strtoll(argv[++i], &end, 10);
            if (*end || n_ctx <= 0) {
                fprintf(stderr, "nebula-gpu-worker: --ctx wants a positive number of positions\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--step-fd") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > 1 << 20 || fcntl((int)v, F_GETFD) < 0) {
                fprintf(stderr, "nebula-gpu-worker: --step-fd \"%s\": not an open file descriptor\n", argv[i]);
                return 2;
            }
            step_fd = (int)v;
        } else return usage(stderr), 2;
    }
    if (!endpoint) return usage(stderr), 2;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL), sigaction(SIGINT, &sa, NULL);
    struct gwp w = {0};
    w.arena.reg.fd = -1;
    w.backend = backend, w.kernels = kernels, w.vram_budget = vram_budget, w.n_ctx = n_ctx, w.step_fd = step_fd;
    if (ctl_open(CTL_DEALER, endpoint, ROLE, &w.ctl, err, sizeof err)) {
        nb_log("cannot connect to %s: %s", endpoint, err);
        return 1;
    }
    int rc = handshake(&w);
    if (!rc) nb_log("ready (pid %d)", (int)getpid()), rc = serve(&w);
    teardown(&w);
    return rc;
}
