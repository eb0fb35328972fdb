/* worker.c — the worker's control conversation and the configure message
 * (worker.h).  ZeroMQ sockets are not thread-safe: a mutex serializes every
 * use, and the heartbeat thread receives with a short timeout so a send from
 * the serving thread (an error report) never waits long for it. */
#include "core/ctl/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ctl/ctl.h"
#include "core/util/err.h"
#include "core/util/log.h"

struct ctl_worker {
    ctl_sock *sock;
    char role[32];
    pthread_mutex_t lock;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    pid_t parent; /* the spawner (the coordinator): when it is gone, so is the reason to run */
};

/* ---- configure ---------------------------------------------------------- */

cJSON *ctl_configure_to_json(const struct ctl_configure *c)
{
    cJSON *m = ctl_msg("configure");
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "instance", c->instance);
    cJSON_AddStringToObject(m, "model", c->model);
    cJSON_AddStringToObject(m, "mtp", c->mtp);
    cJSON_AddStringToObject(m, "prepared", c->prepared);
    cJSON_AddStringToObject(m, "placement", c->placement);
    cJSON_AddNumberToObject(m, "threads", c->threads);
    cJSON_AddNumberToObject(m, "ring_spin_us", c->ring_spin_us);
    cJSON_AddNumberToObject(m, "stats_worker", c->stats_worker);
    cJSON *rings = cJSON_AddObjectToObject(m, "rings");
    cJSON_AddNumberToObject(rings, "moe", (double)c->moe_offset);
    cJSON_AddNumberToObject(rings, "pager", (double)c->pager_offset);
    cJSON *st = cJSON_AddObjectToObject(m, "staging");
    cJSON_AddNumberToObject(st, "slot_bytes", (double)c->staging_slot_bytes);
    cJSON_AddNumberToObject(st, "slots", c->staging_slots);
    cJSON_AddNumberToObject(st, "first", c->staging_first);
    cJSON_AddNumberToObject(st, "count", c->staging_count);
    cJSON_AddStringToObject(m, "backend", c->backend);
    cJSON_AddStringToObject(m, "kernels", c->kernels);
    cJSON_AddNumberToObject(m, "vram_budget", (double)c->vram_budget);
    cJSON_AddNumberToObject(m, "ctx", (double)c->n_ctx);
    cJSON_AddBoolToObject(m, "layer_times", c->layer_times);
    cJSON_AddNumberToObject(m, "stream_rows", c->stream_rows);
    if (c->slots_every > 0) { /* else none: the worker's defaults, static */
        cJSON *sl = cJSON_AddObjectToObject(m, "slots");
        cJSON_AddStringToObject(sl, "adapt", c->slots_adaptive ? "adaptive" : "static");
        cJSON_AddNumberToObject(sl, "every", c->slots_every);
        cJSON_AddNumberToObject(sl, "swaps", c->slots_swaps);
        cJSON_AddNumberToObject(sl, "decay", c->slots_decay);
        cJSON_AddNumberToObject(sl, "hysteresis", c->slots_hysteresis);
    }
    cJSON_AddStringToObject(m, "cache_dir", c->cache_dir);
    cJSON_AddStringToObject(m, "cache_identity", c->cache_identity);
    return m;
}

static int get_str(const cJSON *o, const char *key, char *dst, size_t len, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= len)
        return nb_errf(err, errlen, NB_EFORMAT, "configure: \"%s\" missing, not a string or too long", key);
    memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

static int get_num(const cJSON *o, const char *key, uint64_t *dst, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0)
        return nb_errf(err, errlen, NB_EFORMAT, "configure: \"%s\" missing or not a count", key);
    *dst = (uint64_t)v->valuedouble;
    return 0;
}

static int get_real(const cJSON *o, const char *key, double lo, double hi, double *dst, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return nb_errf(err, errlen, NB_EFORMAT, "configure: \"slots.%s\" missing or not a number in [%g, %g]", key, lo, hi);
    *dst = v->valuedouble;
    return 0;
}

