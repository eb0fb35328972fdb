/* gw_proc.h — the pieces of the nebula-gpu-worker process (main.c: control
 * plane and the `step` server; remote.c: the placement's local map and the
 * remote-expert hook that sends non-local experts over the `moe` ring). */
#ifndef NB_GW_PROC_H
#define NB_GW_PROC_H

#include <stddef.h>
#include <stdint.h>

#include "gpu-worker/backend.h"
#include "shm/shm.h"

struct model;

/* Reads PREPARED/placement.json: *local gets one byte per (block, expert)
 * for blocks 0 … n_layer+n_nextn-1, 1 where the expert is VRAM-tier; *n_remote
 * the count of the others.  A path of NULL means "every expert local". */
int gwp_placement_local(const char *placement_path, const struct model *m, uint8_t **local, int64_t *n_remote,
                        char *err, size_t errlen);

/* The client end of the `moe` ring pair and what the hook needs. */
struct gwp_moe_client {
    struct ring_pair rp;
    struct ring_geometry g;
    int k;           /* routed experts per row */
    int64_t n_embd;  /* C */
    uint64_t next_tag;
    uint64_t timeout_ns; /* for one response */
    int32_t *slot_of;    /* scratch: each pair's routed slot j within its row */
    int *row_fill;       /* scratch: pairs seen so far per row */
    int scratch_rows, scratch_pairs;
    shm_stats *stats;    /* optional, with the block to count in */
    uint32_t stats_block;
};

/* Attaches as the client of the ring pair at offset 0 of `reg`. */
int gwp_moe_client_open(struct gwp_moe_client *c, const struct shm_region *reg, const struct model *m, char *err,
                        size_t errlen);
void gwp_moe_client_close(struct gwp_moe_client *c);
/* The gw_moe_remote_fn; ctx is a gwp_moe_client. */
int gwp_moe_remote(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                   const int32_t *experts, const float *weights, float *out, char *err, size_t errlen);

#endif
