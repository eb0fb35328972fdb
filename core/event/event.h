/* event.h — one event loop: file descriptors, timers, callbacks (after redis's ae.c).
 *
 * A process that has several things to wait for (sockets, an eventfd that
 * another thread writes, periodic checks) registers each with a callback and
 * calls event_run() once.  The one idea: a callback runs to its end and
 * returns; it never waits for the loop (it cannot: event_run() and
 * event_run_once() abort when called from inside a callback), so a long job
 * is a state machine whose steps are callbacks, and nothing re-enters.
 *
 * Readiness is level-triggered poll(2) on the registered fds.  An fd that is
 * edge-triggered by nature (ZeroMQ's ZMQ_FD) must be drained by its callback
 * until empty, and checked again in the before-poll hook: a send on the same
 * socket may have consumed the edge.  Timers run on CLOCK_MONOTONIC; a
 * timer's callback returns the seconds until it runs again, or EVENT_TIMER_END.
 * Registering or removing fds and timers from inside a callback is allowed
 * and takes effect at once (a removed one is not called again). */
#ifndef NB_EVENT_H
#define NB_EVENT_H

#include <stddef.h>

typedef struct event_loop event_loop;

/* fd readable (or hung up / in error: the callback's read finds out). */
typedef void (*event_fd_fn)(event_loop *l, int fd, void *ctx);
/* Returns the delay in seconds until the next call, or EVENT_TIMER_END. */
typedef double (*event_timer_fn)(event_loop *l, void *ctx);
/* Runs before each wait (redis's beforeSleep). */
typedef void (*event_hook_fn)(event_loop *l, void *ctx);

#define EVENT_TIMER_END (-1.0)
#define EVENT_MAX_FDS 16
#define EVENT_MAX_TIMERS 32

int event_loop_new(event_loop **out, char *err, size_t errlen);
void event_loop_free(event_loop *l); /* NULL is allowed */

/* Watches fd for reading.  0, NB_EINVAL (already watched) or NB_ENOMEM (full). */
int event_add_fd(event_loop *l, int fd, event_fd_fn fn, void *ctx);
void event_del_fd(event_loop *l, int fd);

/* Calls fn after_s seconds from now (0: on the next round).  Returns the
 * timer's id (> 0) or NB_ENOMEM when the table is full. */
long long event_add_timer(event_loop *l, double after_s, event_timer_fn fn, void *ctx);
void event_del_timer(event_loop *l, long long id); /* an id that ended is ignored */

void event_set_before_poll(event_loop *l, event_hook_fn fn, void *ctx);

/* Runs rounds until event_stop().  Aborts when called from a callback. */
void event_run(event_loop *l);
/* One round: waits up to timeout_ms (-1: until an event; sooner when a timer
 * is due), then runs what is ready.  Returns the callbacks run.  Aborts when
 * called from a callback. */
int event_run_once(event_loop *l, int timeout_ms);
/* Makes event_run() return after the current round. */
void event_stop(event_loop *l);

double event_now(void); /* CLOCK_MONOTONIC seconds */

#endif
