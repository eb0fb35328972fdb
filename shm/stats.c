/* stats.c — the stats region: per-worker blocks of 64-bit counters.
 *
 * The key idea: one writer per block, any number of readers, no protocol.
 * A worker claims its block (an OFD lock on the block's first byte says it is
 * alive and keeps a second writer out) and adds to its counters with relaxed
 * load + store: with a single writer no locked instruction is needed, and an
 * aligned 64-bit load is atomic, so nebulactl or /metrics read a counter
 * without asking anyone.  Counters only grow; a reader that wants a rate
 * reads twice.  Layout in docs/PROTOCOL.md ("Stats region"). */
#include <assert.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "shm/shm_impl.h"

#define STATS_MAGIC 0x5453424eu /* "NBST" little-endian */
#define STATS_VERSION 1u
#define BLOCKS_OFFSET 64u
#define COUNTERS_OFFSET 64u /* in a block */
#define LAYERS_OFFSET (COUNTERS_OFFSET + 8u * SHM_STATS_COUNTERS)
#define MAX_WORKERS 256u
#define MAX_LAYERS 1024u

struct stats_header {
    shm_word magic; /* written last */
    uint32_t version, n_workers, n_layers, n_counters, block_bytes, blocks_offset, reserved0;
    uint8_t reserved1[32];
};

