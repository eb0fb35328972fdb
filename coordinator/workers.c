/* workers.c — the coordinator's worker supervision.
 *
 * Each worker is a binary next to the coordinator's own executable, started
 * with fork+exec (stdout/stderr appended to RUNDIR/<role>.log, and
 * PR_SET_PDEATHSIG so it never outlives a crashed coordinator).  It inherits
 * one fd of each shared-memory region, whose names main.c has unlinked:
 * shm_region_open finds them in /proc/self/fd (shm/region.c).  Its life:
 * STARTING (spawned, waiting for hello) → CONFIGURING (configure sent) →
 * READY (ready received, heartbeats expected every second).  A worker whose
 * pid is reaped, or that misses heartbeats for COORD_HEARTBEAT_MISS_S while
 * ready and not busy for us (or is silent for COORD_CONFIGURE_SILENCE_S
 * while it sets up), is killed if needed and started again with the same
 * argv; its hello gets the same configure.  A worker that fails to become
 * ready COORD_MAX_FAILED_STARTS times in a row is marked FAILED (its log
 * says why) instead of being restarted forever.
 *
 * All of it runs from the coordinator's loop: coord_workers_serve when
 * control.sock has messages, coord_supervise from a 100 ms timer (reaping,
 * restarts after their backoff, the heartbeat and start-up deadlines).  A
 * state change is told to c->on_workers, a callback main.c registers: this
 * file calls no one above it. */
#include "coordinator/coord.h"

#include "core/ctl/worker.h"
#include "core/util/err.h"
#include "core/util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whoever registered (main.c) hears of every state change. */
static void changed(struct coord *c)
{
    if (c->on_workers) c->on_workers(c);
}

const char *coord_wstate_name(enum coord_wstate s)
{
    static const char *names[] = {"down", "starting", "configuring", "ready", "failed"};
    return names[s];
}

struct coord_worker *coord_worker_by_role(struct coord *c, const char *role)
{
    for (int i = 0; i < c->n_workers; i++)
        if (!strcmp(c->w[i].role, role)) return &c->w[i];
    return NULL;
}

static int add_worker(struct coord *c, const char *role, const char *binary, uint32_t block, char *err, size_t errlen)
{
    struct coord_worker *w = &c->w[c->n_workers++];
    memset(w, 0, sizeof *w);
    w->role = role, w->stats_block = block, w->state = W_DOWN;
    char log_name[64];
    snprintf(log_name, sizeof log_name, "%s.log", role);
    if (coord_path(w->binary, sizeof w->binary, c->exe_dir, binary) ||
        coord_path(w->log_path, sizeof w->log_path, c->rundir, log_name))
        return nb_errf(err, errlen, NB_EINVAL, "path of %s too long", role);
    if (access(w->binary, X_OK))
        return nb_errf(err, errlen, NB_ENOENT, "%s is needed (%s) but %s is not there", binary,
                       block == 0 ? "it runs the model" : "the placement puts experts outside VRAM", w->binary);
    return 0;
}

