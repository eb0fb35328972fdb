/* shm.h — the data plane: named shared-memory regions, SPSC rings with
 * doorbells, and the stats region (docs/PROTOCOL.md has every byte offset).
 *
 * Four things, one header:
 *   - instances: the coordinator creates one per run.  Its id ("<pid>-<tag>")
 *     is in every region name, and it holds a lock on the owner object
 *     "/nebula-<id>-owner" for its whole life; the kernel drops that lock when
 *     the process dies, which is how the next start tells a dead instance
 *     (whose regions it removes) from a live one.
 *   - regions: "/nebula-<id>-<what>", mode 0600, created by the coordinator
 *     (O_EXCL: a name is never reused by accident) and mapped by workers.
 *   - rings: single-producer / single-consumer rings of fixed-size slots laid
 *     out in a region at a fixed offset.  Everything shared is a plain 32-bit
 *     word at a documented offset (no pointers), so a GPU can register the
 *     pages and write or wait on the same words.  Waiters spin briefly, then
 *     sleep on a futex; the other side makes the wake call only when a waiter
 *     said it is asleep.  A waiter also watches the peer: a peer holds a lock
 *     on its role's byte while attached, so a dead peer is seen within
 *     ring_options.peer_check_ns instead of hanging the survivor.
 *   - stats: per-worker blocks of 64-bit counters anyone can read.
 *
 * Every fallible call returns 0 or a negative code (NB_E* of core/util/err.h
 * or SHM_E* below) and writes a one-line message into err.  Handles are per
 * process: after fork(), a child opens the region again (shm_region_open)
 * instead of using its parent's handle. */
#ifndef NB_SHM_H
#define NB_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

/* Codes beyond core/util/err.h's, for what only shared memory has. */
enum {
    SHM_EEXIST = -32,    /* a region of that name exists already */
    SHM_EBUSY = -33,     /* the ring role is held by a live process */
    SHM_ETIMEDOUT = -34, /* the wait's timeout passed (also: a zero-timeout poll found nothing) */
    SHM_EPEER = -35,     /* the peer detached or died */
};

/* Names the SHM_E* codes and, for the others, defers to nb_strerror(). */
const char *shm_strerror(int code);

/* ---- instances and regions -------------------------------------------- */

#define SHM_DIR "/dev/shm" /* where Linux keeps POSIX shm objects (scanned for cleanup) */
#define SHM_PREFIX "nebula-"
#define SHM_ID_MAX 24    /* "<pid>-<8 hex digits>" and its NUL */
#define SHM_WHAT_MAX 32  /* the <what> part: [a-z0-9_.-], not "owner" */
#define SHM_NAME_MAX 64  /* "/nebula-<id>-<what>" and its NUL */

typedef struct shm_instance shm_instance;

/* Coordinator: removes the regions of dead instances (shm_cleanup_stale),
 * then creates a new instance.  *n_stale (if not NULL) gets how many objects
 * the cleanup removed, for the caller's log line. */
int shm_instance_create(shm_instance **out, int *n_stale, char *err, size_t errlen);

/* "<pid>-<tag>": what workers are given to find the regions. */
const char *shm_instance_id(const shm_instance *inst);

/* Coordinator: unlinks the names of every region of the instance and of its
 * owner object, keeping everything else: the mappings, the fds, the lock.
 * From then on the regions live exactly as long as their users (the
 * processes that map them or hold an fd), and a kill -9 of everyone leaves
 * nothing in /dev/shm.  A process can still open such a region with
 * shm_region_open if it inherited an fd of it (the coordinator hands one
 * down to each worker it spawns).  Returns 0 or the first unlink error. */
int shm_instance_unlink(shm_instance *inst, char *err, size_t errlen);

/* Unlinks every region of the instance, then its owner object, and frees it.
 * Mappings stay valid until unmapped (POSIX), so workers may still be
 * finishing.  Returns 0 or the first unlink error (it tries them all). */
int shm_instance_destroy(shm_instance *inst, char *err, size_t errlen);

/* Removes every "/nebula-*" object of an instance that is dead: its owner
 * object's lock is free, or it has no owner object and its pid is gone.
 * Objects of other users and of live instances are left alone. */
int shm_cleanup_stale(int *n_removed, char *err, size_t errlen);

