/* test_mailbox.c — the mailbox's protocol (gpu-worker/mailbox.h) without a
 * GPU: the test thread plays the device, running the very step functions
 * k_mailbox_post and k_mailbox_wait run (mailbox_post_open, mailbox_post_publish,
 * mailbox_wait_answer), layer after layer as the stream does, against the
 * backend's remote thread (gpu-worker/mailbox.c) and an answer function
 * that stands for the gw_moe_remote hook.
 *
 * Issue 11's hang: the remote thread remembered the `posted` it saw when it
 * first ran and served only what changed after; a backend's thread starts at
 * its first eval of ≤ 17 rows (the first decode step after a prefill), and
 * when the stream posted layer 0's request before the new thread's first
 * look, that request was taken for seen — nobody answered it, the device
 * waited 120 s and the eval failed "no answer from the remote-expert thread".
 * late_thread makes that order certain (one CPU, the device posting before
 * it yields); the other tests check that every break of the protocol is an
 * error at once, not a wait for an answer nobody will send. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util/err.h"
#include "gpu-worker/mailbox.h"

#define PICKUP_NS 200000000ull /* the test's limits: 0.2 s to take a request, 0.5 s to answer it */
#define ANSWER_NS 500000000ull

struct answers {
    unsigned calls;
    int layers[64];
    int fail_at;    /* layer whose answer fails (-1: none) */
    int sleep_ms;   /* each answer takes this long */
};

