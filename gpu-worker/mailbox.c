/* mailbox.c — the host side of the doorbell (mailbox.h): the remote thread
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
#define MB_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define MB_PAUSE() __asm__ __volatile__("yield")
#else
#define MB_PAUSE() ((void)0)
#endif

static unsigned long long pickup_ns(const struct gw_mailbox *mb) { return mb->pickup_ns ? mb->pickup_ns : MB_PICKUP_NS; }
static unsigned long long wait_ns(const struct gw_mailbox *mb) { return mb->wait_ns ? mb->wait_ns : MB_WAIT_NS; }

void gw_mb_lost_msg(const struct mb_head *h, char *buf, size_t len)
{
    const unsigned int a = h->lost_a, b = h->lost_b;
    switch (h->lost) {
    case MB_LOST_BEHIND:
        snprintf(buf, len, "remote-expert mailbox out of step: the device had posted %u requests but %u were answered", a, b);
        break;
    case MB_LOST_UNSEEN:
        snprintf(buf, len, "remote-expert mailbox: the device posted request %u but the host reads %u", a, b);
        break;
    case MB_LOST_UNTAKEN:
        snprintf(buf, len, "remote-expert request %u was not taken by the remote-expert thread in %.0f s (it took %u last): "
                 "nobody was serving the mailbox", a, MB_PICKUP_NS / 1e9, b);
        break;
    case MB_LOST_SKIPPED:
        snprintf(buf, len, "remote-expert mailbox: request %u posted while %u was the last answered", a, b);
        break;
    case MB_LOST_STALE:
        snprintf(buf, len, "remote-expert request %u of an earlier eval is still unanswered (%u answered)", a, b);
        break;
    case MB_LOST_COUNT:
        snprintf(buf, len, "remote-expert mailbox: %u requests posted during the eval, %u answered", a, b);
        break;
    default:
        snprintf(buf, len, "remote-expert mailbox: broken (code %u: %u, %u)", h->lost, a, b);
    }
}

/* The pending request, if any, taken and answered; 1 if there was one. */
static int serve_one(struct gw_mailbox *mb)
{
    struct mb_head *h = mb->head;
    const unsigned int p = MB_LOAD(&h->posted), d = MB_LOAD(&h->done);
    if (p == d) return 0;
    MB_STORE(&h->taken, p);
    if (p != d + 1) {
        mb_lose(h, MB_LOST_SKIPPED, p, d); /* answered below, so the device's wait ends at once */
    } else if (!MB_LOAD(&h->failed) && !MB_LOAD(&h->timed_out) && !MB_LOAD(&h->lost)) {
        char msg[sizeof mb->err] = "";
        if (mb->answer(mb->ctx, h, msg, sizeof msg) && !MB_LOAD(&h->failed)) {
            snprintf(mb->err, sizeof mb->err, "%s", msg);
            MB_STORE(&h->failed, 1);
        }
    } /* else the eval has failed: later requests are answered at once, unanswered */
    __atomic_add_fetch(&mb->answered, 1, __ATOMIC_RELAXED);
    MB_FENCE(); /* the answer's stores (non-temporal ones too) before `done` */
    MB_STORE(&h->done, p);
    return 1;
}

static void *mb_main(void *arg)
{
    struct gw_mailbox *mb = arg;
    for (;;) {
        if (__atomic_load_n(&mb->active, __ATOMIC_ACQUIRE)) {
            if (!serve_one(mb)) MB_PAUSE();
            continue;
        }
        pthread_mutex_lock(&mb->lock);
        while (!mb->active && !mb->quit) pthread_cond_wait(&mb->cond, &mb->lock);
        const int quit = mb->quit;
        pthread_mutex_unlock(&mb->lock);
        if (quit) return NULL;
    }
}

int gw_mb_idle(const struct gw_mailbox *mb, char *err, size_t errlen)
{
    const struct mb_head *h = mb->head;
    const unsigned int p = __atomic_load_n(&h->posted, __ATOMIC_ACQUIRE), d = __atomic_load_n(&h->done, __ATOMIC_ACQUIRE);
    if (p == d || __atomic_load_n(&h->taken, __ATOMIC_ACQUIRE) != p) return 0;
    return nb_errf(err, errlen, NB_EIO,
                   "remote-expert request %u of an earlier eval is still unanswered (%u answered): its hook has not returned",
                   p, d);
}

