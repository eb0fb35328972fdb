/* shm_fixture.h — what the shm suites share: an instance per test that must
 * leave nothing in /dev/shm, forked children that report through their exit
 * status, and a pipe to hand a child a word.  Children never call cr_assert
 * (they are not the test process): they _exit with a code the test checks. */
#ifndef NB_TEST_SHM_FIXTURE_H
#define NB_TEST_SHM_FIXTURE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shm/shm.h"

static char fx_err[256];

/* Entries of SHM_DIR whose name starts with "nebula-<id>-". */
static inline int fx_count_entries(const char *id)
{
    char prefix[SHM_NAME_MAX];
    snprintf(prefix, sizeof prefix, SHM_PREFIX "%s-", id);
    DIR *d = opendir(SHM_DIR);
    cr_assert(d, "opendir %s", SHM_DIR);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static inline shm_instance *fx_instance(void)
{
    shm_instance *inst = NULL;
    int rc = shm_instance_create(&inst, NULL, fx_err, sizeof fx_err);
    cr_assert_eq(rc, 0, "shm_instance_create: %s", fx_err);
    return inst;
}

/* Destroys the instance and checks /dev/shm holds nothing of it any more. */
static inline void fx_instance_end(shm_instance *inst)
{
    char id[SHM_ID_MAX];
    snprintf(id, sizeof id, "%s", shm_instance_id(inst));
    int rc = shm_instance_destroy(inst, fx_err, sizeof fx_err);
    cr_assert_eq(rc, 0, "shm_instance_destroy: %s", fx_err);
    cr_assert_eq(fx_count_entries(id), 0, "objects of instance %s left in %s", id, SHM_DIR);
}

static inline struct shm_region fx_region(shm_instance *inst, const char *what, size_t bytes)
{
    struct shm_region r;
    int rc = shm_region_create(inst, what, bytes, &r, fx_err, sizeof fx_err);
    cr_assert_eq(rc, 0, "shm_region_create %s: %s", what, fx_err);
    return r;
}

/* A new handle on a region of instance id, and a role of the ring at offset
 * 0 through it: what a worker does.  NULL on failure (fx_err says why), so a
 * child can use it too. */
static inline ring *fx_attach(const char *id, const char *what, enum ring_role role, const struct ring_options *opt,
                              struct shm_region *reg)
{
    if (shm_region_open(id, what, reg, fx_err, sizeof fx_err) != 0) return NULL;
    ring *r = NULL;
    if (ring_attach(&r, reg, 0, role, opt, fx_err, sizeof fx_err) != 0) shm_region_close(reg);
    return r;
}

static inline void fx_detach(ring *r, struct shm_region *reg)
{
    ring_detach(r);
    shm_region_close(reg);
}

/* An instance with a ring formatted at offset 0 of its region "ring". */
struct fx_ring {
    shm_instance *inst;
    struct shm_region reg;
    char id[SHM_ID_MAX];
};

static inline struct fx_ring fx_ring_new(const struct ring_geometry *g)
{
    struct fx_ring f;
    f.inst = fx_instance();
    f.reg = fx_region(f.inst, "ring", ring_bytes(g));
    cr_assert_eq(ring_format(&f.reg, 0, g, fx_err, sizeof fx_err), 0, "%s", fx_err);
    snprintf(f.id, sizeof f.id, "%s", shm_instance_id(f.inst));
    return f;
}

static inline void fx_ring_end(struct fx_ring *f)
{
    shm_region_close(&f->reg);
    fx_instance_end(f->inst);
}

/* Both sides of that ring in this process, each through its own handle (so
 * each holds its own attach lock and sees the other's). */
struct fx_sides {
    ring *p, *c;
    struct shm_region rp, rc;
};

static inline struct fx_sides fx_sides_attach(const char *id, const struct ring_options *opt)
{
    struct fx_sides s;
    s.p = fx_attach(id, "ring", RING_PRODUCER, opt, &s.rp);
    cr_assert(s.p, "producer: %s", fx_err);
    s.c = fx_attach(id, "ring", RING_CONSUMER, opt, &s.rc);
    cr_assert(s.c, "consumer: %s", fx_err);
    return s;
}

static inline void fx_sides_detach(struct fx_sides *s)
{
    fx_detach(s->p, &s->rp);
    fx_detach(s->c, &s->rc);
}

/* Runs fn(arg) in a child that exits with its return value (0..255). */
static inline pid_t fx_spawn(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork");
    if (pid == 0) _exit(fn(arg));
    return pid;
}

/* The child's exit code; -signal if a signal ended it. */
static inline int fx_reap(pid_t pid)
{
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid, "waitpid");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static inline double fx_ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static inline void fx_now(struct timespec *t) { clock_gettime(CLOCK_MONOTONIC, t); }

/* A pipe for "go" / "ready" words between a test and its child. */
struct fx_pipe {
    int fd[2];
};
static inline void fx_pipe_open(struct fx_pipe *p) { cr_assert_eq(pipe(p->fd), 0, "pipe"); }
static inline int fx_send(struct fx_pipe *p, const void *buf, size_t n)
{
    return write(p->fd[1], buf, n) == (ssize_t)n ? 0 : -1;
}
static inline int fx_recv(struct fx_pipe *p, void *buf, size_t n)
{
    return read(p->fd[0], buf, n) == (ssize_t)n ? 0 : -1;
}

#endif
