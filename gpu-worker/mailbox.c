/* mailbox.c — the host side of the mailbox (mailbox.h): the remote thread
 * that answers the device's remote-expert requests while an eval runs, and
 * the per-eval accounting around it.  No CUDA here: the CUDA backend gives
 * the head (mapped pinned memory) and the answer function, and
 * tests/gpu-worker/test_mailbox.c runs this same code against a device
 * played on a thread.
 *
 * While an eval runs the thread takes whatever is pending — `posted` ≠
 * `done`, read from the head each time, never a number remembered from
 * before — so a request posted before the thread first runs is answered
 * like any other.  Between evals it sleeps on a condition variable (no core
 * spins while the host path or another process needs them). */
#include "gpu-worker/mailbox.h"

#include <stdio.h>
#include <string.h>

#include "core/util/err.h"

#if defined(__x86_64__) || defined(__i386__)
#define MAILBOX_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define MAILBOX_PAUSE() __asm__ __volatile__("yield")
#else
#define MAILBOX_PAUSE() ((void)0)
#endif

static unsigned long long pickup_ns(const struct gw_mailbox *box)
{
    return box->pickup_ns ? box->pickup_ns : MAILBOX_PICKUP_NS;
}
static unsigned long long wait_ns(const struct gw_mailbox *box)
{
    return box->wait_ns ? box->wait_ns : MAILBOX_WAIT_NS;
}

void gw_mailbox_lost_msg(const struct mailbox_head *h, char *buf, size_t len)
{
    const unsigned int a = h->lost_a, b = h->lost_b;
    switch (h->lost) {
    case MAILBOX_LOST_BEHIND:
        snprintf(buf, len, "remote-expert mailbox out of step: the device had posted %u requests but %u were answered", a, b);
        break;
    case MAILBOX_LOST_UNSEEN:
        snprintf(buf, len, "remote-expert mailbox: the device posted request %u but the host reads %u", a, b);
        break;
    case MAILBOX_LOST_UNTAKEN:
        snprintf(buf, len, "remote-expert request %u was not taken by the remote-expert thread in %.0f s (it took %u last): "
                 "nobody was serving the mailbox", a, MAILBOX_PICKUP_NS / 1e9, b);
        break;
    case MAILBOX_LOST_SKIPPED:
        snprintf(buf, len, "remote-expert mailbox: request %u posted while %u was the last answered", a, b);
        break;
    case MAILBOX_LOST_STALE:
        snprintf(buf, len, "remote-expert request %u of an earlier eval is still unanswered (%u answered)", a, b);
        break;
    case MAILBOX_LOST_COUNT:
        snprintf(buf, len, "remote-expert mailbox: %u requests posted during the eval, %u answered", a, b);
        break;
    default:
        snprintf(buf, len, "remote-expert mailbox: broken (code %u: %u, %u)", h->lost, a, b);
    }
}

/* The pending request, if any, taken and answered; 1 if there was one. */
static int serve_one(struct gw_mailbox *box)
{
    struct mailbox_head *h = box->head;
    const unsigned int p = MAILBOX_LOAD(&h->posted), d = MAILBOX_LOAD(&h->done);
    if (p == d) return 0;
    MAILBOX_STORE(&h->taken, p);
    if (p != d + 1) {
        mailbox_lose(h, MAILBOX_LOST_SKIPPED, p, d); /* answered below, so the device's wait ends at once */
    } else if (!MAILBOX_LOAD(&h->failed) && !MAILBOX_LOAD(&h->timed_out) && !MAILBOX_LOAD(&h->lost)) {
        char msg[sizeof box->err] = "";
        if (box->answer(box->ctx, h, msg, sizeof msg) && !MAILBOX_LOAD(&h->failed)) {
            snprintf(box->err, sizeof box->err, "%s", msg);
            MAILBOX_STORE(&h->failed, 1);
        }
    } /* else the eval has failed: later requests are answered at once, unanswered */
    __atomic_add_fetch(&box->answered, 1, __ATOMIC_RELAXED);
    MAILBOX_FENCE(); /* the answer's stores (non-temporal ones too) before `done` */
    MAILBOX_STORE(&h->done, p);
    return 1;
}

static void *mailbox_main(void *arg)
{
    struct gw_mailbox *box = arg;
    for (;;) {
        if (__atomic_load_n(&box->active, __ATOMIC_ACQUIRE)) {
            if (!serve_one(box)) MAILBOX_PAUSE();
            continue;
        }
        pthread_mutex_lock(&box->lock);
        while (!box->active && !box->quit) pthread_cond_wait(&box->cond, &box->lock);
        const int quit = box->quit;
        pthread_mutex_unlock(&box->lock);
        if (quit) return NULL;
    }
}

