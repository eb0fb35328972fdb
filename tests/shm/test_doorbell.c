/* test_doorbell.c — waiting (shm/doorbell.c): a sleeper in FUTEX_WAIT is woken
 * by the other side, no wake call is made when nobody sleeps, a dead or
 * departed peer ends a wait with SHM_EPEER, a silent live one with
 * SHM_ETIMEDOUT.  Peer checks are set to 10 s where a test must prove that
 * the wake itself (not a periodic check) ended the sleep. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "shm_fixture.h"

static const struct ring_geometry geo = {2, 1, 0, 256};

static uint32_t word(const struct shm_region *r, size_t off) { return *(volatile uint32_t *)(r->base + off); }

/* The state letter of /proc/<pid>/stat ('S': asleep in the kernel). */
static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p ? p[2] : '?';
}

static const struct ring_options sleep_at_once = {.mode = RING_WAIT_FUTEX, .spin_ns = 1, .peer_check_ns = 10000000000ull};

/* Child: waits until the parent sleeps (its flag word set and the kernel says
 * 'S'), then publishes (producer) or releases (consumer) once, and stays
 * attached until the parent says it is done (a detach would wake it too).
 * Exits 0 if it made exactly one wake call. */
struct waker {
    const char *id;
    enum ring_role role;
    size_t flag_offset; /* the parent's sleeping flag */
    struct fx_pipe done;
};

static int wake_parent(void *arg)
{
    struct waker *w = arg;
    struct shm_region reg;
    ring *r = fx_attach(w->id, "ring", w->role, NULL, &reg);
    if (!r) return 10;
    close(w->done.fd[1]); /* EOF when the parent is gone */
    pid_t parent = getppid();
    int waited_ms = 0;
    while (!(word(&reg, w->flag_offset) == 1 && proc_state(parent) == 'S')) {
        if (++waited_ms > 5000) return 11;
        usleep(1000);
    }
    usleep(20000); /* well inside FUTEX_WAIT now */
    struct ring_slot s;
    if (w->role == RING_PRODUCER) {
        if (ring_reserve(r, &s, 0, fx_err, sizeof fx_err) != 0) return 12;
        s.hdr->tag = 77;
        if (ring_publish(r, fx_err, sizeof fx_err) != 0) return 13;
    } else {
        if (ring_wait(r, &s, 0, fx_err, sizeof fx_err) != 0) return 14;
        if (ring_release(r, fx_err, sizeof fx_err) != 0) return 15;
    }
    uint64_t wakes = ring_get_counters(r).wakes;
    char one;
    fx_recv(&w->done, &one, 1);
    fx_detach(r, &reg);
    return wakes == 1 ? 0 : 16;
}

Test(doorbell, a_consumer_asleep_in_futex_wait_is_woken, .timeout = 30)
{
    struct fx_ring f = fx_ring_new(&geo);
    struct shm_region rc;
    ring *c = fx_attach(f.id, "ring", RING_CONSUMER, &sleep_at_once, &rc);
    cr_assert(c, "%s", fx_err);
    struct waker w = {f.id, RING_PRODUCER, 192 /* consumer_sleeping */, {{0}}};
    fx_pipe_open(&w.done);
    pid_t pid = fx_spawn(wake_parent, &w);
    struct ring_slot s;
    struct timespec t0;
    fx_now(&t0);
    int rc_wait = ring_wait(c, &s, 8000000000ull, fx_err, sizeof fx_err);
    cr_assert_eq(rc_wait, 0, "%s", fx_err);
    cr_assert_eq(s.hdr->tag, 77);
    cr_assert_lt(fx_ms_since(&t0), 4000, "woken by the producer, not by a timeout");
    cr_assert_geq(ring_get_counters(c).sleeps, 1, "it did sleep");
    cr_assert_eq(word(&f.reg, 192), 0, "sleeping flag cleared");
    cr_assert_eq(fx_send(&w.done, "", 1), 0);
    cr_assert_eq(fx_reap(pid), 0, "the producer saw us asleep and made one wake call");
    fx_detach(c, &rc);
    fx_ring_end(&f);
}

