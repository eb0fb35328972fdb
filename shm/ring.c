/* ring.c — single-producer / single-consumer rings of fixed-size slots.
 *
 * The key idea: each side owns the words it writes, each on its own cache
 * line, and the only hand-over is a release store answered by an acquire
 * load.  The producer fills slot (m mod n), stores the slot's seq = m + 1
 * (release) and then head = m + 1, the doorbell; the consumer waits until the
 * slot's seq is m + 1 (acquire), reads it, and stores tail = m + 1
 * (release) to give it back.  The producer may fill message m once
 * m - tail < n.  Counters are 32-bit and wrap (tail is compared cyclically,
 * as cuStreamWaitValue32's GEQ does), which is why n must be a power of two.
 *
 * Everything shared is described by struct ring_header and struct
 * ring_slot_header: plain words at fixed offsets (docs/PROTOCOL.md), no
 * pointers, so a GPU that registered the pages can take either side. */
#include <assert.h>
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "shm/shm_impl.h"

#define RING_MAGIC 0x4752424eu /* "NBRG" little-endian */
#define RING_VERSION 1u
#define SLOTS_OFFSET 512u
#define SLOT_IDS_OFFSET 64u
#define MAX_SLOTS 65536u
#define MAX_PAYLOAD_BYTES (1u << 30)
#define PAIR_ALIGN 4096u