static int answer(void *ctx, const struct mailbox_head *h, char *err, size_t errlen)
{
    struct answers *a = ctx;
    unsigned i = __atomic_fetch_add(&a->calls, 1, __ATOMIC_RELAXED);
    if (i < 64) a->layers[i] = h->layer;
    if (a->sleep_ms) {
        struct timespec ts = {a->sleep_ms / 1000, (long)(a->sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (h->layer == a->fail_at) return nb_errf(err, errlen, NB_EIO, "told to fail at layer %d", h->layer);
    return 0;
}

/* The device: the stream's counters and the head. */
struct dev {
    struct mailbox_head *h;
    unsigned int seq, want; /* d_mailbox_seq[0], [1] */
    struct gw_mailbox mailbox;
    struct answers ans;
};

static void dev_open(struct dev *d)
{
    memset(d, 0, sizeof *d);
    /* aligned_alloc wants a size that is a multiple of the alignment (C11) */
    d->h = aligned_alloc(128, (sizeof *d->h + 127) / 128 * 128);
    cr_assert(d->h);
    memset(d->h, 0, sizeof *d->h);
    d->ans.fail_at = -1;
    d->mailbox.head = d->h, d->mailbox.answer = answer, d->mailbox.ctx = &d->ans;
    d->mailbox.pickup_ns = PICKUP_NS, d->mailbox.wait_ns = ANSWER_NS;
}

static void dev_close(struct dev *d)
{
    gw_mailbox_stop(&d->mailbox);
    free(d->h);
}

/* One layer as k_mailbox_post then k_mailbox_wait run it: n misses; the wait's result. */
static int dev_layer(struct dev *d, int layer, int n)
{
    if (mailbox_post_open(d->h, &d->seq, n)) mailbox_post_publish(d->h, &d->seq, &d->want, layer, 1, n);
    else d->want = 0;
    return mailbox_wait_answer(d->h, d->want, PICKUP_NS, ANSWER_NS);
}

/* An eval's start and a clean end, which most tests need. */
static void begin_ok(struct dev *d)
{
    char err[512] = "";
    cr_assert_eq(gw_mailbox_begin(&d->mailbox, err, sizeof err), 0, "%s", err);
}

static void end_ok(struct dev *d)
{
    char err[512] = "";
    cr_assert_eq(gw_mailbox_end(&d->mailbox, err, sizeof err), 0, "%s", err);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A request posted before the new thread first looks at the mailbox is
 * answered.  One CPU, and the device posts before this thread yields it: the
 * new thread mostly runs only after the post (the scheduler may still run it
 * first, so the first eval of 20 fresh backends is played; the code before
 * the fix lost request 1 in about a third of them). */
Test(mailbox, late_thread)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    sched_setaffinity(0, sizeof one, &one); /* the threads made below inherit it */
    for (int run = 0; run < 20; run++) {
        struct dev d;
        dev_open(&d);
        begin_ok(&d); /* starts the thread */
        /* the device posts layer 0's request at once */
        cr_assert(mailbox_post_open(d.h, &d.seq, 6));
        mailbox_post_publish(d.h, &d.seq, &d.want, 0, 1, 6);
        const double t0 = now_s();
        cr_assert_eq(mailbox_wait_answer(d.h, d.want, PICKUP_NS, ANSWER_NS), 0,
                     "run %d: request 1 unanswered (lost %u)", run, d.h->lost);
        cr_assert_lt(now_s() - t0, 0.1);
        cr_assert_eq(dev_layer(&d, 1, 0), 0);
        cr_assert_eq(dev_layer(&d, 2, 6), 0);
        end_ok(&d);
        cr_assert_eq(d.ans.calls, 2);
        dev_close(&d);
    }
}

/* Layers with and without misses in every eval (issue 11's placement: even
 * layers remote), many evals: each request answered once, in order, and the
 * requests posted equal the answers given. */
Test(mailbox, layers_without_misses)
{
    struct dev d;
    dev_open(&d);
    char err[512] = "";
    for (int ev = 0; ev < 50; ev++) {
        const unsigned calls0 = d.ans.calls;
        cr_assert_eq(gw_mailbox_begin(&d.mailbox, err, sizeof err), 0, "eval %d: %s", ev, err);
        for (int l = 0; l < 7; l++) cr_assert_eq(dev_layer(&d, l, l % 2 ? 0 : 6), 0, "eval %d layer %d", ev, l);
        cr_assert_eq(gw_mailbox_end(&d.mailbox, err, sizeof err), 0, "eval %d: %s", ev, err);
        cr_assert_eq(d.ans.calls - calls0, 4, "eval %d", ev);
        if (ev == 0)
            for (int i = 0; i < 4; i++) cr_assert_eq(d.ans.layers[i], 2 * i);
        /* between evals the thread sleeps; an eval of the host path (no posts) in between changes nothing */
        if (ev % 10 == 3) {
            cr_assert_eq(gw_mailbox_idle(&d.mailbox, err, sizeof err), 0, "%s", err);
            begin_ok(&d);
            end_ok(&d);
        }
    }
    cr_assert_eq(d.seq, 200);
    cr_assert_eq(d.h->done, 200);
    dev_close(&d);
}

/* The device's count of requests and the host's answers out of step (a
 * counter cleared behind the stream's back): refused at the next post, and
 * the eval fails at once naming both numbers. */
Test(mailbox, counts_out_of_step)
{
    struct dev d;
    dev_open(&d);
    char err[512] = "";
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 3), 0);
    end_ok(&d);
    d.seq = 0; /* the device's counter reset */
    const double t0 = now_s();
    begin_ok(&d);
    for (int l = 0; l < 4; l++) cr_assert_eq(dev_layer(&d, l, 3), 0, "layer %d posts nothing and waits for nothing", l);
    cr_assert_eq(gw_mailbox_end(&d.mailbox, err, sizeof err), NB_EIO);
    cr_assert_lt(now_s() - t0, 0.1, "not at once");
    cr_assert(strstr(err, "out of step") && strstr(err, "posted 0 requests but 1 were answered"), "%s", err);
    cr_assert_eq(d.ans.calls, 1);
    dev_close(&d);
}

/* A request number that skips one (a post the host never saw): the thread
 * marks it at once and answers, so the device's wait ends. */
Test(mailbox, skipped_request)
{
    struct dev d;
    dev_open(&d);
    char err[512] = "";
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 2), 0);
    d.seq++; /* request 2 posted where the host never saw it (mailbox_post_open would refuse: bypassed) */
    const double t0 = now_s();
    mailbox_post_publish(d.h, &d.seq, &d.want, 1, 1, 2); /* request 3 */
    cr_assert_eq(mailbox_wait_answer(d.h, d.want, PICKUP_NS, ANSWER_NS), 0);
    cr_assert_eq(gw_mailbox_end(&d.mailbox, err, sizeof err), NB_EIO);
    cr_assert_lt(now_s() - t0, 0.1);
    cr_assert(strstr(err, "request 3 posted while 1 was the last answered"), "%s", err);
    cr_assert_eq(d.ans.calls, 1, "the skipped request is not answered with the hook");
    dev_close(&d);
}

