/* moe.h — the cpu-moe-worker's state and its two jobs: the RAM arena
 * (arena.c) and serving the `moe` ring pair (serve.c). */
#ifndef NB_MOE_H
#define NB_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ctl/worker.h"
#include "core/prepared/prepared.h"
#include "engine/ffn.h"
#include "shm/shm.h"

struct moe_worker {
    struct ctl_configure conf;
    struct prepared_idx idx;
    struct prepared_placement plc;
    struct shm_region arena, staging, moe_reg, pager_reg, stats_reg;
    struct ring_pair moe, pager;
    shm_stats *stats;
    uint64_t pager_tag;   /* next pager request id: pid << 32 | counter */
    uint64_t pager_timeout_ns;
    enum gw_kernels kernels; /* --kernels, else configure's kernels (default ref) */
    const char *kernels_flag; /* --kernels as given (NULL: none) */
    struct moe_scratch *scratch; /* serve.c's per-request working memory (moe_serve_init) */
    uint64_t last_request_ns;    /* when the last request was answered (CLOCK_MONOTONIC) */
};

/* Fills the arena with the RAM-tier blobs of experts.bin unless its header
 * says the same plan is already loaded (a restarted worker).  *loaded_now
 * tells which. */
int moe_arena_load(struct moe_worker *m, bool *loaded_now, char *err, size_t errlen);

/* Sizes the per-request working memory from the moe ring's geometry and the
 * placement (after both are attached/loaded); moe_serve_free releases it. */
int moe_serve_init(struct moe_worker *m, char *err, size_t errlen);
void moe_serve_free(struct moe_worker *m);

/* Waits for one moe request (up to timeout_ns), answers it, releases it.
 * SHM_ETIMEDOUT / SHM_EPEER pass through (nothing was served); any other
 * error is a broken ring: the worker cannot go on. */
int moe_serve_one(struct moe_worker *m, uint64_t timeout_ns, char *err, size_t errlen);

#endif