int gw_mb_begin(struct gw_mailbox *mb, char *err, size_t errlen)
{
    struct mb_head *h = mb->head;
    if (!mb->sync) {
        pthread_mutex_init(&mb->lock, NULL);
        pthread_cond_init(&mb->cond, NULL);
        mb->sync = true;
    }
    if (!mb->started) { /* a failed start is tried again at the next eval */
        if (pthread_create(&mb->thread, NULL, mb_main, mb))
            return nb_errf(err, errlen, NB_EIO, "cannot start the remote-expert thread");
        mb->started = true;
    }
    int rc = gw_mb_idle(mb, err, errlen); /* the thread sleeps, or is still in a hook of a failed eval */
    if (rc) return rc;
    /* A request no thread took belongs to an eval that failed on it (its wait
     * gave up, `lost`): dropped, as the thread only serves while an eval runs. */
    if (MB_LOAD(&h->done) != MB_LOAD(&h->posted)) MB_STORE(&h->done, MB_LOAD(&h->posted));
    h->failed = 0, h->timed_out = 0, h->lost = 0, h->lost_a = 0, h->lost_b = 0;
    mb->err[0] = 0;
    mb->posted0 = MB_LOAD(&h->posted);
    __atomic_store_n(&mb->answered, 0, __ATOMIC_RELAXED);
    MB_FENCE();
    pthread_mutex_lock(&mb->lock);
    __atomic_store_n(&mb->active, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&mb->cond);
    pthread_mutex_unlock(&mb->lock);
    return 0;
}

bool gw_mb_active(struct gw_mailbox *mb) { return mb->started && __atomic_load_n(&mb->active, __ATOMIC_ACQUIRE); }

int gw_mb_end(struct gw_mailbox *mb, char *err, size_t errlen)
{
    if (!gw_mb_active(mb)) return 0;
    struct mb_head *h = mb->head;
    /* the last request, if the stream posted one its wait gave up on (or a failed eval never queued the wait for) */
    const unsigned int p = MB_LOAD(&h->posted);
    const unsigned long long t0 = mb_now_ns();
    while (MB_LOAD(&h->done) != p) {
        const unsigned long long t = mb_now_ns(), dt = t > t0 ? t - t0 : 0;
        if (MB_LOAD(&h->taken) != p && dt > pickup_ns(mb)) {
            mb_lose(h, MB_LOST_UNTAKEN, p, MB_LOAD(&h->taken));
            break;
        }
        if (dt > wait_ns(mb)) {
            MB_STORE(&h->timed_out, 1);
            break;
        }
        sched_yield();
    }
    pthread_mutex_lock(&mb->lock);
    __atomic_store_n(&mb->active, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mb->lock);
    const unsigned int posted = p - mb->posted0, answered = __atomic_load_n(&mb->answered, __ATOMIC_RELAXED);
    if (!h->lost && !h->failed && !h->timed_out && posted != answered) mb_lose(h, MB_LOST_COUNT, posted, answered);
    char msg[512];
    if (h->lost) {
        gw_mb_lost_msg(h, msg, sizeof msg);
        return nb_errf(err, errlen, NB_EIO, "%s", msg);
    }
    if (h->failed) return nb_errf(err, errlen, NB_EIO, "%s", mb->err);
    if (h->timed_out)
        return nb_errf(err, errlen, NB_EIO,
                       "no answer from the remote-expert thread in %.0f s: it took request %u (layer %d, %d pairs) "
                       "and its hook did not return in time",
                       wait_ns(mb) / 1e9, MB_LOAD(&h->taken), h->layer, h->n_miss);
    return 0;
}

void gw_mb_stop(struct gw_mailbox *mb)
{
    if (mb->started) {
        pthread_mutex_lock(&mb->lock);
        mb->quit = 1;
        pthread_cond_signal(&mb->cond);
        pthread_mutex_unlock(&mb->lock);
        pthread_join(mb->thread, NULL);
        mb->started = false;
    }
    if (mb->sync) {
        pthread_mutex_destroy(&mb->lock);
        pthread_cond_destroy(&mb->cond);
        mb->sync = false;
    }
}
