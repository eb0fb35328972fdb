/* control.c — the requests nebulactl (and `nebula generate --server`) send
 * to ctl.sock, each answered with one JSON object.
 *
 * Counters come from the stats region, which every worker writes and anyone
 * can read: status and stats never ask a worker anything, so they answer
 * while a worker is busy or restarting — and during a generation: an HTTP
 * job runs in the loop beside them.  ctl.sock is a REP socket, so one
 * request is open at a time: status, stats, profile and shutdown are answered
 * at once; a generate (queued with the HTTP jobs, requests.c) and a restart
 * (a state: it waits for the running request to end, kills the worker and
 * answers when the successor is ready) keep it open (ctl_pending) and are
 * answered from a later event, after which the next request is read.  A request of
 * unknown type gets an "error" reply naming the known ones. */
#include "coordinator/coord.h"
#include "coordinator/api.h"

#include "core/event/event.h"
#include "core/model/model.h"
#include "core/util/log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static const char *const stat_names[SHM_STAT_COUNT] = {
    "steps", "tokens", "expert_hits", "expert_misses", "bytes_read", "bytes_copied",
    "ring_messages", "ring_wait_ns", "ring_sleeps", "busy_ns", "errors", "ple_rows", "ple_bytes_read",
    "ssd_blob_bytes", "experts_computed", "vram_peak_bytes"};

static cJSON *error_reply(const char *message)
{
    cJSON *r = ctl_msg("error");
    cJSON_AddStringToObject(r, "message", message);
    return r;
}

static cJSON *worker_json(const struct coord *c, const struct coord_worker *w)
{
    cJSON *o = cJSON_CreateObject();
    double now = coord_now();
    cJSON_AddStringToObject(o, "role", w->role);
    cJSON_AddNumberToObject(o, "pid", w->pid);
    cJSON_AddStringToObject(o, "state", coord_wstate_name(w->state));
    cJSON_AddNumberToObject(o, "restarts", w->restarts);
    cJSON_AddNumberToObject(o, "uptime_s", w->pid > 0 ? now - w->started_at : 0);
    cJSON_AddNumberToObject(o, "last_heartbeat_s", w->pid > 0 ? now - w->last_beat : -1);
    cJSON_AddStringToObject(o, "log", w->log_path);
    (void)c;
    return o;
}

static cJSON *status(struct coord *c)
{
    cJSON *r = ctl_msg("status"), *ws = cJSON_AddArrayToObject(r, "workers"), *tiers = cJSON_AddObjectToObject(r, "tiers");
    cJSON_AddStringToObject(r, "instance", shm_instance_id(c->inst));
    cJSON_AddNumberToObject(r, "pid", getpid());
    cJSON_AddNumberToObject(r, "uptime_s", coord_now() - c->t_start);
    cJSON_AddStringToObject(r, "runtime", c->rundir);
    cJSON_AddStringToObject(r, "model", c->model_path);
    cJSON_AddStringToObject(r, "placement", c->placement_path[0] ? c->placement_path : "(none: every expert local)");
    for (int i = 0; i < c->n_workers; i++) cJSON_AddItemToArray(ws, worker_json(c, &c->w[i]));
    static const char *names[] = {"vram", "ram", "ssd"};
    for (int t = 0; t < 3; t++) {
        cJSON *o = cJSON_AddObjectToObject(tiers, names[t]);
        cJSON_AddNumberToObject(o, "experts", (double)c->tiers.experts[t]);
        cJSON_AddNumberToObject(o, "bytes", (double)c->tiers.bytes[t]);
    }
    /* Routed experts found resident (VRAM tier) by the gpu-worker, and SSD reads by the pager. */
    uint64_t hits = shm_stats_get(c->stats, 0, SHM_STAT_EXPERT_HITS), misses = shm_stats_get(c->stats, 0, SHM_STAT_EXPERT_MISSES);
    cJSON_AddNumberToObject(r, "expert_hits", (double)hits);
    cJSON_AddNumberToObject(r, "expert_misses", (double)misses);
    cJSON_AddNumberToObject(r, "vram_hit_rate", hits + misses ? (double)hits / (double)(hits + misses) : 0);
    uint64_t ram_hits = shm_stats_get(c->stats, 1, SHM_STAT_EXPERT_HITS), ram_misses = shm_stats_get(c->stats, 1, SHM_STAT_EXPERT_MISSES);
    cJSON_AddNumberToObject(r, "ram_hit_rate", ram_hits + ram_misses ? (double)ram_hits / (double)(ram_hits + ram_misses) : 0);
    /* SSD bytes per token evaluated by the gpu-worker (experts and PLE rows; counters since each worker started). */
    uint64_t tokens = shm_stats_get(c->stats, 0, SHM_STAT_TOKENS), ssd = shm_stats_get(c->stats, 2, SHM_STAT_BYTES_READ);
    uint64_t ple = shm_stats_get(c->stats, 2, SHM_STAT_PLE_BYTES_READ);
    cJSON_AddStringToObject(r, "ple_tier", c->tiers.ple_ssd ? "ssd" : c->tiers.ple_vram ? "vram" : "ram");
    cJSON_AddNumberToObject(r, "ssd_bytes_per_token", tokens ? (double)ssd / (double)tokens : 0);
    cJSON_AddNumberToObject(r, "ssd_ple_bytes_per_token", tokens ? (double)ple / (double)tokens : 0);
    /* Routed experts run on the gpu-worker and the cpu-moe-worker: k × MoE layers per token in exact mode. */
    uint64_t computed = shm_stats_get(c->stats, 0, SHM_STAT_EXPERTS_COMPUTED) + shm_stats_get(c->stats, 1, SHM_STAT_EXPERTS_COMPUTED);
    cJSON_AddNumberToObject(r, "experts_computed", (double)computed);
    cJSON_AddNumberToObject(r, "experts_computed_per_token", tokens ? (double)computed / (double)tokens : 0);
    cJSON_AddNumberToObject(r, "vram_peak_bytes", (double)shm_stats_get(c->stats, 0, SHM_STAT_VRAM_PEAK_BYTES));
    return r;
}