static int cores(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* Threads and waits per worker (cpu_plan.c), and each one's kernels. */
static void plan_cpu(struct coord *c)
{
    bool cuda = c->gw_cuda;
    int n = cores();
    struct coord_cpu_plan p;
    coord_cpu_plan(n, c->threads, getenv("OMP_NUM_THREADS"), getenv("OMP_WAIT_POLICY"), cuda, &p);
    struct coord_worker *moe = coord_worker_by_role(c, "cpu-moe-worker");
    for (int i = 0; i < c->n_workers; i++) c->w[i].threads = c->threads;
    coord_worker_by_role(c, "gpu-worker")->kernels = c->kernels;
    if (!moe) return;
    moe->threads = p.moe_threads, moe->omp_spin = p.moe_spin, moe->ring_spin_us = p.ring_spin_us;
    /* The CPU experts' kernels follow the GPU's: beside the CUDA backend (fast
     * fp32 kernels by default) the fast ones, within float tolerance of the
     * reference and 10–20× faster per core; beside the CPU reference backend
     * the ref ones, so every placement gives the single-process bits. */
    moe->kernels = c->cpu_kernels && *c->cpu_kernels ? c->cpu_kernels : cuda ? "fast" : "ref";
    coord_worker_by_role(c, "gpu-worker")->ring_spin_us = p.ring_spin_us;
    char th[32];
    snprintf(th, sizeof th, "%d", p.moe_threads);
    nb_log("cpu-moe-worker: %s threads, %s (%d cores, %s gpu-worker)", p.moe_threads ? th : "OMP_NUM_THREADS",
           p.moe_spin ? "spinning waits (OpenMP and rings, 5 ms)" : "sleeping waits (OMP_WAIT_POLICY=passive)", n,
           cuda ? "cuda" : "cpu");
}

/* The gpu-worker always; the cpu-moe-worker when experts live in RAM or on
 * SSD; the pager when some live on SSD or the PLE table does. */
int coord_workers_init(struct coord *c, char *err, size_t errlen)
{
    int rc = add_worker(c, "gpu-worker", "nebula-gpu-worker", 0, err, errlen);
    if (!rc && c->tiers.experts[1] + c->tiers.experts[2] > 0)
        rc = add_worker(c, "cpu-moe-worker", "nebula-cpu-moe-worker", 1, err, errlen);
    if (!rc && (c->tiers.experts[2] > 0 || c->tiers.ple_ssd))
        rc = add_worker(c, "ssd-pager", "nebula-ssd-pager", 2, err, errlen);
    if (!rc) plan_cpu(c);
    return rc;
}

int coord_spawn(struct coord *c, struct coord_worker *w)
{
    char endpoint[PATH_MAX + 16];
    ctl_endpoint(endpoint, sizeof endpoint, c->rundir, "control.sock");
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        nb_log("cannot fork for %s: %s", w->role, strerror(errno));
        return NB_EIO;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* the coordinator died before prctl */
        int fd = open(w->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        /* Processes with OpenMP teams share the cores: libgomp's default
         * spinning wait holds a core a peer process needs (measured on 2 cores:
         * 371 vs 1332 tok/s all-RAM).  Passive waiting, unless the user chose
         * or the cores suffice for the cpu-moe-worker to spin (cpu_plan.c). */
        if (!w->omp_spin) setenv("OMP_WAIT_POLICY", "passive", 0);
        /* The regions, for shm_region_open: a description of their own
         * (opened through /proc, no close-on-exec), so that no lock the
         * coordinator holds on its descriptions travels with them. */
        const struct shm_region *regs[] = {&c->step_reg,    &c->moe_reg,   &c->stats_reg,   &c->experts_reg,
                                           &c->staging_reg, &c->pager_reg, &c->pager_gw_reg};
        for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++) {
            char fdpath[64];
            if (!regs[i]->base || regs[i]->fd < 0) continue;
            snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", regs[i]->fd);
            if (open(fdpath, O_RDWR) < 0) fprintf(stderr, "cannot hand %s down: %s\n", regs[i]->name, strerror(errno));
        }
        /* The gpu-worker writes this eventfd after each step answer (step.c):
         * a dup, without the coordinator's close-on-exec. */
        char step_fd[16] = "";
        if (!strcmp(w->role, "gpu-worker") && c->stepper) snprintf(step_fd, sizeof step_fd, "%d", dup(coord_step_fd(c)));
        char *argv[] = {w->binary, "--control", endpoint, step_fd[0] ? "--step-fd" : NULL, step_fd, NULL};
        execv(w->binary, argv);
        fprintf(stderr, "cannot exec %s: %s\n", w->binary, strerror(errno));
        _exit(127);
    }
    w->pid = pid, w->state = W_STARTING;
    w->started_at = w->last_beat = coord_now();
    nb_log("started %s (pid %d, log %s)", w->role, (int)pid, w->log_path);
    return 0;
}

/* The worker's configure (core/ctl's encoder: the one definition).  Each
 * ring pair lies at offset 0 of the region of its name; the staging slots:
 * the pager serves them all, the gpu-worker owns 0 (PLE rows), the
 * cpu-moe-worker 1-3. */