Test(doorbell, a_producer_asleep_on_a_full_ring_is_woken, .timeout = 30)
{
    struct fx_ring f = fx_ring_new(&geo);
    struct shm_region rp;
    ring *p = fx_attach(f.id, "ring", RING_PRODUCER, &sleep_at_once, &rp);
    cr_assert(p, "%s", fx_err);
    struct ring_slot s;
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
    }
    struct waker w = {f.id, RING_CONSUMER, 256 /* producer_sleeping */, {{0}}};
    fx_pipe_open(&w.done);
    pid_t pid = fx_spawn(wake_parent, &w);
    struct timespec t0;
    fx_now(&t0);
    cr_assert_eq(ring_reserve(p, &s, 8000000000ull, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_lt(fx_ms_since(&t0), 4000);
    cr_assert_geq(ring_get_counters(p).sleeps, 1);
    cr_assert_eq(ring_get_counters(p).full_waits, 1);
    cr_assert_eq(fx_send(&w.done, "", 1), 0);
    cr_assert_eq(fx_reap(pid), 0, "the consumer saw us asleep and made one wake call");
    fx_detach(p, &rp);
    fx_ring_end(&f);
}

Test(doorbell, no_wake_calls_when_nobody_sleeps)
{
    struct fx_ring f = fx_ring_new(&geo);
    struct fx_sides sd = fx_sides_attach(f.id, NULL);
    ring *p = sd.p, *c = sd.c;
    struct ring_slot s;
    for (int k = 0; k < 100; k++) {
        cr_assert_eq(ring_reserve(p, &s, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_publish(p, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_wait(c, &s, 0, fx_err, sizeof fx_err), 0);
        cr_assert_eq(ring_release(c, fx_err, sizeof fx_err), 0);
    }
    cr_assert_eq(ring_get_counters(p).wakes, 0);
    cr_assert_eq(ring_get_counters(c).wakes, 0);
    cr_assert_eq(ring_get_counters(p).messages, 100);
    fx_sides_detach(&sd);
    fx_ring_end(&f);
}

/* Child: attaches to `role`, says so, then is killed (SIGKILL) or detaches
 * cleanly after a pause, or just stays silent until killed. */
enum exit_kind { DIES, DETACHES, STAYS_SILENT };
struct leaver {
    const char *id;
    enum ring_role role;
    enum exit_kind how;
    struct fx_pipe ready;
};

static int leave(void *arg)
{
    struct leaver *l = arg;
    struct shm_region reg;
    ring *r = fx_attach(l->id, "ring", l->role, NULL, &reg);
    if (!r) return 10;
    char one = 1;
    fx_send(&l->ready, &one, 1);
    if (l->how == STAYS_SILENT) pause();
    usleep(100000); /* the parent is waiting by now */
    if (l->how == DIES) raise(SIGKILL);
    fx_detach(r, &reg);
    return 0;
}

/* The test process waits as the peer of child_role while the child leaves `how`. */
static void peer_leaves(enum ring_role child_role, enum exit_kind how, const struct ring_options *opt)
{
    struct fx_ring f = fx_ring_new(&geo);
    struct leaver l = {f.id, child_role, how, {{0}}};
    fx_pipe_open(&l.ready);
    struct shm_region reg;
    enum ring_role mine = child_role == RING_PRODUCER ? RING_CONSUMER : RING_PRODUCER;
    ring *r = fx_attach(f.id, "ring", mine, opt, &reg);
    cr_assert(r, "%s", fx_err);
    struct ring_slot s;
    if (mine == RING_PRODUCER) /* fill the ring so that the next reserve waits */
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(ring_reserve(r, &s, 0, fx_err, sizeof fx_err), 0);
            cr_assert_eq(ring_publish(r, fx_err, sizeof fx_err), 0);
        }
    pid_t pid = fx_spawn(leave, &l);
    char one;
    cr_assert_eq(fx_recv(&l.ready, &one, 1), 0);
    struct timespec t0;
    fx_now(&t0);
    int rc = mine == RING_PRODUCER ? ring_reserve(r, &s, 8000000000ull, fx_err, sizeof fx_err)
                                   : ring_wait(r, &s, 8000000000ull, fx_err, sizeof fx_err);
    double ms = fx_ms_since(&t0);
    cr_assert_eq(rc, SHM_EPEER, "rc %d: %s", rc, fx_err);
    cr_assert(strstr(fx_err, "is gone"), "%s", fx_err);
    cr_assert_lt(ms, 3000, "noticed within %.0f ms, not at the 8 s timeout", ms);
    int status = fx_reap(pid); /* reaped only now: while we waited it was a zombie */
    cr_assert_eq(status, how == DETACHES ? 0 : -SIGKILL);
    fx_detach(r, &reg);
    fx_ring_end(&f);
}

static const struct ring_options futex_default = {.mode = RING_WAIT_FUTEX};
static const struct ring_options spin_only = {.mode = RING_WAIT_SPIN};
static const struct ring_options slow_checks = {.mode = RING_WAIT_FUTEX, .peer_check_ns = 10000000000ull};

Test(doorbell, consumer_wait_ends_when_the_producer_is_killed, .timeout = 30)
{
    peer_leaves(RING_PRODUCER, DIES, &futex_default);
}

Test(doorbell, consumer_spin_ends_when_the_producer_is_killed, .timeout = 30)
{
    peer_leaves(RING_PRODUCER, DIES, &spin_only);
}

Test(doorbell, producer_wait_ends_when_the_consumer_is_killed, .timeout = 30)
{
    peer_leaves(RING_CONSUMER, DIES, &futex_default);
}

Test(doorbell, a_clean_detach_wakes_the_sleeping_peer_at_once, .timeout = 30)
{
    peer_leaves(RING_PRODUCER, DETACHES, &slow_checks); /* 10 s checks: only the detach wake can end it */
    peer_leaves(RING_CONSUMER, DETACHES, &slow_checks);
}

Test(doorbell, a_silent_live_peer_times_out, .timeout = 30)
{
    struct ring_options quick = {.mode = RING_WAIT_FUTEX};
    struct fx_ring f = fx_ring_new(&geo);
    struct leaver l = {f.id, RING_PRODUCER, STAYS_SILENT, {{0}}};
    fx_pipe_open(&l.ready);
    struct shm_region reg;
    ring *c = fx_attach(f.id, "ring", RING_CONSUMER, &quick, &reg);
    cr_assert(c, "%s", fx_err);
    pid_t pid = fx_spawn(leave, &l);
    char one;
    cr_assert_eq(fx_recv(&l.ready, &one, 1), 0);
    struct ring_slot s;
    struct timespec t0;
    fx_now(&t0);
    cr_assert_eq(ring_wait(c, &s, 150000000ull, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "%s", fx_err);
    double ms = fx_ms_since(&t0);
    cr_assert(ms >= 149 && ms < 2000, "timed out after %.0f ms (asked 150)", ms);
    kill(pid, SIGKILL);
    fx_reap(pid);
    fx_detach(c, &reg);
    fx_ring_end(&f);
}

Test(doorbell, a_peer_that_never_attached_is_waited_for_until_the_timeout)
{
    struct fx_ring f = fx_ring_new(&geo);
    struct shm_region reg;
    ring *c = fx_attach(f.id, "ring", RING_CONSUMER, NULL, &reg);
    cr_assert(c, "%s", fx_err);
    struct ring_slot s;
    cr_assert_eq(ring_wait(c, &s, 50000000ull, fx_err, sizeof fx_err), SHM_ETIMEDOUT, "%s", fx_err);
    fx_detach(c, &reg);
    fx_ring_end(&f);
}
