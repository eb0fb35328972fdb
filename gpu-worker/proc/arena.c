/* arena.c — the RAM arena (the `experts` region the cpu-moe-worker loads) as
 * the backend's host copies of experts (engine/backend.h gw_expert_host):
 * a prefill chunk then streams the RAM-tier experts it needs into the GPU
 * itself instead of sending their pairs to the cpu-moe-worker (issue 14).
 *
 * The tables come from the placement at configure (core/prepared: each RAM-
 * tier blob's offset in the arena, each layer's part offsets and blob size);
 * the region is mapped then too.  The cpu-moe-worker fills the arena after
 * its own configure, so the tables are handed to the backend only once the
 * arena's header says it is loaded — and with the identity of the experts
 * this placement names (gwp_arena_ready, before each prefill step). */
#include "gpu-worker/proc/gw_proc.h"

#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "core/util/clock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gwp_arena_open(struct gwp_arena *a, const char *inst, const struct prepared_idx *x, const struct prepared_placement *p,
                   const struct model *m, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->reg.fd = -1;
    if (!x || p->n_arena == 0) return 0;
    const int n = m->hp.n_layer + m->hp.n_nextn, E = m->hp.n_expert;
    a->blob = calloc((size_t)n * E, sizeof *a->blob);
    a->part = calloc((size_t)n * 3, sizeof *a->part);
    a->bytes = calloc((size_t)n, sizeof *a->bytes);
    if (!a->blob || !a->part || !a->bytes) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    int rc = shm_region_open(inst, "experts", &a->reg, err, errlen);
    if (rc) return rc;
    if (a->reg.bytes < p->arena_bytes)
        return nb_errf(err, errlen, NB_EINVAL, "the experts region has %llu bytes, the placement's arena %llu",
                       (unsigned long long)a->reg.bytes, (unsigned long long)p->arena_bytes);
    for (int i = 0; i < x->n_layers; i++) {
        const struct prepared_layer *L = &x->layers[i];
        if ((int)L->block >= n || (int)L->n_expert != E) continue; /* gwp_placement_maps refused those already */
        a->bytes[L->block] = L->blob_bytes;
        for (int j = 0; j < 3; j++) a->part[3 * (size_t)L->block + j] = L->part[j].offset;
        for (int e = 0; e < E; e++) {
            const uint64_t at = p->arena_off[(size_t)i * p->stride + e];
            if (at != UINT64_MAX) a->blob[(size_t)L->block * E + e] = (const uint8_t *)a->reg.base + at, a->n_blobs++;
        }
    }
    /* blocks without a layer in the idx (none in qwen4exp) keep a blob size the offsets fit in */
    for (int l = 0; l < n; l++)
        if (!a->bytes[l]) a->bytes[l] = 1, a->part[3 * l] = a->part[3 * l + 1] = a->part[3 * l + 2] = 0;
    a->arena_bytes = p->arena_bytes;
    snprintf(a->idx_sha, sizeof a->idx_sha, "%s", p->idx_sha);
    a->open = true;
    return 0;
}

int gwp_arena_ready(struct gwp_arena *a, gw_backend *be, char *err, size_t errlen)
{
    if (!a->open || a->installed || a->refused) return 0;
    const struct prepared_arena_header *h = (const struct prepared_arena_header *)a->reg.base;
    if (atomic_load_explicit((const _Atomic uint32_t *)&h->loaded, memory_order_acquire) != 1) return 0; /* not yet */
    if (h->magic != PREPARED_ARENA_MAGIC || h->arena_bytes != a->arena_bytes || strcmp(h->experts_idx_sha, a->idx_sha)) {
        nb_log("the expert arena holds other experts than this placement's: prefill leaves them to the cpu-moe-worker");
        a->refused = true;
        return 0;
    }
    const double t0 = nb_now_s();
    struct gw_expert_host xh = {a->blob, a->part, a->bytes, a->reg.base, a->arena_bytes, a->stream_rows};
    int rc = gw_backend_set_expert_host(be, &xh, err, errlen);
    if (rc == NB_ENOTSUP) { /* the CPU backend computes remote experts through the hook */
        a->refused = true;
        return 0;
    }
    if (rc) return rc;
    a->installed = true;
    nb_log("prefill streams the %llu RAM-tier experts from the arena (%.1f GiB, installed in %.2f s)",
           (unsigned long long)a->n_blobs, (double)a->arena_bytes / 1073741824.0, nb_now_s() - t0);
    return 0;
}

void gwp_arena_close(struct gwp_arena *a)
{
    shm_region_close(&a->reg);
    free(a->blob), free(a->part), free(a->bytes);
    memset(a, 0, sizeof *a);
    a->reg.fd = -1;
}