static cJSON *stats(struct coord *c)
{
    cJSON *r = ctl_msg("stats"), *ws = cJSON_AddArrayToObject(r, "workers");
    cJSON_AddItemToObject(r, "speculative", api_spec_json(&c->spec_total, false)); /* every request's verify windows */
    for (uint32_t b = 0; b < shm_stats_n_workers(c->stats); b++) {
        struct shm_stats_worker info = shm_stats_worker_info(c->stats, b);
        if (!info.pid) continue;
        cJSON *o = cJSON_CreateObject(), *cs = cJSON_AddObjectToObject(o, "counters");
        cJSON_AddStringToObject(o, "name", info.name);
        cJSON_AddNumberToObject(o, "pid", info.pid);
        cJSON_AddBoolToObject(o, "alive", info.alive);
        cJSON_AddNumberToObject(o, "epoch", info.epoch);
        for (int k = 0; k < SHM_STAT_COUNT; k++) cJSON_AddNumberToObject(cs, stat_names[k], (double)shm_stats_get(c->stats, b, (enum shm_stat)k));
        cJSON_AddItemToArray(ws, o);
    }
    const struct coord_cache_numbers k = coord_cache_numbers(c);
    cJSON *pc = cJSON_AddObjectToObject(r, "prompt_cache");
    cJSON_AddBoolToObject(pc, "enabled", c->cache != NULL);
    const struct { const char *name; uint64_t v; } f[] = {{"hits", k.hits}, {"misses", k.misses}, {"tokens_reused", k.tokens_reused},
        {"tokens_prefilled", k.tokens_prefilled}, {"saves", k.saves}, {"load_failures", k.load_failures}, {"ram_entries", k.ram_entries},
        {"ram_bytes", k.ram_bytes}, {"disk_entries", k.disk_entries}, {"disk_bytes", k.disk_bytes}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) cJSON_AddNumberToObject(pc, f[i].name, (double)f[i].v);
    return r;
}

/* The worker a profile/restart request names, or NULL. */
static struct coord_worker *named_worker(struct coord *c, const cJSON *req)
{
    const cJSON *wn = cJSON_GetObjectItemCaseSensitive(req, "worker");
    return cJSON_IsString(wn) ? coord_worker_by_role(c, wn->valuestring) : NULL;
}

/* Per-stage times of one worker: its busy and ring-wait totals and time per layer. */
static cJSON *profile(struct coord *c, const cJSON *req)
{
    struct coord_worker *w = named_worker(c, req);
    if (!w) return error_reply("profile needs \"worker\": one of the roles in status");
    cJSON *r = ctl_msg("profile"), *ls = cJSON_AddArrayToObject(r, "layers");
    uint32_t b = w->stats_block;
    cJSON_AddStringToObject(r, "worker", w->role);
    cJSON_AddNumberToObject(r, "steps", (double)shm_stats_get(c->stats, b, SHM_STAT_STEPS));
    cJSON_AddNumberToObject(r, "tokens", (double)shm_stats_get(c->stats, b, SHM_STAT_TOKENS));
    cJSON_AddNumberToObject(r, "busy_ns", (double)shm_stats_get(c->stats, b, SHM_STAT_BUSY_NS));
    cJSON_AddNumberToObject(r, "ring_wait_ns", (double)shm_stats_get(c->stats, b, SHM_STAT_RING_WAIT_NS));
    for (uint32_t l = 0; l < shm_stats_n_layers(c->stats); l++) {
        uint64_t calls = shm_stats_layer_calls(c->stats, b, l), ns = shm_stats_layer_ns(c->stats, b, l);
        if (!calls) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "layer", l);
        cJSON_AddNumberToObject(o, "calls", (double)calls);
        cJSON_AddNumberToObject(o, "ns", (double)ns);
        cJSON_AddItemToArray(ls, o);
    }
    return r;
}

