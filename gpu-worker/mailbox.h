/* mailbox.h — the mailbox's protocol, the GPU → CPU hand-off of remote
 * experts: how the remote-expert requests of an eval of at most 17 rows pass
 * between the device (the stream's k_mailbox_post and k_mailbox_wait,
 * gpu-worker/cuda/mailbox.cu) and the backend's remote thread (mailbox.c),
 * through one head in mapped pinned host memory.  Private to gpu-worker/.
 *
 * The one idea: a request is pending exactly when the head's `posted` differs
 * from its `done`, and at most one is pending at a time (the stream posts a
 * layer's request only after the previous layer's wait has seen its answer),
 * so request d + 1 follows answer d, each number posted once and answered
 * once.  Nothing else decides what is pending — no side keeps a private
 * "last seen" number that could start out of step.  Each side checks the
 * ordering where it acts: the device before it posts (its count of requests
 * posted = the last answer) and before it waits (the host sees the request),
 * the thread when it takes a request (it is done + 1), the host when an eval
 * starts (nothing pending) and ends (requests posted = answers given).  A
 * break is an error at once (`lost`, with its two numbers), never a wait for
 * an answer nobody will send; only a request the thread has taken — its hook
 * is computing, the pipeline's ring round trip — is waited for up to
 * MAILBOX_WAIT_NS, and one no thread takes within MAILBOX_PICKUP_NS has no
 * server.
 *
 * The steps are written once for both sides: device code where
 * gpu-worker/cuda/mailbox.cu includes this under nvcc, host code in
 * mailbox.c and in tests/gpu-worker/test_mailbox.c, which plays the device
 * on a thread. */
#ifndef NB_GW_MAILBOX_H
#define NB_GW_MAILBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct mailbox_head {
    unsigned int posted;         /* device → host: the last request posted (0: none yet) */
    unsigned int pad0[31];       /* own cache lines: the two sides poll different words */
    unsigned int done;           /* host → device: the last request answered */
    unsigned int taken;          /* host → device: the last request the thread took */
    unsigned int failed;         /* host: a hook call failed (its message is on the host) */
    unsigned int timed_out;      /* a taken request was not answered in MAILBOX_WAIT_NS */
    unsigned int lost;           /* the protocol broke (enum mailbox_lost), noticed by either side */
    unsigned int lost_a, lost_b; /* its two numbers */
    unsigned int pad1[25];
    int layer, n_rows, n_miss, pad2; /* the request: its layer, rows of x and pairs */
};
typedef struct mailbox_head mailbox_head;

/* What broke, with the numbers a, b the message names (gw_mailbox_lost_msg). */
enum mailbox_lost {
    MAILBOX_LOST_NONE = 0,
    MAILBOX_LOST_BEHIND = 1,  /* device, posting: it had posted a requests, the host had answered up to b */
    MAILBOX_LOST_UNSEEN = 2,  /* device, waiting: it posted a, the host's `posted` reads b */
    MAILBOX_LOST_UNTAKEN = 3, /* device or host, waiting: request a not taken in MAILBOX_PICKUP_NS (b taken last) */
    MAILBOX_LOST_SKIPPED = 4, /* thread: request a posted while b was the last answered */
    MAILBOX_LOST_STALE = 5,   /* host, starting an eval: request a of an earlier eval unanswered (b answered) */
    MAILBOX_LOST_COUNT = 6,   /* host, ending an eval: a requests posted during it, b answered */
};

#define MAILBOX_WAIT_NS 120000000000ull /* a taken request's answer: the hook (the ring round trip) */
#define MAILBOX_PICKUP_NS 2000000000ull /* a posted request's pick-up: the thread spins while an eval runs (µs) */

#ifdef __CUDACC__
#define MAILBOX_FN static __device__ __forceinline__
#define MAILBOX_LOAD(p) (*(volatile unsigned int *)(p))
#define MAILBOX_STORE(p, v) (*(volatile unsigned int *)(p) = (v))
#define MAILBOX_FENCE() __threadfence_system()
#define MAILBOX_RELAX() __nanosleep(256)
MAILBOX_FN unsigned long long mailbox_now_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#else
#include <sched.h>
#include <time.h>
#define MAILBOX_FN static inline
#define MAILBOX_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define MAILBOX_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define MAILBOX_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define MAILBOX_RELAX() sched_yield()
MAILBOX_FN unsigned long long mailbox_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
#endif

/* Records the first break of the protocol (a, b: its numbers). */
MAILBOX_FN void mailbox_lose(struct mailbox_head *h, unsigned int code, unsigned int a, unsigned int b)
{
    if (MAILBOX_LOAD(&h->lost)) return;
    MAILBOX_STORE(&h->lost_a, a);
    MAILBOX_STORE(&h->lost_b, b);
    MAILBOX_FENCE();
    MAILBOX_STORE(&h->lost, code);
}

/* Device, posting a layer's n misses (one thread, before they are copied):
 * 1 = post them; 0 = post nothing (no misses, or the eval has failed and its
 * host side answers nothing more, or the counts are out of step: lost).
 * seq: the device's count of requests posted, = the last answer when in step. */