/* The ring header as it lies at the ring's offset.  One line per writer. */
struct ring_header {
    /* line 0: geometry, written once by ring_format (magic last) */
    shm_word magic;
    uint32_t version, n_slots, max_tokens, max_experts, payload_bytes, slot_bytes, slots_offset;
    uint32_t ids_offset, weights_offset, payload_offset, reserved0;
    uint64_t ring_bytes, reserved1;
    /* line 1: the producer's */
    alignas(64) shm_word head; /* messages published: the consumer's doorbell */
    shm_word producer_pid;     /* last producer to attach; 0: none yet */
    shm_word producer_epoch;   /* producer attaches so far */
    /* line 2: the consumer's */
    alignas(64) shm_word tail; /* messages released: the producer's doorbell */
    shm_word consumer_pid;
    shm_word consumer_epoch;
    /* lines 3 and 4: sleep flags, each read by the other side after every hand-over */
    alignas(64) shm_word consumer_sleeping;
    alignas(64) shm_word producer_sleeping;
    alignas(64) uint8_t reserved2[SLOTS_OFFSET - 320];
};
static_assert(offsetof(struct ring_header, ring_bytes) == 48, "ring header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_header, head) == 64, "ring header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_header, producer_epoch) == 72, "ring header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_header, tail) == 128, "ring header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_header, consumer_sleeping) == 192, "ring header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_header, producer_sleeping) == 256, "ring header layout (docs/PROTOCOL.md)");
static_assert(sizeof(struct ring_header) == SLOTS_OFFSET, "ring header layout (docs/PROTOCOL.md)");
static_assert(sizeof(struct ring_slot_header) == SLOT_IDS_OFFSET, "slot header layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct ring_slot_header, tag) == 24, "slot header layout (docs/PROTOCOL.md)");

struct ring {
    struct ring_header *h;
    uint8_t *slots;
    struct ring_geometry g;
    uint32_t slot_bytes, weights_offset, payload_offset;
    enum ring_role role;
    int fd;
    off_t lock_at; /* our attach lock; the peer's is the other byte */
    uint32_t next; /* number of the message we reserve / wait for next */
    uint32_t tail_seen; /* producer: the last tail it read (saves a shared read per message) */
    bool holding;  /* between reserve and publish, or wait and release */
    struct ring_options opt;
    struct ring_counters c;
};

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Offsets inside a slot: header, ids, weights, payload, each 64-byte aligned. */
struct slot_layout {
    uint32_t weights_offset, payload_offset, slot_bytes;
};

static int check_geometry(const struct ring_geometry *g, struct slot_layout *l, char *err, size_t errlen)
{
    if (g->n_slots == 0 || g->n_slots > MAX_SLOTS || (g->n_slots & (g->n_slots - 1)) != 0)
        return nb_errf(err, errlen, NB_EINVAL, "ring: n_slots %u is not a power of two in [1, %u]", g->n_slots,
                       MAX_SLOTS);
    if (g->max_tokens == 0 || g->max_tokens > RING_MAX_TOKENS || g->max_experts > 1024)
        return nb_errf(err, errlen, NB_EINVAL, "ring: max_tokens %u (1-%u) or max_experts %u (0-1024) out of range",
                       g->max_tokens, RING_MAX_TOKENS, g->max_experts);
    if (g->payload_bytes > MAX_PAYLOAD_BYTES)
        return nb_errf(err, errlen, NB_EINVAL, "ring: payload_bytes %u over %u", g->payload_bytes, MAX_PAYLOAD_BYTES);
    uint64_t table = align_up(4ull * g->max_tokens * g->max_experts, 64);
    l->weights_offset = (uint32_t)(SLOT_IDS_OFFSET + table);
    l->payload_offset = (uint32_t)(l->weights_offset + table);
    l->slot_bytes = (uint32_t)align_up((uint64_t)l->payload_offset + g->payload_bytes, 64);
    return 0;
}

int ring_check_geometry(const struct ring_geometry *g, char *err, size_t errlen)
{
    struct slot_layout l;
    return check_geometry(g, &l, err, errlen);
}

size_t ring_bytes(const struct ring_geometry *g)
{
    struct slot_layout l;
    if (check_geometry(g, &l, NULL, 0) != 0) return 0;
    return SLOTS_OFFSET + (size_t)g->n_slots * l.slot_bytes;
}

static int check_place(const struct shm_region *reg, size_t offset, size_t bytes, char *err, size_t errlen)
{
    if (!reg || !reg->base) return nb_errf(err, errlen, NB_EINVAL, "ring: region not mapped");
    if (offset % RING_ALIGN != 0)
        return nb_errf(err, errlen, NB_EINVAL, "ring at offset %zu of %s: not a multiple of %d", offset, reg->name,
                       RING_ALIGN);
    if (offset > reg->bytes || bytes > reg->bytes - offset)
        return nb_errf(err, errlen, NB_EINVAL, "ring at offset %zu of %s: %zu bytes do not fit in %zu", offset,
                       reg->name, bytes, reg->bytes);
    return 0;
}

int ring_format(const struct shm_region *reg, size_t offset, const struct ring_geometry *g, char *err, size_t errlen)
{
    struct slot_layout l;
    int rc = check_geometry(g, &l, err, errlen);
    if (rc == 0) rc = check_place(reg, offset, ring_bytes(g), err, errlen);
    if (rc != 0) return rc;
    for (int role = RING_PRODUCER; role <= RING_CONSUMER; role++)
        if (shm_byte_locked(reg->fd, (off_t)offset + role))
            return nb_errf(err, errlen, SHM_EBUSY, "ring at offset %zu of %s: a %s is attached", offset, reg->name,
                           role == RING_PRODUCER ? "producer" : "consumer");
    struct ring_header *h = (struct ring_header *)(reg->base + offset);
    memset(reg->base + offset, 0, ring_bytes(g));
    h->version = RING_VERSION;
    h->n_slots = g->n_slots;
    h->max_tokens = g->max_tokens;
    h->max_experts = g->max_experts;
    h->payload_bytes = g->payload_bytes;
    h->slot_bytes = l.slot_bytes;
    h->slots_offset = SLOTS_OFFSET;
    h->ids_offset = SLOT_IDS_OFFSET;
    h->weights_offset = l.weights_offset;
    h->payload_offset = l.payload_offset;
    h->ring_bytes = ring_bytes(g);
    atomic_store_explicit(&h->magic, RING_MAGIC, memory_order_release);
    return 0;
}

/* Reads and checks a formatted header (geometry recomputed, not trusted). */
static int read_header(const struct shm_region *reg, size_t offset, struct ring_geometry *g, struct slot_layout *l,
                       char *err, size_t errlen)
{
    int rc = check_place(reg, offset, SLOTS_OFFSET, err, errlen);
    if (rc != 0) return rc;
    const struct ring_header *h = (const struct ring_header *)(reg->base + offset);
    uint32_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic != RING_MAGIC)
        return nb_errf(err, errlen, NB_EFORMAT, "no ring at offset %zu of %s (magic 0x%08x)", offset, reg->name, magic);
    if (h->version != RING_VERSION)
        return nb_errf(err, errlen, NB_ENOTSUP, "ring at offset %zu of %s: version %u, this build speaks %u", offset,
                       reg->name, h->version, RING_VERSION);
    *g = (struct ring_geometry){h->n_slots, h->max_tokens, h->max_experts, h->payload_bytes};
    if ((rc = check_geometry(g, l, err, errlen)) != 0) return rc;
    if (h->slot_bytes != l->slot_bytes || h->slots_offset != SLOTS_OFFSET || h->ids_offset != SLOT_IDS_OFFSET ||
        h->weights_offset != l->weights_offset || h->payload_offset != l->payload_offset ||
        h->ring_bytes != ring_bytes(g))
        return nb_errf(err, errlen, NB_EFORMAT, "ring at offset %zu of %s: slot offsets do not match its geometry",
                       offset, reg->name);
    return check_place(reg, offset, ring_bytes(g), err, errlen);
}

