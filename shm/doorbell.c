/* doorbell.c — waiting for a word in shared memory: spin, then sleep on a futex.
 *
 * The key idea is a Dekker handshake that keeps the wake call off the fast
 * path.  The waiter stores sleeping = 1, fences, then reads the bell and the
 * word it waits for; the ringer stores the bell, fences, then reads sleeping.
 * With both fences, at least one of them sees the other's store: either the
 * waiter sees the new bell (and does not sleep) or the ringer sees the flag
 * (and calls FUTEX_WAKE).  FUTEX_WAIT itself re-checks the bell under the
 * kernel's lock, so a wake that comes before the sleep is not lost.  When no
 * one sleeps, ringing costs one fence and one read of a line that does not
 * change.  Futexes here are shared (no FUTEX_PRIVATE_FLAG): the two sides are
 * different processes.
 *
 * Peer death: the peer holds an OFD lock on a byte of the region while it is
 * attached.  Sleeps are cut into slices of peer_check_ns; between slices, and
 * after any wake that did not make the word ready, the waiter checks the lock. */
#include "shm/shm_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/util/err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void cpu_relax(void) { __asm__ __volatile__("yield" ::: "memory"); }
#else
static inline void cpu_relax(void) { __asm__ __volatile__("" ::: "memory"); }
#endif

enum {
    POLLS_PER_CLOCK = 64,       /* pauses between two clock reads */
};
#define YIELD_AFTER_NS 100000ull /* a spinner that waited this long yields its core between polls */

uint64_t shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct flock byte_lock(short type, off_t at)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1, .l_pid = 0};
    return fl;
}

int shm_lock_byte(int fd, off_t at)
{
    struct flock fl = byte_lock(F_WRLCK, at);
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    return errno == EAGAIN || errno == EACCES ? SHM_EBUSY : NB_EIO;
}

void shm_unlock_byte(int fd, off_t at)
{
    struct flock fl = byte_lock(F_UNLCK, at);
    fcntl(fd, F_OFD_SETLK, &fl);
}

bool shm_byte_locked(int fd, off_t at)
{
    struct flock fl = byte_lock(F_WRLCK, at);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true; /* cannot tell: do not declare anyone dead */
    return fl.l_type != F_UNLCK;
}

static inline bool ready(const struct doorbell_wait *w)
{
    uint32_t v = atomic_load_explicit(w->word, memory_order_acquire);
    return w->exact ? v == w->target : (int32_t)(v - w->target) >= 0;
}

static bool peer_gone(const struct doorbell_wait *w)
{
    return atomic_load_explicit(w->peer_pid, memory_order_acquire) != 0 && !shm_byte_locked(w->fd, w->peer_byte);
}

/* FUTEX_WAIT on a shared word for at most ns.  Any return is fine for the
 * caller (woken, value changed, timed out, interrupted): it looks again. */
static void futex_sleep(shm_word *bell, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}

int doorbell_wait(const struct doorbell_wait *w, uint64_t timeout_ns, uint64_t *sleeps)
{
    if (ready(w)) return 0;
    if (timeout_ns == 0) return SHM_ETIMEDOUT;
    uint64_t t0 = shm_now_ns();
    uint64_t deadline = timeout_ns > UINT64_MAX - t0 ? UINT64_MAX : t0 + timeout_ns;
    uint64_t next_check = t0 + w->peer_check_ns;
    for (;;) {
        for (int i = 0; i < POLLS_PER_CLOCK; i++) {
            cpu_relax();
            if (ready(w)) return 0;
        }
        uint64_t t = shm_now_ns();
        if (t >= deadline) return SHM_ETIMEDOUT;
        if (t >= next_check) {
            if (peer_gone(w) && !ready(w)) return SHM_EPEER;
            next_check = t + w->peer_check_ns;
        }
        if (w->mode == RING_WAIT_SPIN || t - t0 < w->spin_ns) {
            if (t - t0 >= YIELD_AFTER_NS) sched_yield();
            continue;
        }
        /* Sleep: flag, fence, then look (the other half is doorbell_ring). */
        atomic_store_explicit(w->sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        uint32_t seen = atomic_load_explicit(w->bell, memory_order_relaxed);
        if (!ready(w)) {
            uint64_t until = next_check < deadline ? next_check : deadline;
            futex_sleep(w->bell, seen, until > t ? until - t : 1000);
            if (sleeps) (*sleeps)++;
        }
        atomic_store_explicit(w->sleeping, 0, memory_order_relaxed);
        if (ready(w)) return 0;
        /* Woken (or timed out) without the word: the peer may have detached. */
        if (peer_gone(w) && !ready(w)) return SHM_EPEER;
        next_check = shm_now_ns() + w->peer_check_ns;
    }
}

void doorbell_ring(shm_word *bell, shm_word *sleeping, uint64_t *wakes)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(sleeping, memory_order_relaxed)) {
        syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1, NULL, NULL, 0);
        if (wakes) (*wakes)++;
    }
}

void doorbell_wake_all(shm_word *bell) { syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1 << 30, NULL, NULL, 0); }