/* A request posted where no thread serves (outside an eval, as a graph
 * replayed without mailbox_begin would): the device's wait gives up at the
 * pick-up limit, not the answer's, naming the request; the next eval drops
 * it (its eval failed on it) and runs. */
Test(mailbox, no_server)
{
    struct dev d;
    dev_open(&d);
    char err[512] = "";
    const double t0 = now_s();
    cr_assert_eq(dev_layer(&d, 0, 5), -1);
    const double dt = now_s() - t0;
    cr_assert(dt >= PICKUP_NS / 1e9 * 0.9 && dt < ANSWER_NS / 1e9, "gave up after %.3f s", dt);
    cr_assert_eq(d.h->lost, MAILBOX_LOST_UNTAKEN);
    gw_mailbox_lost_msg(d.h, err, sizeof err);
    cr_assert(strstr(err, "request 1 was not taken"), "%s", err);
    cr_assert_eq(gw_mailbox_idle(&d.mailbox, err, sizeof err), 0, "no hook is running: %s", err);
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 5), 0);
    end_ok(&d);
    cr_assert_eq(d.ans.calls, 1, "the dropped request was not answered with the hook");
    dev_close(&d);
}

/* The thread serves only while an eval runs: a post between evals waits for the next mailbox_begin. */
Test(mailbox, asleep_between_evals)
{
    struct dev d;
    dev_open(&d);
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 1), 0);
    end_ok(&d);
    struct timespec ts = {0, 50000000L}; /* the thread's last spin over, it sleeps */
    nanosleep(&ts, NULL);
    cr_assert_eq(dev_layer(&d, 1, 1), -1); /* nobody serves now */
    cr_assert_eq(d.ans.calls, 1);
    dev_close(&d);
}

/* A failing hook: its message, one call, the later layers post nothing. */
Test(mailbox, hook_failure)
{
    struct dev d;
    dev_open(&d);
    d.ans.fail_at = 2;
    char err[512] = "";
    begin_ok(&d);
    for (int l = 0; l < 7; l++) dev_layer(&d, l, 4);
    cr_assert_eq(gw_mailbox_end(&d.mailbox, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "told to fail at layer 2"), "%s", err);
    cr_assert_eq(d.ans.calls, 3);
    cr_assert_eq(d.seq, 3, "layers after the failure posted");
    d.ans.fail_at = -1; /* the next eval starts clean */
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 4), 0);
    end_ok(&d);
    dev_close(&d);
}

/* A hook that does not return in time: the request was taken, so the wait is
 * the answer's (not the pick-up's); until the hook returns the next eval is
 * refused (no second caller of the hook beside it), then it runs. */
Test(mailbox, slow_hook)
{
    struct dev d;
    dev_open(&d);
    d.ans.sleep_ms = 1300;
    char err[512] = "";
    begin_ok(&d);
    const double t0 = now_s();
    cr_assert_eq(dev_layer(&d, 0, 4), -1);
    const double dt = now_s() - t0;
    cr_assert(dt >= ANSWER_NS / 1e9 * 0.9 && dt < 1.2, "gave up after %.3f s", dt);
    cr_assert_eq(d.h->timed_out, 1);
    cr_assert_eq(d.h->lost, 0, "a taken request is not lost");
    cr_assert_eq(dev_layer(&d, 1, 4), 0, "after a timeout later layers post nothing");
    cr_assert_eq(gw_mailbox_end(&d.mailbox, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "no answer from the remote-expert thread") && strstr(err, "request 1 (layer 0"), "%s", err);
    cr_assert_eq(gw_mailbox_idle(&d.mailbox, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "its hook has not returned"), "%s", err);
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    d.ans.sleep_ms = 0;
    begin_ok(&d);
    cr_assert_eq(dev_layer(&d, 0, 4), 0);
    end_ok(&d);
    cr_assert_eq(d.ans.calls, 2);
    dev_close(&d);
}