static struct ring_slot_header *slot_at(const ring *r, uint32_t msg)
{
    return (struct ring_slot_header *)(r->slots + (size_t)(msg & (r->g.n_slots - 1)) * r->slot_bytes);
}

static shm_word *seq_of(struct ring_slot_header *s) { return shm_word_at(s, offsetof(struct ring_slot_header, seq)); }

static void view(const ring *r, struct ring_slot *out)
{
    struct ring_slot_header *s = slot_at(r, r->next);
    out->hdr = s;
    out->expert_ids = (int32_t *)((uint8_t *)s + SLOT_IDS_OFFSET);
    out->expert_weights = (float *)((uint8_t *)s + r->weights_offset);
    out->payload = (uint8_t *)s + r->payload_offset;
}

int ring_attach(ring **out, const struct shm_region *reg, size_t offset, enum ring_role role,
                const struct ring_options *opt, char *err, size_t errlen)
{
    struct ring_geometry g;
    struct slot_layout l;
    int rc = read_header(reg, offset, &g, &l, err, errlen);
    if (rc != 0) return rc;
    if (reg->opener_pid != (int)getpid())
        return nb_errf(err, errlen, NB_EINVAL, "%s was opened by pid %d: after fork, open the region again",
                       reg->name, reg->opener_pid);
    const char *what = role == RING_PRODUCER ? "producer" : "consumer";
    struct ring_header *h = (struct ring_header *)(reg->base + offset);
    off_t lock_at = (off_t)offset + role;
    if ((rc = shm_lock_byte(reg->fd, lock_at)) != 0) {
        if (rc != SHM_EBUSY)
            return nb_errf(err, errlen, rc, "ring at offset %zu of %s: cannot take the %s lock: %s", offset,
                           reg->name, what, strerror(errno));
        uint32_t pid = atomic_load(role == RING_PRODUCER ? &h->producer_pid : &h->consumer_pid);
        return nb_errf(err, errlen, rc, "ring at offset %zu of %s: a live %s is attached (pid %u)", offset, reg->name,
                       what, pid);
    }
    ring *r = calloc(1, sizeof *r);
    if (!r) {
        shm_unlock_byte(reg->fd, lock_at);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    *r = (struct ring){.h = h, .slots = reg->base + offset + SLOTS_OFFSET, .g = g, .slot_bytes = l.slot_bytes,
                       .weights_offset = l.weights_offset, .payload_offset = l.payload_offset, .role = role,
                       .fd = reg->fd, .lock_at = lock_at};
    r->opt.mode = opt ? opt->mode : RING_WAIT_FUTEX;
    r->opt.spin_ns = opt && opt->spin_ns ? opt->spin_ns : RING_DEFAULT_SPIN_NS;
    r->opt.peer_check_ns = opt && opt->peer_check_ns ? opt->peer_check_ns : 10000000;
    if (role == RING_PRODUCER) {
        r->next = atomic_load_explicit(&h->head, memory_order_acquire);
        /* A producer that died between its two stores published message `next`
         * (the slot's seq) without bumping head: finish its publish. */
        if (atomic_load_explicit(seq_of(slot_at(r, r->next)), memory_order_acquire) == r->next + 1)
            atomic_store_explicit(&h->head, ++r->next, memory_order_release);
        r->tail_seen = atomic_load_explicit(&h->tail, memory_order_acquire);
        atomic_store_explicit(&h->producer_pid, (uint32_t)getpid(), memory_order_release);
        atomic_fetch_add(&h->producer_epoch, 1);
    } else {
        r->next = atomic_load_explicit(&h->tail, memory_order_acquire);
        atomic_store_explicit(&h->consumer_pid, (uint32_t)getpid(), memory_order_release);
        atomic_fetch_add(&h->consumer_epoch, 1);
    }
    *out = r;
    return 0;
}

void ring_detach(ring *r)
{
    if (!r) return;
    shm_unlock_byte(r->fd, r->lock_at);
    /* The peer sleeps on our doorbell: wake it so it sees the free lock now. */
    doorbell_wake_all(r->role == RING_PRODUCER ? &r->h->head : &r->h->tail);
    free(r);
}

/* A wait on this ring's doorbell for the peer's side: the producer for tail
 * ≥ target (cyclic), the consumer for a slot's seq == target exactly (so a
 * header the producer is still writing, seq included, is never taken). */
static struct doorbell_wait wait_for(const ring *r, shm_word *word, uint32_t target)
{
    bool producer = r->role == RING_PRODUCER;
    struct ring_header *h = r->h;
    return (struct doorbell_wait){
        .word = word,
        .target = target,
        .exact = !producer,
        .bell = producer ? &h->tail : &h->head,
        .sleeping = producer ? &h->producer_sleeping : &h->consumer_sleeping,
        .peer_pid = producer ? &h->consumer_pid : &h->producer_pid,
        .fd = r->fd,
        .peer_byte = r->lock_at - r->role + (producer ? RING_CONSUMER : RING_PRODUCER),
        .mode = r->opt.mode,
        .spin_ns = r->opt.spin_ns,
        .peer_check_ns = r->opt.peer_check_ns,
    };
}

static int wait_error(const ring *r, int rc, const char *what, char *err, size_t errlen)
{
    if (rc == SHM_ETIMEDOUT) return nb_errf(err, errlen, rc, "ring: timed out waiting for %s", what);
    uint32_t pid = atomic_load(r->role == RING_PRODUCER ? &r->h->consumer_pid : &r->h->producer_pid);
    return nb_errf(err, errlen, rc, "ring: the %s (pid %u) is gone while waiting for %s",
                   r->role == RING_PRODUCER ? "consumer" : "producer", pid, what);
}

int ring_reserve(ring *r, struct ring_slot *slot, uint64_t timeout_ns, char *err, size_t errlen)
{
    if (r->role != RING_PRODUCER) return nb_errf(err, errlen, NB_EINVAL, "ring_reserve: not the producer");
    if (!r->holding) {
        if (r->next - r->tail_seen >= r->g.n_slots) {
            r->tail_seen = atomic_load_explicit(&r->h->tail, memory_order_acquire);
            if (r->next - r->tail_seen >= r->g.n_slots) {
                r->c.full_waits++;
                struct doorbell_wait w = wait_for(r, &r->h->tail, r->next - r->g.n_slots + 1);
                int rc = doorbell_wait(&w, timeout_ns, &r->c.sleeps);
                if (rc != 0) return wait_error(r, rc, "a free slot", err, errlen);
                r->tail_seen = atomic_load_explicit(&r->h->tail, memory_order_acquire);
            }
        }
        /* Fresh header fields: nothing of the slot's last message leaks into this one. */
        struct ring_slot_header *s = slot_at(r, r->next);
        memset((uint8_t *)s + sizeof s->seq, 0, sizeof *s - sizeof s->seq);
        r->holding = true;
    }
    view(r, slot);
    return 0;
}

/* The header checks both sides make: what the consumer may rely on. */
static int check_slot(const ring *r, const struct ring_slot_header *s, char *err, size_t errlen)
{
    if (s->n_tokens > r->g.max_tokens || s->n_experts > r->g.max_experts || s->payload_bytes > r->g.payload_bytes)
        return nb_errf(err, errlen, r->role == RING_PRODUCER ? NB_EINVAL : NB_EFORMAT,
                       "ring message %u: n_tokens %u (max %u), n_experts %u (max %u) or payload_bytes %u (max %u) "
                       "too large",
                       r->next, s->n_tokens, r->g.max_tokens, s->n_experts, r->g.max_experts, s->payload_bytes,
                       r->g.payload_bytes);
    return 0;
}

/* Moves this side's index (head for the producer, tail for the consumer)
 * past the message it holds and rings the other side's doorbell. */
static int advance(ring *r, shm_word *index, shm_word *other_sleeping)
{
    uint32_t moved = r->next + 1;
    atomic_store_explicit(index, moved, memory_order_release);
    doorbell_ring(index, other_sleeping, &r->c.wakes);
    r->next = moved;
    r->holding = false;
    r->c.messages++;
    return 0;
}

int ring_publish(ring *r, char *err, size_t errlen)
{
    if (r->role != RING_PRODUCER || !r->holding)
        return nb_errf(err, errlen, NB_EINVAL, "ring_publish: no reserved slot");
    struct ring_slot_header *s = slot_at(r, r->next);
    int rc = check_slot(r, s, err, errlen);
    if (rc != 0) return rc;
    /* the slot's seq (what the consumer waits for), then head (advance) */
    atomic_store_explicit(seq_of(s), r->next + 1, memory_order_release);
    return advance(r, &r->h->head, &r->h->consumer_sleeping);
}

int ring_wait(ring *r, struct ring_slot *slot, uint64_t timeout_ns, char *err, size_t errlen)
{
    if (r->role != RING_CONSUMER) return nb_errf(err, errlen, NB_EINVAL, "ring_wait: not the consumer");
    struct ring_slot_header *s = slot_at(r, r->next);
    if (!r->holding) {
        struct doorbell_wait w = wait_for(r, seq_of(s), r->next + 1);
        int rc = doorbell_wait(&w, timeout_ns, &r->c.sleeps);
        if (rc != 0) return wait_error(r, rc, "a message", err, errlen);
        r->holding = true;
    }
    view(r, slot);
    return check_slot(r, s, err, errlen);
}

int ring_release(ring *r, char *err, size_t errlen)
{
    if (r->role != RING_CONSUMER || !r->holding)
        return nb_errf(err, errlen, NB_EINVAL, "ring_release: no message taken");
    return advance(r, &r->h->tail, &r->h->producer_sleeping);
}

void ring_set_spin_ns(ring *r, uint64_t spin_ns) { r->opt.spin_ns = spin_ns ? spin_ns : RING_DEFAULT_SPIN_NS; }

struct ring_counters ring_get_counters(const ring *r) { return r->c; }
struct ring_geometry ring_get_geometry(const ring *r) { return r->g; }

/* ---- request/response pairs ---- */

size_t ring_pair_response_offset(const struct ring_geometry *g) { return align_up(ring_bytes(g), PAIR_ALIGN); }

size_t ring_pair_bytes(const struct ring_geometry *g)
{
    size_t one = ring_bytes(g);
    return one ? ring_pair_response_offset(g) + one : 0;
}

int ring_pair_format(const struct shm_region *reg, size_t offset, const struct ring_geometry *g, char *err,
                     size_t errlen)
{
    int rc = ring_format(reg, offset, g, err, errlen);
    return rc ? rc : ring_format(reg, offset + ring_pair_response_offset(g), g, err, errlen);
}

int ring_pair_attach(struct ring_pair *p, const struct shm_region *reg, size_t offset, enum ring_side side,
                     const struct ring_options *opt, char *err, size_t errlen)
{
    struct ring_geometry g;
    struct slot_layout l;
    int rc = read_header(reg, offset, &g, &l, err, errlen);
    if (rc != 0) return rc;
    size_t resp_at = offset + ring_pair_response_offset(&g);
    bool client = side == RING_CLIENT;
    p->req = p->resp = NULL;
    rc = ring_attach(&p->req, reg, offset, client ? RING_PRODUCER : RING_CONSUMER, opt, err, errlen);
    if (rc == 0) rc = ring_attach(&p->resp, reg, resp_at, client ? RING_CONSUMER : RING_PRODUCER, opt, err, errlen);
    if (rc == 0 && memcmp(&g, &p->resp->g, sizeof g) != 0)
        rc = nb_errf(err, errlen, NB_EFORMAT, "ring pair at offset %zu of %s: the two rings differ in geometry",
                     offset, reg->name);
    if (rc != 0) ring_pair_detach(p);
    return rc;
}

void ring_pair_detach(struct ring_pair *p)
{
    ring_detach(p->req);
    ring_detach(p->resp);
    p->req = p->resp = NULL;
}