static int slots_parse(const cJSON *sl, struct ctl_configure *c, char *err, size_t errlen)
{
    char adapt[16];
    uint64_t every, swaps;
    int rc = get_str(sl, "adapt", adapt, sizeof adapt, err, errlen);
    if (!rc && strcmp(adapt, "static") && strcmp(adapt, "adaptive"))
        rc = nb_errf(err, errlen, NB_EFORMAT, "configure: \"slots.adapt\" \"%s\": want static or adaptive", adapt);
    if (!rc) rc = get_num(sl, "every", &every, err, errlen);
    if (!rc) rc = get_num(sl, "swaps", &swaps, err, errlen);
    if (!rc && (every < 1 || every > 4096 || swaps < 1 || swaps > 4096))
        rc = nb_errf(err, errlen, NB_EFORMAT, "configure: \"slots\" every %llu, swaps %llu: want 1 … 4096",
                     (unsigned long long)every, (unsigned long long)swaps);
    if (!rc) rc = get_real(sl, "decay", 1e-6, 1, &c->slots_decay, err, errlen);
    if (!rc) rc = get_real(sl, "hysteresis", 0, 1e3, &c->slots_hysteresis, err, errlen);
    if (rc) return rc;
    c->slots_adaptive = !strcmp(adapt, "adaptive"), c->slots_every = (uint32_t)every, c->slots_swaps = (uint32_t)swaps;
    return 0;
}

int ctl_configure_parse(const cJSON *m, struct ctl_configure *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const cJSON *rings = cJSON_GetObjectItemCaseSensitive(m, "rings");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(m, "staging");
    uint64_t threads, spin_us, worker, slots, first, count, n_ctx, stream_rows;
    int rc = get_str(m, "instance", c->instance, sizeof c->instance, err, errlen);
    if (!rc) rc = get_str(m, "model", c->model, sizeof c->model, err, errlen);
    if (!rc) rc = get_str(m, "mtp", c->mtp, sizeof c->mtp, err, errlen);
    if (!rc) rc = get_str(m, "prepared", c->prepared, sizeof c->prepared, err, errlen);
    if (!rc) rc = get_str(m, "placement", c->placement, sizeof c->placement, err, errlen);
    if (!rc) rc = get_num(m, "threads", &threads, err, errlen);
    if (!rc) rc = get_num(m, "ring_spin_us", &spin_us, err, errlen);
    if (!rc) rc = get_num(m, "stats_worker", &worker, err, errlen);
    if (!rc) rc = get_num(rings, "moe", &c->moe_offset, err, errlen);
    if (!rc) rc = get_num(rings, "pager", &c->pager_offset, err, errlen);
    if (!rc) rc = get_num(st, "slot_bytes", &c->staging_slot_bytes, err, errlen);
    if (!rc) rc = get_num(st, "slots", &slots, err, errlen);
    if (!rc) rc = get_num(st, "first", &first, err, errlen);
    if (!rc) rc = get_num(st, "count", &count, err, errlen);
    if (!rc) rc = get_str(m, "backend", c->backend, sizeof c->backend, err, errlen);
    if (!rc) rc = get_str(m, "kernels", c->kernels, sizeof c->kernels, err, errlen);
    if (!rc) rc = get_num(m, "vram_budget", &c->vram_budget, err, errlen);
    if (!rc) rc = get_num(m, "ctx", &n_ctx, err, errlen);
    if (!rc) rc = get_num(m, "stream_rows", &stream_rows, err, errlen);
    if (!rc && stream_rows > 1u << 20) rc = nb_errf(err, errlen, NB_EFORMAT, "configure: \"stream_rows\" %llu is absurd", (unsigned long long)stream_rows);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(m, "layer_times");
    if (!rc && !cJSON_IsBool(lt)) rc = nb_errf(err, errlen, NB_EFORMAT, "configure: \"layer_times\" missing or not a boolean");
    /* optional: a configure without it (an older coordinator) keeps the slots static */
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(m, "slots");
    if (!rc && sl) rc = slots_parse(sl, c, err, errlen);
    /* optional: a configure without them (an older coordinator) has no prompt cache */
    if (!rc && cJSON_GetObjectItemCaseSensitive(m, "cache_dir")) rc = get_str(m, "cache_dir", c->cache_dir, sizeof c->cache_dir, err, errlen);
    if (!rc && cJSON_GetObjectItemCaseSensitive(m, "cache_identity"))
        rc = get_str(m, "cache_identity", c->cache_identity, sizeof c->cache_identity, err, errlen);
    if (rc) return rc;
    c->n_ctx = (int64_t)n_ctx, c->layer_times = cJSON_IsTrue(lt), c->stream_rows = (uint32_t)stream_rows;
    if (first + count > slots || slots > UINT32_MAX || threads > 4096 || spin_us > 1000000 || worker > UINT32_MAX)
        return nb_errf(err, errlen, NB_EFORMAT, "configure: staging share %lu+%lu exceeds %lu slots (or a bad count)",
                       (unsigned long)first, (unsigned long)count, (unsigned long)slots);
    c->threads = (int)threads, c->ring_spin_us = (uint32_t)spin_us, c->stats_worker = (uint32_t)worker;
    c->staging_slots = (uint32_t)slots, c->staging_first = (uint32_t)first, c->staging_count = (uint32_t)count;
    if (!c->placement[0] && c->prepared[0] && snprintf(c->placement, sizeof c->placement, "%s/placement.json", c->prepared) >=
                                (int)sizeof c->placement)
        return nb_errf(err, errlen, NB_EFORMAT, "configure: prepared path too long");
    return 0;
}