struct stats_block {
    shm_word pid; /* 0: never claimed */
    uint32_t kind;
    shm_word epoch; /* claims so far */
    uint32_t reserved0;
    char name[32];
    uint8_t reserved1[16];
    _Atomic uint64_t counters[SHM_STATS_COUNTERS];
    /* then layer_ns[n_layers], layer_calls[n_layers] */
};
static_assert(sizeof(struct stats_header) == BLOCKS_OFFSET, "stats layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct stats_block, name) == 16, "stats layout (docs/PROTOCOL.md)");
static_assert(offsetof(struct stats_block, counters) == COUNTERS_OFFSET, "stats layout (docs/PROTOCOL.md)");
static_assert(sizeof(struct stats_block) == LAYERS_OFFSET, "stats layout (docs/PROTOCOL.md)");
static_assert(SHM_STAT_COUNT <= SHM_STATS_COUNTERS, "counter slots");

struct shm_stats {
    uint8_t *base;
    uint32_t n_workers, n_layers, block_bytes;
    int fd;
    bool *claimed; /* [n_workers]: blocks this handle writes */
};

static uint32_t block_bytes(uint32_t n_layers) { return (LAYERS_OFFSET + 16u * n_layers + 63u) / 64u * 64u; }

size_t shm_stats_bytes(uint32_t n_workers, uint32_t n_layers)
{
    return BLOCKS_OFFSET + (size_t)n_workers * block_bytes(n_layers);
}

static struct stats_block *block(const shm_stats *s, uint32_t worker)
{
    return (struct stats_block *)(s->base + BLOCKS_OFFSET + (size_t)worker * s->block_bytes);
}

static _Atomic uint64_t *layer_ns(const shm_stats *s, uint32_t worker)
{
    return (_Atomic uint64_t *)((uint8_t *)block(s, worker) + LAYERS_OFFSET);
}

int shm_stats_format(const struct shm_region *reg, uint32_t n_workers, uint32_t n_layers, char *err, size_t errlen)
{
    if (n_workers == 0 || n_workers > MAX_WORKERS || n_layers > MAX_LAYERS)
        return nb_errf(err, errlen, NB_EINVAL, "stats: %u workers (1-%u), %u layers (0-%u)", n_workers, MAX_WORKERS,
                       n_layers, MAX_LAYERS);
    size_t need = shm_stats_bytes(n_workers, n_layers);
    if (!reg->base || reg->bytes < need)
        return nb_errf(err, errlen, NB_EINVAL, "stats: %s has %zu bytes, the layout needs %zu", reg->name,
                       reg->bytes, need);
    memset(reg->base, 0, need);
    struct stats_header *h = (struct stats_header *)reg->base;
    *h = (struct stats_header){.version = STATS_VERSION, .n_workers = n_workers, .n_layers = n_layers,
                               .n_counters = SHM_STATS_COUNTERS, .block_bytes = block_bytes(n_layers),
                               .blocks_offset = BLOCKS_OFFSET};
    atomic_store_explicit(&h->magic, STATS_MAGIC, memory_order_release);
    return 0;
}

int shm_stats_open(shm_stats **out, const struct shm_region *reg, char *err, size_t errlen)
{
    if (!reg->base || reg->bytes < BLOCKS_OFFSET)
        return nb_errf(err, errlen, NB_EFORMAT, "stats: %s is too small for a header", reg->name);
    struct stats_header *h = (struct stats_header *)reg->base;
    uint32_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic != STATS_MAGIC)
        return nb_errf(err, errlen, NB_EFORMAT, "stats: %s has no stats header (magic 0x%08x)", reg->name, magic);
    if (h->version != STATS_VERSION)
        return nb_errf(err, errlen, NB_ENOTSUP, "stats: %s has layout version %u, this build reads %u", reg->name,
                       h->version, STATS_VERSION);
    if (h->n_workers == 0 || h->n_workers > MAX_WORKERS || h->n_layers > MAX_LAYERS ||
        h->n_counters != SHM_STATS_COUNTERS || h->block_bytes != block_bytes(h->n_layers) ||
        h->blocks_offset != BLOCKS_OFFSET || reg->bytes < shm_stats_bytes(h->n_workers, h->n_layers))
        return nb_errf(err, errlen, NB_EFORMAT, "stats: %s has an inconsistent header (%u workers, %u layers)",
                       reg->name, h->n_workers, h->n_layers);
    shm_stats *s = calloc(1, sizeof *s);
    bool *claimed = calloc(h->n_workers, sizeof *claimed);
    if (!s || !claimed) {
        free(s), free(claimed);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    *s = (shm_stats){reg->base, h->n_workers, h->n_layers, h->block_bytes, reg->fd, claimed};
    *out = s;
    return 0;
}

static off_t block_lock_at(const shm_stats *s, uint32_t worker)
{
    return (off_t)((uint8_t *)block(s, worker) - s->base);
}

void shm_stats_close(shm_stats *s)
{
    if (!s) return;
    for (uint32_t w = 0; w < s->n_workers; w++)
        if (s->claimed[w]) shm_unlock_byte(s->fd, block_lock_at(s, w));
    free(s->claimed);
    free(s);
}

uint32_t shm_stats_n_workers(const shm_stats *s) { return s->n_workers; }
uint32_t shm_stats_n_layers(const shm_stats *s) { return s->n_layers; }

int shm_stats_claim(shm_stats *s, uint32_t worker, const char *name, uint32_t kind, char *err, size_t errlen)
{
    if (worker >= s->n_workers)
        return nb_errf(err, errlen, NB_EINVAL, "stats: worker %u of %u", worker, s->n_workers);
    struct stats_block *b = block(s, worker);
    if (!s->claimed[worker]) {
        int rc = shm_lock_byte(s->fd, block_lock_at(s, worker));
        if (rc != 0)
            return nb_errf(err, errlen, rc, "stats: block %u is %s", worker,
                           rc == SHM_EBUSY ? "held by a live process" : "not lockable");
        s->claimed[worker] = true;
    }
    memset(b->name, 0, sizeof b->name);
    strncpy(b->name, name ? name : "", sizeof b->name - 1);
    b->kind = kind;
    atomic_fetch_add(&b->epoch, 1);
    atomic_store_explicit(&b->pid, (uint32_t)getpid(), memory_order_release);
    return 0;
}

/* The single writer's increment: relaxed load + store, no locked instruction. */
static inline void bump(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

void shm_stats_add(shm_stats *s, uint32_t worker, enum shm_stat c, uint64_t v)
{
    if (worker < s->n_workers && s->claimed[worker] && (unsigned)c < SHM_STAT_COUNT)
        bump(&block(s, worker)->counters[c], v);
}

void shm_stats_add_layer(shm_stats *s, uint32_t worker, uint32_t layer, uint64_t ns)
{
    if (worker >= s->n_workers || !s->claimed[worker] || layer >= s->n_layers) return;
    _Atomic uint64_t *t = layer_ns(s, worker);
    bump(&t[layer], ns);
    bump(&t[s->n_layers + layer], 1);
}

struct shm_stats_worker shm_stats_worker_info(const shm_stats *s, uint32_t worker)
{
    struct shm_stats_worker w = {0};
    if (worker >= s->n_workers) return w;
    struct stats_block *b = block(s, worker);
    w.pid = atomic_load_explicit(&b->pid, memory_order_acquire);
    w.kind = b->kind;
    w.epoch = atomic_load_explicit(&b->epoch, memory_order_relaxed);
    memcpy(w.name, b->name, sizeof w.name);
    w.name[sizeof w.name - 1] = '\0';
    w.alive = s->claimed[worker] || shm_byte_locked(s->fd, block_lock_at(s, worker));
    return w;
}

uint64_t shm_stats_get(const shm_stats *s, uint32_t worker, enum shm_stat c)
{
    if (worker >= s->n_workers || (unsigned)c >= SHM_STATS_COUNTERS) return 0;
    return atomic_load_explicit(&block(s, worker)->counters[c], memory_order_relaxed);
}

uint64_t shm_stats_layer_ns(const shm_stats *s, uint32_t worker, uint32_t layer)
{
    if (worker >= s->n_workers || layer >= s->n_layers) return 0;
    return atomic_load_explicit(&layer_ns(s, worker)[layer], memory_order_relaxed);
}

uint64_t shm_stats_layer_calls(const shm_stats *s, uint32_t worker, uint32_t layer)
{
    if (worker >= s->n_workers || layer >= s->n_layers) return 0;
    return atomic_load_explicit(&layer_ns(s, worker)[s->n_layers + layer], memory_order_relaxed);
}
