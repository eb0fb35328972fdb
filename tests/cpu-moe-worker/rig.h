/* rig.h — a test driver that plays the coordinator and the gpu-worker for
 * the real nebula-cpu-moe-worker and nebula-ssd-pager binaries: a prepared
 * fixture (nebula-prepare), an shm instance with every region and ring, a
 * ROUTER control socket, the workers spawned and configured, and moe
 * requests whose every contribution is checked bit for bit against
 * gw_expert_ffn on the original GGUF's expert tensors. */
#ifndef NB_TEST_MOE_RIG_H
#define NB_TEST_MOE_RIG_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/ctl/ctl.h"
#include "core/ctl/worker.h"
#include "core/model/model.h"
#include "core/prepared/prepared.h"
#include "cpu-moe-worker/moe_proto.h"
#include "engine/ffn.h"
#include "shm/shm.h"
#include "tests/core/model_fixture.h"
#include "tests/shm/shm_fixture.h"

enum { RIG_MOE_WORKER = 2, RIG_PAGER = 3 }; /* stats blocks */
#define RIG_MAX_TOKENS 4

static const char *rig_tmp_base = "/tmp"; /* where rig_start makes its directory */

struct rig {
    char dir[128], prep[160], ep[200];
    struct model *m;
    struct prepared_idx idx;
    struct prepared_placement plc;
    shm_instance *inst;
    struct shm_region experts, staging, moe, pager, stats_reg;
    shm_stats *stats;
    ctl_sock *router;
    struct ctl_configure conf;
    struct ring_pair rp; /* moe, as the gpu-worker */
    struct ring_pair pc; /* pager, as its client (tests without a cpu-moe-worker) */
    pid_t pid_moe, pid_pager;
    bool no_deathsig;  /* rig_spawn: leave PR_SET_PDEATHSIG unset */
    bool via_stand_in; /* rig_spawn: the worker's parent is a stand-in process (stand_in_pid) */
    pid_t stand_in_pid;
    uint64_t tag, ssd_bytes; /* ssd_bytes: blob bytes of the SSD-tier experts the requests needed */
    unsigned seed;
};

static inline void rig_run(const char *cmd)
{
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
}

