/* step.c — the step ring (coordinator → gpu-worker) as an event source.
 *
 * The ring's responses are announced by a futex doorbell (docs/PROTOCOL.md),
 * which poll(2) cannot watch.  So the gpu-worker also writes an eventfd
 * after each response it publishes: the coordinator creates it, the
 * gpu-worker inherits it (coord_spawn puts it at COORD_STEP_FD and passes
 * --step-fd), and the loop polls it like any other fd.  On its event the
 * main thread takes what the ring holds without waiting: answers whose tag
 * is not the awaited one (a request given up on, or one its dead worker
 * took and its successor served again) are dropped, the awaited one is
 * handed to the caller in place, its slot held until the next send.  The
 * main thread is the ring's only user on this side, producer and consumer.
 *
 * Cost per step: one eventfd write in the gpu-worker and one poll return
 * here — the same one wake-up as the coordinator's old in-line ring wait.
 * (Session 6 measured the first event-loop version, a waiter thread that
 * blocked on the ring and wrote the eventfd itself, at 0.2–0.7 ms more per
 * decode token on the GPU machine, whose cores the workers' spinning
 * threads fill: two wake-ups in a row, each waiting for a core.) */
#include "coordinator/coord.h"

#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/step_proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct coord_step {
    ring *resp;
    int efd;
    uint64_t want; /* the tag awaited (0: none) */
    bool held;     /* the last answer's slot, handed out in place, not yet released */
};

static void release_held(struct coord_step *s)
{
    char err[200];
    if (!s->held) return;
    s->held = false;
    if (ring_release(s->resp, err, sizeof err)) nb_log("step ring: %s", err);
}

int coord_step_open(struct coord *c, char *err, size_t errlen)
{
    struct coord_step *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    s->resp = c->step.resp;
    c->stepper = s;
    /* CLOEXEC here; coord_spawn's dup2 gives the gpu-worker its own copy */
    if ((s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return nb_errf(err, errlen, NB_EIO, "eventfd: %s", strerror(errno));
    return 0;
}

void coord_step_close(struct coord *c)
{
    struct coord_step *s = c->stepper;
    if (!s) return;
    release_held(s);
    if (s->efd >= 0) close(s->efd);
    free(s);
    c->stepper = NULL;
}

int coord_step_fd(const struct coord *c) { return c->stepper ? c->stepper->efd : -1; }

int coord_step_send(struct coord *c, uint32_t op, const int32_t *ids, int n, uint32_t flags, char *err, size_t errlen)
{
    struct coord_step *s = c->stepper;
    struct ring_slot slot;
    release_held(s); /* the previous answer's payload is no longer needed */
    /* One step is in flight at a time and the ring has two slots: a slot is
     * free unless a dead worker left one taken, which its successor serves
     * (and coord_step_take drops) at once. */
    int rc = ring_reserve(c->step.req, &slot, 1000000000ull, err, errlen);
    if (rc) return nb_errf(err, errlen, NB_EIO, "step ring: no free slot (%s)", shm_strerror(rc));
    uint64_t tag = ++c->next_tag;
    *slot.hdr = (struct ring_slot_header){.layer = op, .n_tokens = (uint32_t)n, .payload_bytes = (uint32_t)n * 4, .tag = tag,
                                          .flags = op == STEP_RESET ? 0 : flags};
    if (n) memcpy(slot.payload, ids, (size_t)n * sizeof *ids);
    if ((rc = ring_publish(c->step.req, err, errlen))) return rc;
    s->want = tag;
    c->step_in_flight = true;
    return 0;
}

bool coord_step_take(struct coord *c, struct coord_step_reply *r)
{
    struct coord_step *s = c->stepper;
    uint64_t v;
    while (read(s->efd, &v, sizeof v) > 0) continue; /* drained first: a later write wakes the loop again */
    char err[200];
    for (;;) {
        if (s->held) return false; /* the awaited answer is out already */
        struct ring_slot slot;
        int rc = ring_wait(s->resp, &slot, 0, err, sizeof err); /* 0: what is there now, no waiting */
        if (rc == SHM_ETIMEDOUT || rc == SHM_EPEER) return false; /* nothing yet; a dead worker: the supervisor's */
        if (rc) {
            if (!s->want) return false;
            *r = (struct coord_step_reply){.rc = rc};
            snprintf(r->err, sizeof r->err, "step ring: %s", err);
            s->want = 0, c->step_in_flight = false;
            return true;
        }
        if (!s->want || slot.hdr->tag != s->want) { /* stale: drop it */
            if (ring_release(s->resp, err, sizeof err)) nb_log("step ring: %s", err);
            continue;
        }
        *r = (struct coord_step_reply){.flags = slot.hdr->flags, .payload_bytes = slot.hdr->payload_bytes, .payload = slot.payload};
        s->held = true, s->want = 0, c->step_in_flight = false;
        return true;
    }
}

void coord_step_abandon(struct coord *c)
{
    c->stepper->want = 0;
    c->step_in_flight = false;
}