int gw_mailbox_idle(const struct gw_mailbox *box, char *err, size_t errlen)
{
    const struct mailbox_head *h = box->head;
    const unsigned int p = __atomic_load_n(&h->posted, __ATOMIC_ACQUIRE), d = __atomic_load_n(&h->done, __ATOMIC_ACQUIRE);
    if (p == d || __atomic_load_n(&h->taken, __ATOMIC_ACQUIRE) != p) return 0;
    return nb_errf(err, errlen, NB_EIO,
                   "remote-expert request %u of an earlier eval is still unanswered (%u answered): its hook has not returned",
                   p, d);
}

int gw_mailbox_begin(struct gw_mailbox *box, char *err, size_t errlen)
{
    struct mailbox_head *h = box->head;
    if (!box->sync) {
        pthread_mutex_init(&box->lock, NULL);
        pthread_cond_init(&box->cond, NULL);
        box->sync = true;
    }
    if (!box->started) { /* a failed start is tried again at the next eval */
        if (pthread_create(&box->thread, NULL, mailbox_main, box))
            return nb_errf(err, errlen, NB_EIO, "cannot start the remote-expert thread");
        box->started = true;
    }
    int rc = gw_mailbox_idle(box, err, errlen); /* the thread sleeps, or is still in a hook of a failed eval */
    if (rc) return rc;
    /* A request no thread took belongs to an eval that failed on it (its wait
     * gave up, `lost`): dropped, as the thread only serves while an eval runs. */
    if (MAILBOX_LOAD(&h->done) != MAILBOX_LOAD(&h->posted)) MAILBOX_STORE(&h->done, MAILBOX_LOAD(&h->posted));
    h->failed = 0, h->timed_out = 0, h->lost = 0, h->lost_a = 0, h->lost_b = 0;
    box->err[0] = 0;
    box->posted0 = MAILBOX_LOAD(&h->posted);
    __atomic_store_n(&box->answered, 0, __ATOMIC_RELAXED);
    MAILBOX_FENCE();
    pthread_mutex_lock(&box->lock);
    __atomic_store_n(&box->active, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&box->cond);
    pthread_mutex_unlock(&box->lock);
    return 0;
}

bool gw_mailbox_active(struct gw_mailbox *box)
{
    return box->started && __atomic_load_n(&box->active, __ATOMIC_ACQUIRE);
}

int gw_mailbox_end(struct gw_mailbox *box, char *err, size_t errlen)
{
    if (!gw_mailbox_active(box)) return 0;
    struct mailbox_head *h = box->head;
    /* the last request, if the stream posted one its wait gave up on (or a failed eval never queued the wait for) */
    const unsigned int p = MAILBOX_LOAD(&h->posted);
    const unsigned long long t0 = mailbox_now_ns();
    while (MAILBOX_LOAD(&h->done) != p) {
        const unsigned long long t = mailbox_now_ns(), dt = t > t0 ? t - t0 : 0;
        if (MAILBOX_LOAD(&h->taken) != p && dt > pickup_ns(box)) {
            mailbox_lose(h, MAILBOX_LOST_UNTAKEN, p, MAILBOX_LOAD(&h->taken));
            break;
        }
        if (dt > wait_ns(box)) {
            MAILBOX_STORE(&h->timed_out, 1);
            break;
        }
        sched_yield();
    }
    pthread_mutex_lock(&box->lock);
    __atomic_store_n(&box->active, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&box->lock);
    const unsigned int posted = p - box->posted0, answered = __atomic_load_n(&box->answered, __ATOMIC_RELAXED);
    if (!h->lost && !h->failed && !h->timed_out && posted != answered)
        mailbox_lose(h, MAILBOX_LOST_COUNT, posted, answered);
    char msg[512];
    if (h->lost) {
        gw_mailbox_lost_msg(h, msg, sizeof msg);
        return nb_errf(err, errlen, NB_EIO, "%s", msg);
    }
    if (h->failed) return nb_errf(err, errlen, NB_EIO, "%s", box->err);
    if (h->timed_out)
        return nb_errf(err, errlen, NB_EIO,
                       "no answer from the remote-expert thread in %.0f s: it took request %u (layer %d, %d pairs) "
                       "and its hook did not return in time",
                       wait_ns(box) / 1e9, MAILBOX_LOAD(&h->taken), h->layer, h->n_miss);
    return 0;
}

void gw_mailbox_stop(struct gw_mailbox *box)
{
    if (box->started) {
        pthread_mutex_lock(&box->lock);
        box->quit = 1;
        pthread_cond_signal(&box->cond);
        pthread_mutex_unlock(&box->lock);
        pthread_join(box->thread, NULL);
        box->started = false;
    }
    if (box->sync) {
        pthread_mutex_destroy(&box->lock);
        pthread_cond_destroy(&box->cond);
        box->sync = false;
    }
}
