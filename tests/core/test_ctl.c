/* test_ctl.c — control messages between processes over ZeroMQ ipc sockets:
 * identities, replies, timeouts, malformed messages, socket permissions; the
 * configure message's round trip. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "core/ctl/ctl.h"
#include "core/ctl/worker.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

TestSuite(ctl, .init = tmp_setup, .fini = tmp_teardown, .timeout = 30);

/* A worker process: says hello, answers one "ping" with "pong", exits. */
static void worker(const char *ep, const char *role)
{
    ctl_sock *s;
    char err[256];
    ctl_after_fork();
    if (ctl_open(CTL_DEALER, ep, role, &s, err, sizeof err)) _exit(10);
    cJSON *hello = ctl_msg("hello");
    cJSON_AddStringToObject(hello, "role", role);
    cJSON_AddNumberToObject(hello, "version", CTL_PROTOCOL_VERSION);
    if (ctl_send(s, NULL, hello, err, sizeof err)) _exit(11);
    cJSON_Delete(hello);
    cJSON *m;
    if (ctl_recv(s, 5000, NULL, 0, &m, err, sizeof err)) _exit(12);
    if (strcmp(ctl_type(m), "ping")) _exit(13);
    cJSON *pong = ctl_msg("pong");
    cJSON_AddNumberToObject(pong, "seq", cJSON_GetObjectItem(m, "seq")->valuedouble);
    if (ctl_send(s, NULL, pong, err, sizeof err)) _exit(14);
    cJSON_Delete(pong);
    cJSON_Delete(m);
    ctl_close(s);
    ctl_term(); /* without it the pong may die with the process */
    _exit(0);
}

/* A ROUTER or REP socket bound at tmp_dir/name; ep (512 bytes) gets its
 * endpoint, for the peers.
 *
 * FORK_FIRST: a test forks its workers before it binds, while this process
 * has no ZeroMQ context and so no I/O threads.  A child forked beside those
 * threads inherits whatever lock one held at that instant (under ASan, its
 * allocator's), and stalled in about half the sanitized runs.  The workers
 * connect before the socket is bound; ZeroMQ retries until it is. */
static ctl_sock *bound_at(enum ctl_kind kind, const char *name, char *ep)
{
    char err[256];
    ctl_endpoint(ep, 512, tmp_dir, name);
    ctl_sock *s;
    cr_assert_eq(ctl_open(kind, ep, NULL, &s, err, sizeof err), 0, "%s", err);
    return s;
}

Test(ctl, router_addresses_workers_by_role)
{
    char ep[512], err[256], peer[64];
    const char *roles[2] = {"gpu-worker", "cpu-moe-worker"};
    pid_t pids[2];
    ctl_endpoint(ep, sizeof ep, tmp_dir, "control.sock");
    for (int i = 0; i < 2; i++) /* before this process has ZeroMQ threads: FORK_FIRST */
        if ((pids[i] = fork()) == 0) worker(ep, roles[i]);
    ctl_sock *r = bound_at(CTL_ROUTER, "control.sock", ep);
    struct stat st;
    cr_assert_eq(stat(ep + 6, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "socket mode %o", st.st_mode & 0777);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        cJSON *m;
        cr_assert_eq(ctl_recv(r, 5000, peer, sizeof peer, &m, err, sizeof err), 0, "%s", err);
        cr_assert_str_eq(ctl_type(m), "hello");
        cr_assert_str_eq(cJSON_GetObjectItem(m, "role")->valuestring, peer, "identity must be the role");
        seen |= !strcmp(peer, roles[0]) ? 1 : 2;
        cJSON_Delete(m);
    }
    cr_assert_eq(seen, 3);
    for (int i = 0; i < 2; i++) { /* each gets its own ping and answers it */
        cJSON *ping = ctl_msg("ping");
        cJSON_AddNumberToObject(ping, "seq", 40 + i);
        cr_assert_eq(ctl_send(r, roles[i], ping, err, sizeof err), 0, "%s", err);
        cJSON_Delete(ping);
        cJSON *m;
        if (ctl_recv(r, 5000, peer, sizeof peer, &m, err, sizeof err)) {
            int st0 = -1, st1 = -1;
            waitpid(pids[0], &st0, WNOHANG);
            waitpid(pids[1], &st1, WNOHANG);
            cr_assert_fail("no pong from %s: %s (worker statuses %x %x)", roles[i], err, st0, st1);
        }
        cr_assert_str_eq(peer, roles[i]);
        cr_assert_eq(cJSON_GetObjectItem(m, "seq")->valueint, 40 + i);
        cJSON_Delete(m);
    }
    for (int i = 0; i < 2; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d exit %d", i, WEXITSTATUS(status));
    }
    /* Sending to a worker that is not connected is an error, not a silent drop. */
    cJSON *ping = ctl_msg("ping");
    cr_assert_lt(ctl_send(r, "ssd-pager", ping, err, sizeof err), 0);
    cJSON_Delete(ping);
    ctl_close(r);
}