static void send_configure(struct coord *c, struct coord_worker *w)
{
    char err[256];
    struct ctl_configure k = {.threads = w->threads, .ring_spin_us = w->ring_spin_us, .stats_worker = w->stats_block};
    if (snprintf(k.instance, sizeof k.instance, "%s", shm_instance_id(c->inst)) >= (int)sizeof k.instance ||
        snprintf(k.model, sizeof k.model, "%s", c->model_path) >= (int)sizeof k.model ||
        snprintf(k.mtp, sizeof k.mtp, "%s", c->mtp_path ? c->mtp_path : "") >= (int)sizeof k.mtp ||
        snprintf(k.prepared, sizeof k.prepared, "%s", c->prepared ? c->prepared : "") >= (int)sizeof k.prepared ||
        snprintf(k.placement, sizeof k.placement, "%s", c->placement_path) >= (int)sizeof k.placement) {
        nb_log("cannot configure %s: a path is longer than %d bytes", w->role, CTL_PATH_MAX - 1);
        return;
    }
    const bool has = c->staging_reg.base != NULL, pager = w->stats_block == 2, gpu = w->stats_block == 0;
    k.staging_slot_bytes = has ? (c->tiers.max_blob_bytes + 4095) / 4096 * 4096 : 0;
    k.staging_slots = has ? COORD_STAGING_SLOTS : 0;
    k.staging_first = has && !pager && !gpu ? 1 : 0;
    k.staging_count = !has ? 0 : pager ? COORD_STAGING_SLOTS : gpu ? 1 : COORD_STAGING_SLOTS - 1;
    snprintf(k.backend, sizeof k.backend, "%s", c->backend);
    snprintf(k.kernels, sizeof k.kernels, "%s", w->kernels ? w->kernels : "");
    k.vram_budget = c->vram_budget, k.n_ctx = c->ctx, k.layer_times = c->layer_times || !c->gw_cuda;
    k.stream_rows = (uint32_t)c->stream_rows;
    k.slots_adaptive = c->slots_adaptive, k.slots_every = (uint32_t)c->slots_every, k.slots_swaps = (uint32_t)c->slots_swaps;
    k.slots_decay = c->slots_decay, k.slots_hysteresis = c->slots_hysteresis;
    if (gpu && c->cache) {
        snprintf(k.cache_dir, sizeof k.cache_dir, "%s", c->cache_cfg.dir);
        snprintf(k.cache_identity, sizeof k.cache_identity, "%s", coord_cache_identity(c));
    }
    cJSON *m = ctl_configure_to_json(&k);
    if (!m) nb_log("cannot configure %s: out of memory", w->role);
    else if (ctl_send(c->router, w->role, m, err, sizeof err)) nb_log("cannot configure %s: %s", w->role, err);
    cJSON_Delete(m);
}

void coord_on_worker_msg(struct coord *c, const char *peer, const cJSON *msg)
{
    struct coord_worker *w = coord_worker_by_role(c, peer);
    const char *t = ctl_type(msg);
    if (!w) {
        nb_log("message '%s' from unknown peer '%s' ignored", t, peer);
        return;
    }
    w->last_beat = coord_now();
    if (!strcmp(t, "hello")) {
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(msg, "pid");
        if (cJSON_IsNumber(pid) && (pid_t)pid->valueint != w->pid) {
            nb_log("hello from %s pid %d, expected %d: ignored", peer, pid->valueint, (int)w->pid);
            return;
        }
        send_configure(c, w);
        w->state = W_CONFIGURING;
        changed(c);
    } else if (!strcmp(t, "ready")) {
        if (w->state != W_READY) nb_log("%s ready (pid %d, %.2f s after start)", peer, (int)w->pid, coord_now() - w->started_at);
        w->state = W_READY, w->failed_starts = 0;
        changed(c);
    } else if (!strcmp(t, "error")) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(msg, "message");
        nb_log("%s reports an error: %s", peer, cJSON_IsString(m) ? m->valuestring : "(no message)");
    } else if (strcmp(t, "heartbeat")) {
        nb_log("unexpected '%s' from %s", t, peer);
    }
}

