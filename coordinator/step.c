/* step.c — the step ring (coordinator → gpu-worker) as an event source.
 *
 * The ring's responses are announced by a futex doorbell (docs/PROTOCOL.md),
 * which poll(2) cannot watch.  So one small thread, the waiter, blocks on the
 * response ring while a step is in flight and turns its arrival into an
 * eventfd the loop polls: a real fd event, no polling timer.  The waiter is
 * the ring's only consumer-side user: it takes the response, drops answers
 * whose tag is not the awaited one (a request given up on when its worker
 * died, served again by the successor), copies the payload out, releases the
 * slot and writes the eventfd.  The main thread stays the only producer.
 * What the waiter hands over is guarded by one mutex, which also orders the
 * copied payload before the main thread reads it.
 *
 * Cost per step: the waiter's wake-up (it spins 50 µs on the doorbell first,
 * like the old in-line wait) and one eventfd write and poll return. */
#include "coordinator/coord.h"

#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/step_proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct coord_step {
    ring *resp;
    int efd;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    uint64_t want;  /* the tag awaited (0: none) */
    bool quit, ready;
    struct coord_step_reply r;
    /* the waiter's own */
    void *payload;
    size_t cap;
};

static void post(struct coord_step *s, uint64_t tag, const struct coord_step_reply *r)
{
    pthread_mutex_lock(&s->mu);
    bool mine = s->want == tag;
    if (mine) s->r = *r, s->ready = true, s->want = 0;
    pthread_mutex_unlock(&s->mu);
    uint64_t one = 1;
    if (mine && write(s->efd, &one, sizeof one) < 0) nb_log("step: cannot write the eventfd: %s", strerror(errno));
}

static void *waiter(void *arg)
{
    struct coord_step *s = arg;
    char err[200]; /* fits in a reply's err with its prefix */
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && !s->want) pthread_cond_wait(&s->cv, &s->mu);
        uint64_t tag = s->want;
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        if (quit) return NULL;
        struct ring_slot slot;
        int rc = ring_wait(s->resp, &slot, 50000000ull, err, sizeof err);
        if (rc == SHM_ETIMEDOUT) continue; /* look at want and quit again */
        if (rc == SHM_EPEER) { /* no gpu-worker attached (it died): the supervisor restarts it */
            usleep(20000);
            continue;
        }
        struct coord_step_reply r = {.rc = rc};
        if (rc) {
            snprintf(r.err, sizeof r.err, "step ring: %s", err);
            post(s, tag, &r);
            continue;
        }
        if (slot.hdr->tag != tag) { /* a stale answer: drop it */
            ring_release(s->resp, err, sizeof err);
            continue;
        }
        r.flags = slot.hdr->flags, r.payload_bytes = slot.hdr->payload_bytes;
        size_t n = r.payload_bytes < s->cap ? r.payload_bytes : s->cap;
        memcpy(s->payload, slot.payload, n);
        r.payload = s->payload;
        if ((rc = ring_release(s->resp, err, sizeof err))) r.rc = rc, snprintf(r.err, sizeof r.err, "step ring: %s", err);
        post(s, tag, &r);
    }
}

int coord_step_open(struct coord *c, char *err, size_t errlen)
{
    struct coord_step *s = calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    s->resp = c->step.resp, s->efd = -1;
    s->cap = step_payload_bytes((uint32_t)c->chunk, (uint64_t)c->m->hp.n_vocab);
    c->stepper = s;
    if (!(s->payload = malloc(s->cap))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if ((s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return nb_errf(err, errlen, NB_EIO, "eventfd: %s", strerror(errno));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, waiter, s)) return nb_errf(err, errlen, NB_EIO, "cannot start the step waiter");
    s->started = true;
    return 0;
}

void coord_step_close(struct coord *c)
{
    struct coord_step *s = c->stepper;
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL); /* its ring_wait ends within 50 ms */
    }
    if (s->efd >= 0) close(s->efd);
    free(s->payload);
    free(s);
    c->stepper = NULL;
}

int coord_step_fd(const struct coord *c) { return c->stepper->efd; }

int coord_step_send(struct coord *c, uint32_t op, const int32_t *ids, int n, bool argmax, char *err, size_t errlen)
{
    struct coord_step *s = c->stepper;
    struct ring_slot slot;
    /* One step is in flight at a time and the ring has two slots: a slot is
     * free unless a dead worker left one taken, which its successor serves
     * (and the waiter drops) at once. */
    int rc = ring_reserve(c->step.req, &slot, 1000000000ull, err, errlen);
    if (rc) return nb_errf(err, errlen, NB_EIO, "step ring: no free slot (%s)", shm_strerror(rc));
    uint64_t tag = ++c->next_tag;
    *slot.hdr = (struct ring_slot_header){.layer = op, .n_tokens = (uint32_t)n, .payload_bytes = (uint32_t)n * 4, .tag = tag,
                                          .flags = op == STEP_EVAL && argmax ? STEP_FLAG_ARGMAX : 0};
    if (n) memcpy(slot.payload, ids, (size_t)n * sizeof *ids);
    if ((rc = ring_publish(c->step.req, err, errlen))) return rc;
    pthread_mutex_lock(&s->mu);
    s->want = tag, s->ready = false;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    c->step_in_flight = true;
    return 0;
}

bool coord_step_take(struct coord *c, struct coord_step_reply *r)
{
    struct coord_step *s = c->stepper;
    uint64_t v;
    while (read(s->efd, &v, sizeof v) > 0) continue;
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready;
    if (ready) *r = s->r, s->ready = false;
    pthread_mutex_unlock(&s->mu);
    if (ready) c->step_in_flight = false;
    return ready;
}

void coord_step_abandon(struct coord *c)
{
    struct coord_step *s = c->stepper;
    pthread_mutex_lock(&s->mu);
    s->want = 0, s->ready = false;
    pthread_mutex_unlock(&s->mu);
    c->step_in_flight = false;
}