Test(ctl, receive_times_out)
{
    char ep[512], err[256];
    ctl_sock *r = bound_at(CTL_ROUTER, "quiet.sock", ep);
    cJSON *m;
    cr_assert_eq(ctl_recv(r, 50, NULL, 0, &m, err, sizeof err), NB_EIO);
    cr_assert_str_eq(err, "timeout");
    cr_assert_null(m);
    ctl_close(r);
}

Test(ctl, malformed_messages_are_rejected)
{
    char ep[512], err[256];
    ctl_sock *rep = bound_at(CTL_REP, "rep.sock", ep);
    /* A raw ZeroMQ REQ sends bytes that are not JSON, then JSON without a type. */
    void *zc = zmq_ctx_new(), *req = zmq_socket(zc, ZMQ_REQ);
    cr_assert_eq(zmq_connect(req, ep), 0);
    zmq_send(req, "not json", 8, 0);
    cJSON *m;
    cr_assert_eq(ctl_recv(rep, 2000, NULL, 0, &m, err, sizeof err), NB_EFORMAT);
    cJSON *e = ctl_msg("error");
    cr_assert_eq(ctl_send(rep, NULL, e, err, sizeof err), 0, "%s", err);
    char buf[256];
    cr_assert_gt(zmq_recv(req, buf, sizeof buf, 0), 0);
    zmq_send(req, "{\"x\": 1}", 8, 0);
    cr_assert_eq(ctl_recv(rep, 2000, NULL, 0, &m, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "type"));
    cr_assert_eq(ctl_send(rep, NULL, e, err, sizeof err), 0, "%s", err);
    cr_assert_gt(zmq_recv(req, buf, sizeof buf, 0), 0);
    /* And a good request through the ctl REQ wrapper. */
    zmq_close(req);
    zmq_ctx_term(zc);
    ctl_sock *q;
    cr_assert_eq(ctl_open(CTL_REQ, ep, NULL, &q, err, sizeof err), 0, "%s", err);
    cJSON *st = ctl_msg("status");
    cr_assert_eq(ctl_send(q, NULL, st, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ctl_recv(rep, 2000, NULL, 0, &m, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(ctl_type(m), "status");
    cJSON_Delete(m);
    cJSON_Delete(st);
    cJSON_Delete(e);
    ctl_close(q);
    ctl_close(rep);
}

/* A worker whose setup is slow (2.5 s between configure and ready, as a RAM
 * arena loading) heartbeats during it: the coordinator must not take a long
 * setup for a hang. */
static void slow_worker(const char *ep)
{
    ctl_after_fork();
    ctl_worker *w;
    struct ctl_configure conf;
    char err[256];
    if (ctl_worker_start(ep, "cpu-moe-worker", 5000, &w, &conf, err, sizeof err)) _exit(10);
    usleep(2500000);
    if (ctl_worker_ready(w, err, sizeof err)) _exit(11);
    for (int i = 0; i < 100 && !ctl_worker_stopping(w); i++) usleep(50000);
    int stopped = ctl_worker_stopping(w);
    ctl_worker_close(w);
    _exit(stopped ? 0 : 12);
}

Test(ctl, worker_heartbeats_while_setting_up)
{
    char ep[512], err[256], peer[64];
    ctl_endpoint(ep, sizeof ep, tmp_dir, "slow.sock");
    pid_t pid = fork(); /* FORK_FIRST */
    if (pid == 0) slow_worker(ep);
    ctl_sock *r = bound_at(CTL_ROUTER, "slow.sock", ep);
    cJSON *m;
    cr_assert_eq(ctl_recv(r, 5000, peer, sizeof peer, &m, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(ctl_type(m), "hello");
    cJSON_Delete(m);
    struct ctl_configure c = {.instance = "t", .model = "m.gguf", .prepared = "p", .placement = "p/placement.json"};
    cJSON *conf = ctl_configure_to_json(&c);
    cr_assert_eq(ctl_send(r, "cpu-moe-worker", conf, err, sizeof err), 0, "%s", err);
    cJSON_Delete(conf);
    int beats_before_ready = 0, ready = 0;
    while (!ready) {
        cr_assert_eq(ctl_recv(r, 5000, peer, sizeof peer, &m, err, sizeof err), 0, "%s", err);
        if (!strcmp(ctl_type(m), "heartbeat")) beats_before_ready++;
        else if (!strcmp(ctl_type(m), "ready")) ready = 1;
        else cr_assert_fail("unexpected %s", ctl_type(m));
        cJSON_Delete(m);
    }
    cr_assert_geq(beats_before_ready, 2, "%d heartbeats during a 2.5 s setup", beats_before_ready);
    cJSON *bye = ctl_msg("shutdown");
    cr_assert_eq(ctl_send(r, "cpu-moe-worker", bye, err, sizeof err), 0, "%s", err);
    cJSON_Delete(bye);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker status %x", status);
    ctl_close(r);
}

/* configure → JSON → configure keeps every field, ring_spin_us included, and
 * a message without ring_spin_us or with an absurd one is refused by name. */
Test(ctl, configure_round_trip_and_ring_spin)
{
    struct ctl_configure a = {.instance = "nebula-1-2", .mtp = "/m/mtp.gguf", .prepared = "/p", .threads = 15, .ring_spin_us = 5000,
                              .stats_worker = 1, .moe_offset = 4096, .staging_slot_bytes = 8192, .staging_slots = 4,
                              .staging_first = 1, .staging_count = 3, .backend = "cuda", .kernels = "ref",
                              .vram_budget = 80ull << 30, .n_ctx = 4096, .layer_times = true, .stream_rows = 1024},
                         b;
    char err[256];
    cJSON *m = ctl_configure_to_json(&a);
    cr_assert_not_null(m);
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(b.threads, 15);
    cr_assert_eq(b.ring_spin_us, 5000);
    cr_assert_eq(b.staging_first, 1);
    cr_assert_str_eq(b.placement, "/p/placement.json");
    cr_assert_str_eq(b.backend, "cuda");
    cr_assert_str_eq(b.kernels, "ref");
    cr_assert_str_eq(b.mtp, "/m/mtp.gguf");
    cr_assert_eq(b.vram_budget, 80ull << 30);
    cr_assert_eq(b.n_ctx, 4096);
    cr_assert(b.layer_times);
    cr_assert_eq(b.stream_rows, 1024);
    /* Every field is required: one encoder, so a message without one is not ours. */
    static const char *required[] = {"backend", "kernels", "vram_budget", "ctx", "layer_times", "threads", "mtp", "stream_rows"};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        cJSON *cut = cJSON_Duplicate(m, 1);
        cJSON_DeleteItemFromObject(cut, required[i]);
        cr_assert_eq(ctl_configure_parse(cut, &b, err, sizeof err), NB_EFORMAT, "%s", required[i]);
        cr_assert(strstr(err, required[i]), "%s: %s", required[i], err);
        cJSON_Delete(cut);
    }
    /* Without a prepared directory there is no placement (every expert local). */
    struct ctl_configure none = {.instance = "i", .model = "m.gguf"};
    cJSON *n = ctl_configure_to_json(&none);
    cr_assert_eq(ctl_configure_parse(n, &b, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(b.placement, "");
    cJSON_Delete(n);
    cJSON_ReplaceItemInObject(m, "ring_spin_us", cJSON_CreateNumber(2e6));
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), NB_EFORMAT);
    cJSON_DeleteItemFromObject(m, "ring_spin_us");
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "ring_spin_us"), "%s", err);
    cJSON_Delete(m);
}

/* The slot cache's settings travel in an optional "slots" object: kept through a round trip, absent when
 * slots_every is 0 (the worker's defaults, static), and a bad value refused by name. */
Test(ctl, configure_slots)
{
    struct ctl_configure a = {.instance = "i", .model = "m.gguf", .slots_adaptive = true, .slots_every = 8, .slots_swaps = 4,
                              .slots_decay = 0.95, .slots_hysteresis = 1.5},
                         b;
    char err[256];
    cJSON *m = ctl_configure_to_json(&a);
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), 0, "%s", err);
    cr_assert(b.slots_adaptive);
    cr_assert_eq(b.slots_every, 8);
    cr_assert_eq(b.slots_swaps, 4);
    cr_assert_float_eq(b.slots_decay, 0.95, 1e-12);
    cr_assert_float_eq(b.slots_hysteresis, 1.5, 1e-12);
    cJSON *sl = cJSON_GetObjectItem(m, "slots");
    cJSON_ReplaceItemInObject(sl, "adapt", cJSON_CreateString("sometimes"));
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "slots.adapt"), "%s", err);
    cJSON_ReplaceItemInObject(sl, "adapt", cJSON_CreateString("static"));
    cJSON_ReplaceItemInObject(sl, "decay", cJSON_CreateNumber(0));
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "slots.decay"), "%s", err);
    cJSON_ReplaceItemInObject(sl, "decay", cJSON_CreateNumber(0.5));
    cJSON_ReplaceItemInObject(sl, "every", cJSON_CreateNumber(0));
    cr_assert_eq(ctl_configure_parse(m, &b, err, sizeof err), NB_EFORMAT);
    cJSON_Delete(m);
    struct ctl_configure none = {.instance = "i", .model = "m.gguf"};
    cJSON *n = ctl_configure_to_json(&none);
    cr_assert_null(cJSON_GetObjectItem(n, "slots"));
    cr_assert_eq(ctl_configure_parse(n, &b, err, sizeof err), 0, "%s", err);
    cr_assert(!b.slots_adaptive);
    cr_assert_eq(b.slots_every, 0);
    cJSON_Delete(n);
}