/* A mapping of one region.  base is page-aligned; bytes is the region's size. */
struct shm_region {
    char name[SHM_NAME_MAX];
    uint8_t *base;
    size_t bytes;
    int fd;         /* kept open: rings lock bytes of it to say who is attached */
    int opener_pid; /* the process that opened it (handles do not cross fork) */
};

/* Coordinator: creates "/nebula-<id>-<what>" (mode 0600, O_EXCL), reserves
 * its memory (so a full /dev/shm fails here, not with SIGBUS later), maps it.
 * The memory starts zeroed. */
int shm_region_create(shm_instance *inst, const char *what, size_t bytes, struct shm_region *out, char *err,
                      size_t errlen);

/* Workers: maps an existing region by instance id and what: by its name, or,
 * once the name is unlinked (shm_instance_unlink), through an fd of it this
 * process inherited (found in /proc/self/fd, opened again for a description
 * of its own).  Refuses a region of another user or one that group/others
 * may open. */
int shm_region_open(const char *instance_id, const char *what, struct shm_region *out, char *err, size_t errlen);

/* Unmaps and closes (never unlinks: that is the instance's job). */
void shm_region_close(struct shm_region *r);

/* ---- rings -------------------------------------------------------------- */

/* Shape of a ring, fixed when the coordinator formats it. */
struct ring_geometry {
    uint32_t n_slots;       /* ≥ 1 */
    uint32_t max_tokens;    /* rows per message (expert ids/weights capacity) */
    uint32_t max_experts;   /* expert ids per row */
    uint32_t payload_bytes; /* payload capacity of a slot (activations, fp32) */
};

/* A slot's header as it lies in shared memory (offsets in docs/PROTOCOL.md;
 * slot starts are 64-byte aligned).  seq is written by ring_publish(), the
 * rest by the producer between ring_reserve() and ring_publish() (assigning
 * the whole struct is fine: the consumer takes the slot only when seq is
 * exactly its message's). */
struct ring_slot_header {
    uint32_t seq;           /*  0: message number + 1, stored last (release) */
    uint32_t layer;         /*  4 */
    uint32_t n_tokens;      /*  8: rows in this message, ≤ max_tokens */
    uint32_t n_experts;     /* 12: expert ids per row, ≤ max_experts */
    uint32_t payload_bytes; /* 16: bytes of payload used, ≤ payload_bytes of the ring */
    uint32_t flags;         /* 20: RING_FLAG_* */
    uint64_t tag;           /* 24: free for the caller (a request id, a timestamp) */
    uint8_t reserved[32];   /* 32: zero */
};

enum {
    RING_FLAG_ERROR = 1u << 0, /* a response: the request could not be served */
    RING_FLAG_LAST = 1u << 1,  /* the producer sends nothing after this message */
};

/* A view of one slot in the mapped memory. */
struct ring_slot {
    struct ring_slot_header *hdr;
    int32_t *expert_ids;    /* [max_tokens][max_experts], row-major */
    float *expert_weights;  /* [max_tokens][max_experts] */
    void *payload;          /* payload_bytes of the ring, 64-byte aligned */
};

enum ring_role { RING_PRODUCER = 0, RING_CONSUMER = 1 };
enum ring_wait_mode { RING_WAIT_FUTEX = 0, RING_WAIT_SPIN = 1 };

/* How this process waits.  Zeroed fields take the defaults. */
struct ring_options {
    enum ring_wait_mode mode; /* FUTEX: spin spin_ns, then sleep.  SPIN: never sleep */
    uint64_t spin_ns;         /* default 50 µs; in FUTEX mode, 0 is "the default", use 1 to sleep at once */
    uint64_t peer_check_ns;   /* how often a waiter checks the peer is alive; default 10 ms */
};

/* Counts kept by this process's handle (not shared). */
struct ring_counters {
    uint64_t messages;    /* published (producer) or released (consumer) */
    uint64_t sleeps;      /* futex waits entered */
    uint64_t wakes;       /* futex wakes made for a sleeping peer */
    uint64_t full_waits;  /* producer: reserves that found the ring full */
};

typedef struct ring ring;

