/* arena.c — the RAM-tier expert arena (the `experts` region).
 *
 * Layout (core/prepared/prepared.h): a header page, then the RAM-tier blobs
 * in idx-layer order, ascending expert id.  The header's `loaded` word is
 * stored last with release order, so a worker that finds it set (and the
 * same experts.idx identity) knows every blob is in: a restarted worker maps
 * the region and starts serving at once instead of re-reading the SSD. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "cpu-moe-worker/moe.h"

static int read_fully(int fd, uint8_t *dst, uint64_t bytes, uint64_t off, char *err, size_t errlen)
{
    for (uint64_t done = 0; done < bytes;) {
        ssize_t got = pread(fd, dst + done, bytes - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return nb_errf(err, errlen, NB_EIO, "experts.bin: read at %lu failed", (unsigned long)off);
        done += (uint64_t)got;
    }
    return 0;
}

static int fill(struct moe_worker *m, char *err, size_t errlen)
{
    char path[CTL_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/experts.bin", m->conf.prepared);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nb_errf(err, errlen, NB_EIO, "%s: %s", path, strerror(errno));
    int rc = 0;
    for (int i = 0; i < m->idx.n_layers && !rc; i++)
        for (uint32_t e = 0; e < m->idx.layers[i].n_expert && !rc; e++) {
            uint64_t at = m->plc.arena_off[(size_t)i * m->plc.stride + e];
            if (at != UINT64_MAX)
                rc = read_fully(fd, m->arena.base + at, m->idx.layers[i].blob_bytes, prepared_blob_offset(&m->idx, i, e),
                                err, errlen);
        }
    close(fd);
    return rc;
}

int moe_arena_load(struct moe_worker *m, bool *loaded_now, char *err, size_t errlen)
{
    struct prepared_arena_header *h = (struct prepared_arena_header *)m->arena.base;
    _Atomic uint32_t *loaded = (_Atomic uint32_t *)&h->loaded;
    if (m->arena.bytes < m->plc.arena_bytes)
        return nb_errf(err, errlen, NB_EINVAL, "experts region has %lu bytes, the placement needs %lu",
                       (unsigned long)m->arena.bytes, (unsigned long)m->plc.arena_bytes);
    *loaded_now = false;
    if (atomic_load_explicit(loaded, memory_order_acquire) == 1 && h->magic == PREPARED_ARENA_MAGIC &&
        h->arena_bytes == m->plc.arena_bytes && h->n_blobs == m->plc.n_arena &&
        !strcmp(h->experts_idx_sha, m->plc.idx_sha))
        return 0;
    atomic_store_explicit(loaded, 0, memory_order_relaxed);
    int rc = fill(m, err, errlen);
    if (rc) return rc;
    h->magic = PREPARED_ARENA_MAGIC;
    h->version = 1;
    h->arena_bytes = m->plc.arena_bytes;
    h->n_blobs = m->plc.n_arena;
    snprintf(h->experts_idx_sha, sizeof h->experts_idx_sha, "%s", m->plc.idx_sha);
    atomic_store_explicit(loaded, 1, memory_order_release);
    *loaded_now = true;
    return 0;
}