static inline pid_t rig_spawn_via(struct rig *r, const char *bin, const char *log);
static inline pid_t rig_spawn(struct rig *r, const char *bin, const char *log)
{
    if (r->via_stand_in) return rig_spawn_via(r, bin, log);
    pid_t parent = getpid(), pid = fork();
    cr_assert(pid >= 0, "fork");
    if (pid == 0) {
        /* A failed assertion ends the test process: its workers must die
         * with it, not stay orphaned (holding the test's output open).
         * (rig_spawn_via leaves this to the workers themselves.) */
        if (!r->no_deathsig) prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", r->dir, log);
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        if (strstr(bin, "moe-worker")) execl(bin, bin, "--control", r->ep, "--pager-timeout-ms", "3000", (char *)NULL);
        else execl(bin, bin, "--control", r->ep, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* A stand-in parent (dies with the test) forks the worker, reports its pid
 * through a pipe and waits to be killed. */
static inline pid_t rig_spawn_via(struct rig *r, const char *bin, const char *log)
{
    int fds[2];
    pid_t worker = 0;
    cr_assert_eq(pipe(fds), 0);
    r->stand_in_pid = fork();
    cr_assert(r->stand_in_pid >= 0, "fork");
    if (r->stand_in_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        r->via_stand_in = false, r->no_deathsig = true;
        worker = rig_spawn(r, bin, log);
        if (write(fds[1], &worker, sizeof worker) != sizeof worker) _exit(1);
        for (;;) pause();
    }
    cr_assert_eq(read(fds[0], &worker, sizeof worker), (ssize_t)sizeof worker);
    close(fds[0]), close(fds[1]);
    return worker;
}

/* Waits for hello from `role`, configures it, waits for its ready. */
static inline void rig_handshake(struct rig *r, const char *role)
{
    char peer[64], err[256];
    bool configured = false;
    for (int i = 0; i < 200; i++) {
        cJSON *msg = NULL;
        cr_assert_eq(ctl_recv(r->router, 10000, peer, sizeof peer, &msg, err, sizeof err), 0, "%s: %s", role, err);
        const char *type = ctl_type(msg);
        bool mine = !strcmp(peer, role);
        if (mine && !strcmp(type, "error")) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(msg, "message");
            cr_assert_fail("%s reported: %s", role, cJSON_IsString(e) ? e->valuestring : "?");
        }
        if (mine && !strcmp(type, "hello")) {
            cJSON *c = ctl_configure_to_json(&r->conf);
            cr_assert_eq(ctl_send(r->router, role, c, err, sizeof err), 0, "%s", err);
            cJSON_Delete(c);
            configured = true;
        }
        bool ready = mine && configured && !strcmp(type, "ready");
        cJSON_Delete(msg);
        if (ready) return;
    }
    cr_assert_fail("%s never became ready", role);
}

static inline void rig_regions(struct rig *r)
{
    r->inst = fx_instance();
    snprintf(r->conf.instance, sizeof r->conf.instance, "%s", shm_instance_id(r->inst));
    r->experts = fx_region(r->inst, "experts", r->plc.arena_bytes);
    r->conf.staging_slots = 4, r->conf.staging_first = 1, r->conf.staging_count = 3;
    r->conf.staging_slot_bytes = r->idx.max_blob_bytes;
    r->staging = fx_region(r->inst, "staging", r->conf.staging_slots * r->conf.staging_slot_bytes);
    struct ring_geometry gm = {4, RIG_MAX_TOKENS, 8, 0}, gp = {8, 4, 8, 256}; /* pager: room for PLE row lists */
    gm.payload_bytes = (uint32_t)moe_payload_bytes(RIG_MAX_TOKENS, 8, (uint64_t)r->m->hp.n_embd);
    r->moe = fx_region(r->inst, "moe", ring_pair_bytes(&gm));
    r->pager = fx_region(r->inst, "pager", ring_pair_bytes(&gp));
    cr_assert_eq(ring_pair_format(&r->moe, 0, &gm, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(ring_pair_format(&r->pager, 0, &gp, fx_err, sizeof fx_err), 0, "%s", fx_err);
    uint32_t n_blocks = (uint32_t)(r->m->hp.n_layer + r->m->hp.n_nextn);
    r->stats_reg = fx_region(r->inst, "stats", shm_stats_bytes(4, n_blocks));
    cr_assert_eq(shm_stats_format(&r->stats_reg, 4, n_blocks, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(shm_stats_open(&r->stats, &r->stats_reg, fx_err, sizeof fx_err), 0, "%s", fx_err);
}

/* Prepares `gguf` with a RAM budget of `ram` bytes, creates everything,
 * starts the pager and either the cpu-moe-worker (the rig attaches as the moe
 * client) or nothing more (the rig attaches as the pager's client). */
static inline void rig_start(struct rig *r, const char *gguf, const char *ram, bool with_moe)
{
    char err[256], cmd[1024];
    bool via = r->via_stand_in; /* the fields a caller sets before (r must start zeroed) */
    char kernels[sizeof r->conf.kernels];
    memcpy(kernels, r->conf.kernels, sizeof kernels);
    memset(r, 0, sizeof *r);
    r->via_stand_in = via;
    memcpy(r->conf.kernels, kernels, sizeof kernels); /* the cpu-moe-worker's, as the coordinator's --cpu-kernels */
    r->seed = 12345;
    /* /tmp is a disk here, so O_DIRECT is used; a test may pick tmpfs (no O_DIRECT). */
    snprintf(r->dir, sizeof r->dir, "%s/nbtest-moe-XXXXXX", rig_tmp_base);
    cr_assert(mkdtemp(r->dir), "mkdtemp");
    snprintf(r->prep, sizeof r->prep, "%s/prepared", r->dir);
    snprintf(cmd, sizeof cmd, "build/bin/nebula-prepare %s %s --ram-budget %s >%s/prepare.log 2>&1", gguf, r->prep,
             ram, r->dir);
    rig_run(cmd);
    cr_assert_eq(model_open(gguf, &r->m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(prepared_idx_load(r->prep, &r->idx, err, sizeof err), 0, "%s", err);
    snprintf(r->conf.placement, sizeof r->conf.placement, "%s/placement.json", r->prep);
    cr_assert_eq(prepared_placement_load(r->conf.placement, &r->idx, &r->plc, err, sizeof err), 0, "%s", err);
    cr_assert(r->plc.n_ram > 0 && r->plc.n_ssd > 0, "the fixture needs both tiers (%lu RAM, %lu SSD)",
              (unsigned long)r->plc.n_ram, (unsigned long)r->plc.n_ssd);
    snprintf(r->conf.prepared, sizeof r->conf.prepared, "%s", r->prep);
    snprintf(r->conf.model, sizeof r->conf.model, "%s", gguf);
    r->conf.threads = 2;
    rig_regions(r);
    ctl_endpoint(r->ep, sizeof r->ep, r->dir, "control.sock");
    cr_assert_eq(ctl_open(CTL_ROUTER, r->ep, NULL, &r->router, err, sizeof err), 0, "%s", err);
    r->conf.stats_worker = RIG_PAGER;
    r->pid_pager = rig_spawn(r, "build/bin/nebula-ssd-pager", "pager.log");
    rig_handshake(r, "ssd-pager");
    if (!with_moe) {
        cr_assert_eq(ring_pair_attach(&r->pc, &r->pager, 0, RING_CLIENT, NULL, err, sizeof err), 0, "%s", err);
        return;
    }
    r->conf.stats_worker = RIG_MOE_WORKER;
    r->pid_moe = rig_spawn(r, "build/bin/nebula-cpu-moe-worker", "moe.log");
    rig_handshake(r, "cpu-moe-worker");
    cr_assert_eq(ring_pair_attach(&r->rp, &r->moe, 0, RING_CLIENT, NULL, err, sizeof err), 0, "%s", err);
}

/* Respawns the cpu-moe-worker after a crash (same configure and block). */
static inline void rig_restart_moe(struct rig *r)
{
    r->conf.stats_worker = RIG_MOE_WORKER;
    r->pid_moe = rig_spawn(r, "build/bin/nebula-cpu-moe-worker", "moe.log");
    rig_handshake(r, "cpu-moe-worker");
}

/* Reaps pid within ~10 s; returns its wait status. */
static inline int rig_reap(pid_t pid)
{
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    cr_assert_fail("process %d did not exit", (int)pid);
    return st;
}

/* Respawns the pager after a crash: same configure, same stats block. */
static inline void rig_restart_pager(struct rig *r)
{
    r->conf.stats_worker = RIG_PAGER;
    r->pid_pager = rig_spawn(r, "build/bin/nebula-ssd-pager", "pager.log");
    rig_handshake(r, "ssd-pager");
    r->conf.stats_worker = RIG_MOE_WORKER;
}

/* shutdown to both workers, both exit 0, nothing of the instance is left. */
/* Lines of the file DIR/name that contain `what`. */
static inline int rig_log_count(const struct rig *r, const char *name, const char *what)
{
    char path[256], line[512];
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

static inline void rig_stop(struct rig *r)
{
    char err[256];
    cJSON *bye = ctl_msg("shutdown");
    if (r->pid_moe) cr_assert_eq(ctl_send(r->router, "cpu-moe-worker", bye, err, sizeof err), 0, "%s", err);
    if (r->pid_pager) cr_assert_eq(ctl_send(r->router, "ssd-pager", bye, err, sizeof err), 0, "%s", err);
    cJSON_Delete(bye);
    int st = r->pid_moe ? rig_reap(r->pid_moe) : 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cpu-moe-worker exit status %d", st);
    st = r->pid_pager ? rig_reap(r->pid_pager) : 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ssd-pager exit status %d", st);
    ring_pair_detach(&r->rp);
    ring_pair_detach(&r->pc);
    shm_stats_close(r->stats);
    struct shm_region *regs[] = {&r->experts, &r->staging, &r->moe, &r->pager, &r->stats_reg};
    for (size_t i = 0; i < sizeof regs / sizeof *regs; i++) shm_region_close(regs[i]);
    fx_instance_end(r->inst);
    ctl_close(r->router);
    ctl_term();
    prepared_placement_free(&r->plc);
    prepared_idx_free(&r->idx);
    model_close(r->m);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", r->dir);
    rig_run(cmd);
}

#endif