#define RING_FOREVER UINT64_MAX /* a timeout that never expires (the peer is still watched) */
#define RING_ALIGN 64           /* a ring's offset in its region must be a multiple of this */
#define RING_MAX_TOKENS 8192u   /* rows a message may carry: the largest prefill step (NB_MAX_PREFILL_CHUNK) */

/* 0, or NB_EINVAL with a message naming the field out of range. */
int ring_check_geometry(const struct ring_geometry *g, char *err, size_t errlen);
/* Bytes a ring of this geometry occupies (header, then the slots); 0 for a
 * geometry ring_check_geometry refuses. */
size_t ring_bytes(const struct ring_geometry *g);

/* Coordinator: lays a ring out at offset in a region (zeroes it, writes the
 * geometry, then the magic word).  Refused while a process is attached. */
int ring_format(const struct shm_region *reg, size_t offset, const struct ring_geometry *g, char *err,
                size_t errlen);

/* Takes one role of the ring at offset.  Fails with SHM_EBUSY while another
 * live process holds the role.  A new producer continues after the last
 * published message; a new consumer after the last released one (a message
 * its dead predecessor took but did not release comes again). */
int ring_attach(ring **out, const struct shm_region *reg, size_t offset, enum ring_role role,
                const struct ring_options *opt, char *err, size_t errlen);

/* Gives the role back and wakes the peer, whose waits then end with SHM_EPEER
 * once the ring is drained.  NULL is allowed. */
void ring_detach(ring *r);

/* Producer: waits (up to timeout_ns) for a free slot and returns a view of it.
 * Calling it again before ring_publish() returns the same slot. */
int ring_reserve(ring *r, struct ring_slot *slot, uint64_t timeout_ns, char *err, size_t errlen);

/* Producer: checks the header against the geometry, then publishes the
 * reserved slot (seq, then head, both release) and wakes a sleeping consumer. */
int ring_publish(ring *r, char *err, size_t errlen);

/* Consumer: waits (up to timeout_ns) for the next message and returns a view
 * of it; the slot stays the consumer's until ring_release().  A header that
 * does not fit the geometry is NB_EFORMAT. */
int ring_wait(ring *r, struct ring_slot *slot, uint64_t timeout_ns, char *err, size_t errlen);

/* Consumer: hands the slot of the last ring_wait() back to the producer. */
int ring_release(ring *r, char *err, size_t errlen);

#define RING_DEFAULT_SPIN_NS 50000ull /* ring_options.spin_ns when 0 */

/* Changes this handle's spin_ns (struct ring_options; 0: the 50 µs default)
 * for its waits from now on: a waiter that expects its message soon (the
 * next layer of a token) spins longer than one that may wait for minutes. */
void ring_set_spin_ns(ring *r, uint64_t spin_ns);

/* This handle's counts, and the ring's geometry. */
struct ring_counters ring_get_counters(const ring *r);
struct ring_geometry ring_get_geometry(const ring *r);

/* Request/response: two rings of one geometry, the response ring right after
 * the request ring (at offset + ring_pair_response_offset(g)).  Response k
 * answers request k: the server publishes exactly one response per request,
 * in order, so the two sequence numbers match. */
enum ring_side { RING_CLIENT, RING_SERVER }; /* client: produces requests, consumes responses */
struct ring_pair {
    ring *req;
    ring *resp;
};
size_t ring_pair_response_offset(const struct ring_geometry *g);
size_t ring_pair_bytes(const struct ring_geometry *g);
int ring_pair_format(const struct shm_region *reg, size_t offset, const struct ring_geometry *g, char *err,
                     size_t errlen);
int ring_pair_attach(struct ring_pair *p, const struct shm_region *reg, size_t offset, enum ring_side side,
                     const struct ring_options *opt, char *err, size_t errlen);
void ring_pair_detach(struct ring_pair *p);

/* ---- stats -------------------------------------------------------------- */

