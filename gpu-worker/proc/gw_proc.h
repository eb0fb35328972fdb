/* gw_proc.h — the pieces of the nebula-gpu-worker process (main.c: control
 * plane and the `step` server; remote.c: the placement's local map and the
 * remote-expert hook that sends non-local experts over the `moe` ring;
 * ple_pager.c: the PLE table rows from the ssd-pager when the table is on SSD;
 * arena.c: the RAM arena as the backend's host copies of experts). */
#ifndef NB_GW_PROC_H
#define NB_GW_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ctl/worker.h"
#include "core/kvfile/kvfile.h"
#include "core/prepared/prepared.h"

#include <pthread.h>

#include "engine/backend.h"
#include "shm/shm.h"

struct model;

/* The placement (core/prepared read it against experts.idx) as per-block
 * maps for blocks 0 … n_layer+n_nextn-1: *local one byte per (block, expert),
 * 1 where the expert is VRAM-tier; *ssd_blob one uint64 per (block, expert),
 * the layer's blob bytes where it is SSD-tier, else 0; *n_remote the count of
 * non-local pairs.  x NULL: no placement, every expert local. */
int gwp_placement_maps(const struct prepared_idx *x, const struct prepared_placement *p, const struct model *m,
                       uint8_t **local, uint64_t **ssd_blob, int64_t *n_remote, char *err, size_t errlen);

/* Waits (timeout_ns) for the response with this tag on resp, releasing the
 * stale ones before it (answers to requests a previous client gave up on);
 * a dead peer or a timeout is NB_EIO with a message naming peer. */
int gwp_wait_tagged(ring *resp, uint64_t tag, uint64_t timeout_ns, const char *peer, struct ring_slot *s, char *err,
                    size_t errlen);

/* The client end of the `moe` ring pair and what the hook needs. */
struct gwp_moe_client {
    struct ring_pair rp;
    struct ring_geometry g;
    int k;           /* routed experts per row */
    int n_expert;
    int64_t n_embd;  /* C */
    uint64_t next_tag;
    uint64_t timeout_ns; /* for one response */
    int32_t *slot_of;    /* scratch: each pair's routed slot j within its row */
    int *row_fill;       /* scratch: pairs seen so far per row */
    int scratch_rows, scratch_pairs;
    shm_stats *stats;    /* optional, with the block to count in */
    uint32_t stats_block;
    const uint64_t *ssd_blob; /* optional (gwp_placement_maps): counts SHM_STAT_SSD_BLOB_BYTES */
    uint8_t *seen;            /* scratch: n_expert flags */
};

/* Attaches as the client of the ring pair at offset 0 of `reg`. */
int gwp_moe_client_open(struct gwp_moe_client *c, const struct shm_region *reg, const struct model *m, char *err,
                        size_t errlen);
void gwp_moe_client_close(struct gwp_moe_client *c);
/* The gw_moe_remote_fn; ctx is a gwp_moe_client. */
int gwp_moe_remote(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                   const int32_t *experts, const float *weights, float *out, char *err, size_t errlen);

/* arena.c: the `experts` region mapped, and per (block, expert) the RAM-tier
 * blob in it (the placement's arena layout), for gw_backend_set_expert_host. */
struct gwp_arena {
    struct shm_region reg;
    const uint8_t **blob;  /* (n_layer + n_nextn) × E, NULL where not RAM-tier */
    uint64_t *part, *bytes; /* 3 part offsets and the blob bytes per block */
    uint64_t arena_bytes, n_blobs;
    char idx_sha[72];       /* the experts the placement names (the arena header must say the same) */
    bool open, installed, refused;
    int stream_rows;        /* configure's stream_rows: evals of more rows stream (gw_expert_host.min_rows) */
};
/* Maps the region and lays the tables out when the placement has RAM-tier experts (else leaves a closed one). */
int gwp_arena_open(struct gwp_arena *a, const char *inst, const struct prepared_idx *x, const struct prepared_placement *p,
                   const struct model *m, char *err, size_t errlen);
/* Installs the tables into the backend once the cpu-moe-worker has loaded the
 * arena (its header); before that, and for backends that do not stream, nothing. */
int gwp_arena_ready(struct gwp_arena *a, gw_backend *be, char *err, size_t errlen);
void gwp_arena_close(struct gwp_arena *a);

/* spec.c: STEP_SPEC (speculative decoding): the MTP input and the last window's wide rows. */
struct gwp_spec {
    float *wide;     /* the next window's MTP input (n·C) */
    float *win_wide; /* the last window's rows' wide states */
    int64_t win_pos0;
    int win_n;       /* its rows (0: none) */
    bool have_wide;  /* wide holds the input (a STEP_FLAG_WIDE eval, or a keep) */
};
/* The buffer a STEP_FLAG_WIDE eval writes into (NULL: out of memory). */
float *gwp_spec_wide(struct gwp_spec *sp, const struct model *m);
void gwp_spec_reset(struct gwp_spec *sp); /* a reset or a plain eval: no window, no input */
void gwp_spec_free(struct gwp_spec *sp);
int gwp_spec_serve(struct gwp_spec *sp, gw_backend *be, gw_seq *seq, const struct ring_slot *req, struct ring_slot *resp,
                   char *err, size_t errlen);

/* cache.c: the prompt cache's checkpoints (STEP_SAVE, STEP_LOAD, STEP_DROP). */
struct gwp_ckpt;
struct gwp_cache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t writer;
    bool inited, have_writer, stop;
    struct gwp_ckpt *list;
    uint64_t ram_bytes;
    char dir[CTL_PATH_MAX];                /* "": no files */
    char identity[KVFILE_IDENTITY_MAX];
};
int gwp_cache_open(struct gwp_cache *c, const char *dir, const char *identity, char *err, size_t errlen);
void gwp_cache_close(struct gwp_cache *c); /* writes what is queued first */
int gwp_cache_serve(struct gwp_cache *c, gw_seq *seq, const struct ring_slot *req, struct ring_slot *resp, char *err,
                    size_t errlen);

/* ple_pager.c: the PLE rows hook answered by the ssd-pager over `pager-gw`. */
struct gwp_ple_config {
    const char *prepared;               /* the directory with ple.bin */
    const struct shm_region *rings;     /* region "pager-gw", the ring pair at offset 0 */
    const struct shm_region *staging;   /* region "staging" */
    uint64_t slot_bytes;                /* slot s at s · slot_bytes */
    uint32_t first, count;              /* this worker's slots */
};

struct gwp_ple_client {
    struct ring_pair rp;
    struct ring_geometry g;
    struct prepared_ple ple;            /* ple.bin's header, checked against the model's table */
    void (*to_float)(const void *src, float *dst, int64_t n);
    uint8_t *staging;                   /* this worker's first slot */
    uint32_t first;
    uint64_t capacity_rows;             /* rows this worker's slots hold */
    uint64_t next_tag, timeout_ns;
    shm_stats *stats;                   /* optional, with the block to count rows in */
    uint32_t stats_block;
};

/* host: the table gw_ple_host_detach took out of m (a CUDA gpu-worker), else NULL: m's own. */
int gwp_ple_client_open(struct gwp_ple_client *c, const struct gwp_ple_config *cfg, const struct model *m,
                        const struct gw_ple_host *host, char *err, size_t errlen);
void gwp_ple_client_close(struct gwp_ple_client *c);
/* The gw_ple_rows_fn; ctx is a gwp_ple_client. */
int gwp_ple_rows(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen);

#endif