MAILBOX_FN int mailbox_post_open(struct mailbox_head *h, const unsigned int *seq, int n)
{
    if (n == 0 || MAILBOX_LOAD(&h->failed) || MAILBOX_LOAD(&h->timed_out) || MAILBOX_LOAD(&h->lost)) return 0;
    const unsigned int d = MAILBOX_LOAD(&h->done);
    if (d != *seq) {
        mailbox_lose(h, MAILBOX_LOST_BEHIND, *seq, d);
        return 0;
    }
    return 1;
}

/* Device, after the request's arrays are written and fenced: request *seq + 1
 * posted; *want is what this layer's wait waits for. */
MAILBOX_FN void mailbox_post_publish(struct mailbox_head *h, unsigned int *seq, unsigned int *want, int layer,
                                     int n_rows, int n_miss)
{
    const unsigned int s = *seq + 1;
    *seq = s, *want = s;
    h->layer = layer, h->n_rows = n_rows, h->n_miss = n_miss;
    MAILBOX_FENCE();
    MAILBOX_STORE(&h->posted, s);
    MAILBOX_FENCE();
}

/* Device, waiting for request w (0: this layer posted nothing): 0 once it is
 * answered; -1 when it will not be — the host cannot see it, or no thread
 * took it within pickup_ns (lost), or the thread took it and its hook did not
 * return within answer_ns (timed_out). */
MAILBOX_FN int mailbox_wait_answer(struct mailbox_head *h, unsigned int w, unsigned long long pickup_ns,
                                   unsigned long long answer_ns)
{
    if (w == 0) return 0;
    const unsigned int p = MAILBOX_LOAD(&h->posted);
    if (p != w) {
        mailbox_lose(h, MAILBOX_LOST_UNSEEN, w, p);
        return -1;
    }
    unsigned long long t0 = mailbox_now_ns();
    int taken = 0;
    while ((int)(MAILBOX_LOAD(&h->done) - w) < 0) {
        const unsigned long long t = mailbox_now_ns(),
                                 dt = t > t0 ? t - t0 : 0; /* a timer that steps back is no timeout */
        if (!taken && (int)(MAILBOX_LOAD(&h->taken) - w) >= 0) {
            taken = 1, t0 = t;
        } else if (!taken && dt > pickup_ns) {
            mailbox_lose(h, MAILBOX_LOST_UNTAKEN, w, MAILBOX_LOAD(&h->taken));
            return -1;
        } else if (taken && dt > answer_ns) {
            MAILBOX_STORE(&h->timed_out, 1);
            return -1;
        }
        MAILBOX_RELAX();
    }
    MAILBOX_FENCE();
    return 0;
}

/* ---- the host side (mailbox.c) ---- */
#ifdef __cplusplus
extern "C" {
#endif

/* Answers the request in h (h->layer, n_rows, n_miss and the arrays beside
 * the head, which only the caller knows): 0, or an error with its message. */
typedef int (*gw_mailbox_answer_fn)(void *ctx, const struct mailbox_head *h, char *err, size_t errlen);

/* The remote thread and one eval's accounting.  Fill head (zeroed, host
 * address), answer, ctx, pickup_ns and wait_ns (0: MAILBOX_PICKUP_NS, MAILBOX_WAIT_NS);
 * the rest starts zeroed. */
struct gw_mailbox {
    struct mailbox_head *head;
    gw_mailbox_answer_fn answer;
    void *ctx;
    unsigned long long pickup_ns, wait_ns;
    pthread_t thread;
    bool started, sync; /* the thread runs; its mutex and condition exist */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int active, quit;        /* under lock (read atomically by the spinning thread) */
    unsigned int posted0;    /* `posted` when this eval began */
    unsigned int answered;   /* requests the thread answered during this eval (atomic) */
    char err[512];           /* the first answer failure of this eval */
};

/* Before an eval that posts: the thread started (at the first), nothing
 * pending (else the error names the request: MAILBOX_LOST_STALE), the flags
 * cleared and the thread set spinning. */
int gw_mailbox_begin(struct gw_mailbox *box, char *err, size_t errlen);
/* After the eval's stream has drained: waits for a request the thread has
 * taken (up to wait_ns), puts the thread to sleep, and turns a break, a hook
 * failure, a timeout or requests posted ≠ answers given into the error. */
int gw_mailbox_end(struct gw_mailbox *box, char *err, size_t errlen);
/* 0 when no request is pending (another caller of the hook does not race
 * the thread's), else the error saying which is. */
int gw_mailbox_idle(const struct gw_mailbox *box, char *err, size_t errlen);
bool gw_mailbox_active(struct gw_mailbox *box);
/* Stops and joins the thread (the head stays the caller's). */
void gw_mailbox_stop(struct gw_mailbox *box);
/* The message of a break (h->lost, lost_a, lost_b). */
void gw_mailbox_lost_msg(const struct mailbox_head *h, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