/* Reaps every child that exited; marks its worker down.  True when one was. */
static bool reap(struct coord *c)
{
    bool any = false;
    int status;
    pid_t pid;
    c->got_sigchld = 0;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < c->n_workers; i++) {
            struct coord_worker *w = &c->w[i];
            if (w->pid != pid) continue;
            if (WIFSIGNALED(status)) nb_log("%s (pid %d) killed by signal %d", w->role, (int)pid, WTERMSIG(status));
            else nb_log("%s (pid %d) exited with status %d", w->role, (int)pid, WEXITSTATUS(status));
            c->deaths++, any = true;
            if (w->stats_block == 0) coord_cache_ram_lost(c); /* the gpu-worker held the checkpoints' RAM copies */
            if (w->state != W_READY) w->failed_starts++;
            w->pid = 0, w->state = w->failed_starts >= COORD_MAX_FAILED_STARTS ? W_FAILED : W_DOWN;
            w->down_since = coord_now();
            if (w->state == W_FAILED) nb_log("%s failed %d starts in a row: giving up (see %s)", w->role, w->failed_starts, w->log_path);
        }
    }
    return any;
}

void coord_supervise(struct coord *c)
{
    bool any = reap(c);
    double now = coord_now();
    for (int i = 0; i < c->n_workers && !c->stop; i++) {
        struct coord_worker *w = &c->w[i];
        bool busy = c->step_in_flight && w->stats_block == 0;
        if (w->state == W_DOWN && now - w->down_since >= 0.2 * (1 + w->failed_starts)) {
            w->restarts += w->started_at > 0;
            coord_spawn(c, w);
            any = true;
        } else if (w->pid > 0 && !busy && w->state == W_READY && now - w->last_beat > COORD_HEARTBEAT_MISS_S) {
            nb_log("%s (pid %d) missed heartbeats for %.1f s: killing it", w->role, (int)w->pid, now - w->last_beat);
            kill(w->pid, SIGKILL);
            w->last_beat = now; /* reaped on a later tick */
        } else if (w->pid > 0 && w->state == W_CONFIGURING && now - w->last_beat > COORD_CONFIGURE_SILENCE_S) {
            nb_log("%s (pid %d) silent for %.0f s while setting up: killing it", w->role, (int)w->pid, now - w->last_beat);
            kill(w->pid, SIGKILL);
            w->last_beat = now; /* reaped on a later tick */
        } else if (w->state == W_STARTING && now - w->started_at > COORD_READY_TIMEOUT_S) {
            nb_log("%s (pid %d) sent no hello in %.0f s: killing it", w->role, (int)w->pid, COORD_READY_TIMEOUT_S);
            kill(w->pid, SIGKILL);
            w->started_at = now;
        }
    }
    if (any) changed(c);
}

void coord_workers_serve(struct coord *c)
{
    char err[256], peer[64];
    cJSON *msg;
    while (ctl_recv(c->router, 0, peer, sizeof peer, &msg, err, sizeof err) == 0) {
        coord_on_worker_msg(c, peer, msg);
        cJSON_Delete(msg);
    }
}

void coord_restart(struct coord *c, struct coord_worker *w)
{
    (void)c;
    if (w->pid > 0) {
        nb_log("restarting %s (pid %d) on request", w->role, (int)w->pid);
        kill(w->pid, SIGKILL);
    }
    if (w->state == W_FAILED) w->state = W_DOWN, w->failed_starts = 0;
}

/* shutdown to each, 3 s to exit, then SIGKILL; every child reaped. */
void coord_stop_workers(struct coord *c)
{
    char err[256];
    cJSON *m = ctl_msg("shutdown");
    for (int i = 0; i < c->n_workers; i++)
        if (c->w[i].pid > 0) ctl_send(c->router, c->w[i].role, m, err, sizeof err);
    cJSON_Delete(m);
    double t0 = coord_now();
    for (;;) {
        int alive = 0;
        for (int i = 0; i < c->n_workers; i++) {
            struct coord_worker *w = &c->w[i];
            if (w->pid <= 0) continue;
            int status;
            if (waitpid(w->pid, &status, WNOHANG) == w->pid) {
                nb_log("%s (pid %d) stopped", w->role, (int)w->pid);
                w->pid = 0, w->state = W_DOWN;
            } else if (coord_now() - t0 > 3.0) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, &status, 0);
                nb_log("%s (pid %d) killed: it did not stop in 3 s", w->role, (int)w->pid);
                w->pid = 0, w->state = W_DOWN;
            } else {
                alive++;
            }
        }
        if (!alive) return;
        usleep(20000);
    }
}