/* ---- restart: a state, answered when the successor is ready ----
 * It begins when no generation runs (a generation's worker is not killed
 * under it: the restart waits for the running request to end, as it waited
 * for the HTTP job before, and the queued ones wait for it), then kills the
 * worker; coord_ctl_on_workers answers once
 * a new process of the role is ready, or fails after COORD_READY_TIMEOUT_S. */

static double on_restart_timeout(event_loop *l, void *ctx)
{
    struct coord *c = ctx;
    (void)l;
    c->restart = (struct coord_restart_wait){0};
    coord_ctl_answer(c, error_reply("the worker did not come back (see its log)"));
    coord_requests_on_workers(c); /* a request waiting for the restart goes on (or fails) */
    return EVENT_TIMER_END;
}

static void restart_begin(struct coord *c)
{
    struct coord_worker *w = c->restart.w;
    c->restart.old_pid = w->pid, c->restart.begun = true;
    coord_restart(c, w);
    c->restart.timer = event_add_timer(c->loop, COORD_READY_TIMEOUT_S, on_restart_timeout, c);
    coord_ctl_on_workers(c);
}

void coord_ctl_on_idle(struct coord *c)
{
    if (c->restart.w && !c->restart.begun) restart_begin(c);
}

void coord_ctl_on_workers(struct coord *c)
{
    struct coord_worker *w = c->restart.w;
    if (!w || !c->restart.begun) return;
    pid_t old = c->restart.old_pid;
    cJSON *r = NULL;
    if (w->state == W_FAILED) r = error_reply("the worker did not come back (see its log)");
    else if (!(w->pid == old && old > 0) && w->state == W_READY) cJSON_AddItemToObject(r = ctl_msg("ok"), "worker", worker_json(c, w));
    if (!r) return;
    if (c->restart.timer > 0) event_del_timer(c->loop, c->restart.timer);
    c->restart = (struct coord_restart_wait){0};
    coord_ctl_answer(c, r);
}

/* One request → its reply now, or NULL when it is answered later (a
 * generate, a restart: REP takes no other request meanwhile). */
static cJSON *handle(struct coord *c, const cJSON *req)
{
    const char *t = ctl_type(req);
    if (!strcmp(t, "status")) return status(c);
    if (!strcmp(t, "stats")) return stats(c);
    if (!strcmp(t, "profile")) return profile(c, req);
    if (!strcmp(t, "generate")) return coord_generate(c, req, coord_ctl_answer);
    if (!strcmp(t, "restart")) {
        struct coord_worker *w = named_worker(c, req);
        if (!w) return error_reply("restart needs \"worker\": one of the roles in status");
        c->restart = (struct coord_restart_wait){.w = w};
        if (!coord_requests_busy(c)) restart_begin(c);
        return NULL;
    }
    if (!strcmp(t, "shutdown")) {
        nb_log("shutdown requested on ctl.sock");
        c->stop = true;
        return ctl_msg("ok");
    }
    char msg[160];
    snprintf(msg, sizeof msg, "unknown request '%.40s' (status, stats, profile, restart, generate, shutdown)", t);
    return error_reply(msg);
}

void coord_ctl_answer(struct coord *c, cJSON *reply)
{
    char err[256];
    if (ctl_send(c->rep, NULL, reply, err, sizeof err)) nb_log("cannot reply on ctl.sock: %s", err);
    cJSON_Delete(reply);
    c->ctl_pending = false;
    if (!c->ctl_in_serve) coord_ctl_serve(c); /* the next may be there already: ZMQ_FD is edge-triggered */
}

void coord_ctl_serve(struct coord *c)
{
    void *z = ctl_zmq_socket(c->rep);
    char err[256];
    c->ctl_in_serve = true;
    for (;;) {
        /* ZMQ_EVENTS first, always: it is what resets ZMQ_FD's readiness.  A
         * socket left unasked while not served (start-up, a request open)
         * would keep the fd readable and the loop spinning. */
        int ev = 0;
        size_t sz = sizeof ev;
        if (zmq_getsockopt(z, ZMQ_EVENTS, &ev, &sz) || !(ev & ZMQ_POLLIN) || !c->ctl_serving || c->ctl_pending) break;
        cJSON *msg, *reply;
        c->ctl_pending = true;
        if (ctl_recv(c->rep, 0, NULL, 0, &msg, err, sizeof err) == 0) {
            reply = handle(c, msg);
            cJSON_Delete(msg);
        } else { /* a malformed request still gets its one reply: REP must answer */
            reply = ctl_msg("error");
            cJSON_AddStringToObject(reply, "message", err);
        }
        if (reply) coord_ctl_answer(c, reply);
    }
    c->ctl_in_serve = false;
}

void coord_ctl_close(struct coord *c)
{
    if (c->restart.timer > 0) event_del_timer(c->loop, c->restart.timer);
    c->restart = (struct coord_restart_wait){0};
    if (!c->ctl_pending) return;
    cJSON *r = ctl_msg("error"); /* REP owes it an answer */
    cJSON_AddStringToObject(r, "message", "the coordinator is shutting down");
    coord_ctl_answer(c, r);
}