/* ---- the conversation --------------------------------------------------- */

static int send_locked(ctl_worker *w, cJSON *m, char *err, size_t errlen)
{
    if (!m) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    cJSON_AddStringToObject(m, "role", w->role);
    pthread_mutex_lock(&w->lock);
    int rc = ctl_send(w->sock, NULL, m, err, errlen);
    pthread_mutex_unlock(&w->lock);
    cJSON_Delete(m);
    return rc;
}

static void *heartbeat_main(void *arg);

int ctl_worker_start(const char *endpoint, const char *role, int timeout_ms, ctl_worker **out,
                     struct ctl_configure *conf, char *err, size_t errlen)
{
    ctl_worker *w = calloc(1, sizeof *w);
    if (!w) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    snprintf(w->role, sizeof w->role, "%s", role);
    w->parent = getppid();
    pthread_mutex_init(&w->lock, NULL);
    int rc = ctl_open(CTL_DEALER, endpoint, role, &w->sock, err, errlen);
    cJSON *hello = ctl_msg("hello");
    if (hello) {
        cJSON_AddNumberToObject(hello, "pid", getpid());
        cJSON_AddNumberToObject(hello, "version", CTL_PROTOCOL_VERSION);
    }
    if (!rc) rc = send_locked(w, hello, err, errlen);
    else cJSON_Delete(hello);
    cJSON *m = NULL;
    if (!rc) rc = ctl_recv(w->sock, timeout_ms, NULL, 0, &m, err, errlen);
    if (!rc && !strcmp(ctl_type(m), "shutdown")) rc = nb_errf(err, errlen, NB_EINVAL, "shutdown");
    else if (!rc && strcmp(ctl_type(m), "configure"))
        rc = nb_errf(err, errlen, NB_EFORMAT, "expected configure, got \"%s\"", ctl_type(m));
    if (!rc) rc = ctl_configure_parse(m, conf, err, errlen);
    cJSON_Delete(m);
    /* Heartbeats start now, not at ready: a worker's setup (loading a RAM
     * arena of tens of GB, uploading dense weights) can take minutes, and the
     * coordinator kills a configuring worker that falls silent for
     * COORD_HEARTBEAT_MISS_S as it kills a ready one. */
    if (!rc && pthread_create(&w->thread, NULL, heartbeat_main, w))
        rc = nb_errf(err, errlen, NB_EIO, "cannot start the heartbeat thread");
    if (!rc) w->thread_started = true;
    if (rc) {
        ctl_worker_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void *heartbeat_main(void *arg)
{
    ctl_worker *w = arg;
    struct timespec last = {0};
    while (!atomic_load(&w->stop)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        char err[256];
        if (getppid() != w->parent) { /* reparented: the coordinator died without a shutdown */
            nb_log("the process that started this worker (pid %d) is gone: stopping", (int)w->parent);
            atomic_store(&w->stop, true);
            break;
        }
        if (now.tv_sec - last.tv_sec >= 1) {
            cJSON *hb = ctl_msg("heartbeat");
            if (hb) cJSON_AddNumberToObject(hb, "t", (double)time(NULL));
            send_locked(w, hb, err, sizeof err);
            last = now;
        }
        cJSON *m = NULL;
        pthread_mutex_lock(&w->lock);
        int rc = ctl_recv(w->sock, 50, NULL, 0, &m, err, sizeof err);
        pthread_mutex_unlock(&w->lock);
        if (rc == 0 && !strcmp(ctl_type(m), "shutdown")) {
            nb_log("shutdown requested");
            atomic_store(&w->stop, true);
        } else if (rc == 0) {
            nb_log("control message \"%s\" ignored", ctl_type(m));
        }
        cJSON_Delete(m);
        if (rc) usleep(1000); /* let a waiting sender take the lock */
    }
    return NULL;
}

int ctl_worker_ready(ctl_worker *w, char *err, size_t errlen)
{
    return send_locked(w, ctl_msg("ready"), err, errlen);
}

void ctl_worker_error(ctl_worker *w, const char *message)
{
    char err[256];
    cJSON *m = ctl_msg("error");
    if (m) cJSON_AddStringToObject(m, "message", message);
    send_locked(w, m, err, sizeof err);
}

int ctl_worker_serve(ctl_worker *w, ctl_worker_turn turn, void *ctx)
{
    char err[256];
    while (!atomic_load(&w->stop)) {
        int rc = turn(ctx, err, sizeof err);
        if (rc) {
            nb_log("cannot go on: %s", err);
            ctl_worker_error(w, err);
            return rc;
        }
    }
    return 0;
}

bool ctl_worker_stopping(const ctl_worker *w) { return atomic_load(&w->stop); }
void ctl_worker_request_stop(ctl_worker *w) { atomic_store(&w->stop, true); }

void ctl_worker_close(ctl_worker *w)
{
    if (!w) return;
    atomic_store(&w->stop, true);
    if (w->thread_started) pthread_join(w->thread, NULL);
    ctl_close(w->sock);
    pthread_mutex_destroy(&w->lock);
    free(w);
    ctl_term();
}

int ctl_worker_run(const char *endpoint, const char *role, int timeout_ms, struct ctl_configure *conf,
                   const struct ctl_worker_life *life, void *ctx)
{
    char err[512];
    ctl_worker *w;
    if (ctl_worker_start(endpoint, role, timeout_ms, &w, conf, err, sizeof err)) {
        nb_log("control: %s", err);
        return 1;
    }
    int rc = life->setup(ctx, err, sizeof err);
    if (!rc) rc = ctl_worker_ready(w, err, sizeof err);
    if (rc) {
        nb_log("setup: %s", err);
        ctl_worker_error(w, err);
    } else {
        if (life->on_ready) life->on_ready(ctx);
        rc = ctl_worker_serve(w, life->turn, ctx);
    }
    life->teardown(ctx);
    ctl_worker_close(w);
    nb_log("exit %d", rc ? 1 : 0);
    return rc ? 1 : 0;
}
