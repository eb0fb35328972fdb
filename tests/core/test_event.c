/* test_event.c — core/event: fd events, timers, removal inside a callback,
 * the before-poll hook, and the abort when a callback runs the loop. */
#include "core/event/event.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct counts {
    int fd_calls, timer_calls, hook_calls;
    int fd;
    long long other;
};

static void on_fd(event_loop *l, int fd, void *ctx)
{
    struct counts *k = ctx;
    uint64_t v;
    (void)l;
    cr_assert_eq(read(fd, &v, sizeof v), (ssize_t)sizeof v);
    k->fd_calls++;
}

static double every_ms(event_loop *l, void *ctx)
{
    struct counts *k = ctx;
    if (++k->timer_calls == 3) event_stop(l);
    return 0.001;
}

Test(event, fd_and_periodic_timer)
{
    event_loop *l;
    char err[128];
    struct counts k = {0};
    cr_assert_eq(event_loop_new(&l, err, sizeof err), 0);
    int fd = eventfd(0, EFD_NONBLOCK);
    cr_assert_eq(event_add_fd(l, fd, on_fd, &k), 0);
    cr_assert_neq(event_add_fd(l, fd, on_fd, &k), 0, "an fd is watched once");
    uint64_t one = 1;
    cr_assert_eq(write(fd, &one, sizeof one), (ssize_t)sizeof one);
    cr_assert_eq(event_run_once(l, 1000), 1);
    cr_assert_eq(k.fd_calls, 1);
    cr_assert_eq(event_run_once(l, 0), 0, "nothing ready: nothing runs");
    cr_assert_gt(event_add_timer(l, 0.001, every_ms, &k), 0);
    event_run(l); /* until the third call stops it */
    cr_assert_eq(k.timer_calls, 3);
    event_del_fd(l, fd);
    cr_assert_eq(write(fd, &one, sizeof one), (ssize_t)sizeof one);
    event_stop(l);
    event_run_once(l, 10);
    cr_assert_eq(k.fd_calls, 1, "a removed fd is not called");
    close(fd);
    event_loop_free(l);
}

static double once(event_loop *l, void *ctx)
{
    (void)l;
    ((struct counts *)ctx)->timer_calls++;
    return EVENT_TIMER_END;
}

static double removes_other(event_loop *l, void *ctx)
{
    struct counts *k = ctx;
    event_del_timer(l, k->other);
    k->timer_calls += 100;
    return EVENT_TIMER_END;
}

Test(event, timer_end_and_removal_in_a_callback)
{
    event_loop *l;
    char err[128];
    struct counts k = {0};
    cr_assert_eq(event_loop_new(&l, err, sizeof err), 0);
    cr_assert_gt(event_add_timer(l, 0, removes_other, &k), 0);
    k.other = event_add_timer(l, 0, once, &k); /* due in the same round, after the first */
    double t0 = event_now();
    event_run_once(l, 1000);
    cr_assert_eq(k.timer_calls, 100, "the removed timer did not run (calls %d)", k.timer_calls);
    cr_assert_lt(event_now() - t0, 0.5, "a due timer ends the wait at once");
    cr_assert_gt(event_add_timer(l, 0.02, once, &k), 0);
    t0 = event_now();
    event_run_once(l, -1);
    cr_assert_geq(event_now() - t0, 0.019, "the wait lasts until the timer");
    cr_assert_eq(k.timer_calls, 101);
    event_run_once(l, 0);
    cr_assert_eq(k.timer_calls, 101, "EVENT_TIMER_END removed it");
    event_loop_free(l);
}

static void hook(event_loop *l, void *ctx)
{
    if (++((struct counts *)ctx)->hook_calls == 2) event_stop(l);
}

Test(event, before_poll_hook_can_stop)
{
    event_loop *l;
    char err[128];
    struct counts k = {0};
    cr_assert_eq(event_loop_new(&l, err, sizeof err), 0);
    event_set_before_poll(l, hook, &k);
    double t0 = event_now();
    cr_assert_gt(event_add_timer(l, 0.01, every_ms, &k), 0);
    event_run(l); /* the hook stops it before the second wait */
    cr_assert_eq(k.hook_calls, 2);
    cr_assert_lt(event_now() - t0, 1.0);
    event_loop_free(l);
}

static double nests(event_loop *l, void *ctx)
{
    (void)ctx;
    event_run_once(l, 0); /* a bug: the loop is never re-entered */
    return EVENT_TIMER_END;
}

Test(event, reentry_aborts, .signal = SIGABRT)
{
    event_loop *l;
    char err[128];
    cr_assert_eq(event_loop_new(&l, err, sizeof err), 0);
    cr_assert_gt(event_add_timer(l, 0, nests, NULL), 0);
    event_run_once(l, 0);
}
