/* event.c — the event loop of event.h: poll(2) over a small table of fds, a
 * small table of timers scanned linearly (as ae.c does: a process has a
 * handful), and a flag that makes a nested run an abort.
 *
 * Removal inside a callback only marks the entry (fn = NULL): the tables are
 * compacted between rounds, so the index a round is walking stays valid and a
 * removed entry is never called. */
#include "core/event/event.h"

#include "core/util/err.h"
#include "core/util/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fd_event {
    int fd;
    event_fd_fn fn; /* NULL: removed */
    void *ctx;
};

struct timer_event {
    long long id;
    double when;
    event_timer_fn fn; /* NULL: removed */
    void *ctx;
};

struct event_loop {
    struct fd_event fds[EVENT_MAX_FDS];
    int n_fds;
    struct timer_event timers[EVENT_MAX_TIMERS];
    int n_timers;
    long long next_id;
    event_hook_fn before_poll;
    void *before_ctx;
    bool running; /* inside a round: a nested run is a bug */
    bool stop;
};

double event_now(void) { return nb_now_s(); }

int event_loop_new(event_loop **out, char *err, size_t errlen)
{
    if (!(*out = calloc(1, sizeof **out))) return nb_errf(err, errlen, NB_ENOMEM, "event loop: out of memory");
    return 0;
}

void event_loop_free(event_loop *l) { free(l); }

int event_add_fd(event_loop *l, int fd, event_fd_fn fn, void *ctx)
{
    for (int i = 0; i < l->n_fds; i++)
        if (l->fds[i].fn && l->fds[i].fd == fd) return NB_EINVAL;
    if (l->n_fds == EVENT_MAX_FDS) return NB_ENOMEM;
    l->fds[l->n_fds++] = (struct fd_event){fd, fn, ctx};
    return 0;
}

void event_del_fd(event_loop *l, int fd)
{
    for (int i = 0; i < l->n_fds; i++)
        if (l->fds[i].fn && l->fds[i].fd == fd) l->fds[i].fn = NULL;
}

long long event_add_timer(event_loop *l, double after_s, event_timer_fn fn, void *ctx)
{
    if (l->n_timers == EVENT_MAX_TIMERS) return NB_ENOMEM;
    long long id = ++l->next_id;
    l->timers[l->n_timers++] = (struct timer_event){id, event_now() + (after_s > 0 ? after_s : 0), fn, ctx};
    return id;
}

void event_del_timer(event_loop *l, long long id)
{
    for (int i = 0; i < l->n_timers; i++)
        if (l->timers[i].id == id) l->timers[i].fn = NULL;
}

void event_set_before_poll(event_loop *l, event_hook_fn fn, void *ctx) { l->before_poll = fn, l->before_ctx = ctx; }

void event_stop(event_loop *l) { l->stop = true; }

static void compact(event_loop *l)
{
    int k = 0;
    for (int i = 0; i < l->n_fds; i++)
        if (l->fds[i].fn) l->fds[k++] = l->fds[i];
    l->n_fds = k;
    k = 0;
    for (int i = 0; i < l->n_timers; i++)
        if (l->timers[i].fn) l->timers[k++] = l->timers[i];
    l->n_timers = k;
}

static void enter(event_loop *l)
{
    if (l->running) {
        fprintf(stderr, "event loop: run called from inside a callback (the loop is never re-entered)\n");
        abort();
    }
    l->running = true;
}

int event_run_once(event_loop *l, int timeout_ms)
{
    enter(l);
    int ran = 0;
    if (l->before_poll) l->before_poll(l, l->before_ctx);
    if (l->stop) timeout_ms = 0; /* the hook asked to stop: finish this round without waiting */
    compact(l);
    /* The wait ends at the earliest timer at the latest. */
    double now = event_now();
    for (int i = 0; i < l->n_timers; i++) {
        double ms = (l->timers[i].when - now) * 1e3;
        int t = ms <= 0 ? 0 : ms > 1e9 ? 1000000000 : (int)ms + 1;
        if (timeout_ms < 0 || t < timeout_ms) timeout_ms = t;
    }
    struct pollfd p[EVENT_MAX_FDS];
    int n = l->n_fds;
    for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = l->fds[i].fd, .events = POLLIN};
    int rc = poll(p, (nfds_t)n, timeout_ms);
    if (rc < 0 && errno != EINTR) {
        fprintf(stderr, "event loop: poll: %s\n", strerror(errno));
        rc = 0;
    }
    for (int i = 0; rc > 0 && i < n; i++) {
        if (!p[i].revents || !l->fds[i].fn) continue;
        l->fds[i].fn(l, l->fds[i].fd, l->fds[i].ctx);
        ran++;
    }
    /* Timers due now, each once per round (one added meanwhile waits for the next). */
    now = event_now();
    int nt = l->n_timers;
    for (int i = 0; i < nt; i++) {
        struct timer_event *t = &l->timers[i];
        if (!t->fn || t->when > now) continue;
        double again = t->fn(l, t->ctx);
        ran++;
        t = &l->timers[i]; /* the table does not move during a round; re-read for clarity */
        if (!t->fn) continue; /* the callback removed it */
        if (again < 0) t->fn = NULL;
        else t->when = event_now() + again;
    }
    l->running = false;
    return ran;
}

void event_run(event_loop *l)
{
    l->stop = false;
    while (!l->stop) event_run_once(l, -1);
}
