/* shm_impl.h — what the files of shm/ share with each other and nobody else:
 * the doorbell (spin, then futex) and the attach locks that say who is alive. */
#ifndef NB_SHM_IMPL_H
#define NB_SHM_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/shm.h"

typedef _Atomic uint32_t shm_word;

/* Shared 32-bit words are declared as plain uint32_t at fixed offsets; this is
 * how the code reaches them atomically (same size and alignment). */
static inline shm_word *shm_word_at(void *base, size_t offset) { return (shm_word *)((uint8_t *)base + offset); }

uint64_t shm_now_ns(void);

/* Attach locks: an OFD write lock on one byte of the region's file.  The
 * kernel drops it when its holder closes the file or dies (even as a zombie,
 * files are closed first), so "the byte is locked" means "the holder lives". */
int shm_lock_byte(int fd, off_t at);          /* 0, or SHM_EBUSY when someone else holds it, or NB_EIO */
void shm_unlock_byte(int fd, off_t at);
bool shm_byte_locked(int fd, off_t at);       /* by another open file description */

/* One wait on a doorbell: until *word == target (exact) or, cyclically,
 * *word >= target ((int32_t)(*word - target) >= 0), sleeping on *bell (which
 * the other side bumps before it rings).  *sleeping is this side's "I am
 * asleep" flag; the other side reads it in doorbell_ring(). */
struct doorbell_wait {
    shm_word *word;
    uint32_t target;
    bool exact;
    shm_word *bell;
    shm_word *sleeping;
    shm_word *peer_pid; /* 0 while the peer never attached: nothing to judge yet */
    int fd;             /* with peer_byte: the peer's attach lock */
    off_t peer_byte;
    enum ring_wait_mode mode;
    uint64_t spin_ns;
    uint64_t peer_check_ns;
};

/* 0 when ready, SHM_ETIMEDOUT, or SHM_EPEER (the peer's lock is free and the
 * word is still not ready).  Adds the futex waits it entered to *sleeps. */
int doorbell_wait(const struct doorbell_wait *w, uint64_t timeout_ns, uint64_t *sleeps);

/* Called after the release store that bumped *bell: wakes the other side if
 * it said it sleeps (a full fence orders the bump before reading the flag).
 * Adds the wake calls it made to *wakes. */
void doorbell_ring(shm_word *bell, shm_word *sleeping, uint64_t *wakes);

/* Wakes whoever sleeps on *bell, unconditionally (detach: "look again"). */
void doorbell_wake_all(shm_word *bell);

#endif