/* Counter indices of a worker block (meaning fixed by the layout version). */
enum shm_stat {
    SHM_STAT_STEPS,          /* decode/verify steps or requests served */
    SHM_STAT_TOKENS,         /* tokens processed */
    SHM_STAT_EXPERT_HITS,    /* routed experts found in this worker's tier */
    SHM_STAT_EXPERT_MISSES,  /* routed experts it had to get elsewhere */
    SHM_STAT_BYTES_READ,     /* bytes read from the SSD */
    SHM_STAT_BYTES_COPIED,   /* bytes copied host -> device */
    SHM_STAT_RING_MESSAGES,  /* ring messages published or consumed */
    SHM_STAT_RING_WAIT_NS,   /* time spent waiting on rings */
    SHM_STAT_RING_SLEEPS,    /* futex sleeps on rings */
    SHM_STAT_BUSY_NS,        /* time spent computing */
    SHM_STAT_ERRORS,         /* failed requests */
    SHM_STAT_PLE_ROWS,       /* PLE table rows asked of the pager (gpu-worker) or served (pager) */
    SHM_STAT_PLE_BYTES_READ, /* the part of BYTES_READ that was ple.bin pages */
    SHM_STAT_SSD_BLOB_BYTES, /* gpu-worker: SSD-tier expert blobs its moe requests need paged */
    SHM_STAT_EXPERTS_COMPUTED, /* routed (token, expert) pairs of trunk layers whose FFN this worker ran */
    SHM_STAT_VRAM_PEAK_BYTES,  /* gpu-worker: peak device memory of its backend (a high-water mark, raised by adds) */
    /* gpu-worker: the slot cache (engine/backend.h gw_slot_stats; adaptive slots only) */
    SHM_STAT_SLOT_SELECTIONS,  /* routed pairs of decode steps and verify windows */
    SHM_STAT_SLOT_HITS,        /* of them, found in a slot */
    SHM_STAT_SLOT_STATIC_HITS, /* of them, in the placement's slots (what static slots would have hit) */
    SHM_STAT_SLOT_SWAPS,       /* experts copied into a slot */
    SHM_STAT_SLOT_BYTES,       /* their bytes, host -> device */
    SHM_STAT_SLOT_WAITED,      /* evals that waited for a slot's copy (0 by design) */
    SHM_STAT_COUNT
};
#define SHM_STATS_COUNTERS 32 /* counter slots per block; indices ≥ SHM_STAT_COUNT are zero, reserved */

typedef struct shm_stats shm_stats;

size_t shm_stats_bytes(uint32_t n_workers, uint32_t n_layers);

/* Coordinator: lays the stats region out (zeroed, version word last). */
int shm_stats_format(const struct shm_region *reg, uint32_t n_workers, uint32_t n_layers, char *err,
                     size_t errlen);

/* Anyone: a view of the stats region; refuses another layout version. */
int shm_stats_open(shm_stats **out, const struct shm_region *reg, char *err, size_t errlen);
void shm_stats_close(shm_stats *s);
uint32_t shm_stats_n_workers(const shm_stats *s);
uint32_t shm_stats_n_layers(const shm_stats *s);

/* A worker: takes block `worker` (given by the coordinator), writes its pid,
 * name and kind, bumps the block's epoch.  SHM_EBUSY while another live
 * process holds the block.  Counters are not reset: they are totals over the
 * life of the instance.  shm_stats_close() gives the block back. */
int shm_stats_claim(shm_stats *s, uint32_t worker, const char *name, uint32_t kind, char *err, size_t errlen);

/* The owner of a block adds to its counters (one writer per block: plain
 * relaxed stores, no locked instructions).  Adds to a block this handle did
 * not claim, or to an index out of range, are ignored. */
void shm_stats_add(shm_stats *s, uint32_t worker, enum shm_stat c, uint64_t v);
void shm_stats_add_layer(shm_stats *s, uint32_t worker, uint32_t layer, uint64_t ns);

/* Anyone reads.  Each counter is read atomically; a set of counters is not a
 * snapshot of one instant. */
struct shm_stats_worker {
    uint32_t pid; /* 0: never claimed */
    uint32_t kind;
    uint32_t epoch;
    char name[32];
    bool alive; /* a process holds the block now */
};
struct shm_stats_worker shm_stats_worker_info(const shm_stats *s, uint32_t worker);
uint64_t shm_stats_get(const shm_stats *s, uint32_t worker, enum shm_stat c);
uint64_t shm_stats_layer_ns(const shm_stats *s, uint32_t worker, uint32_t layer);
uint64_t shm_stats_layer_calls(const shm_stats *s, uint32_t worker, uint32_t layer);

#endif
