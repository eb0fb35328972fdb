/* backend_impl.h — what a backend implements behind backend.h.
 *
 * A backend is a table of functions plus two base structs that its own
 * structs embed as their first member (so a `gw_seq *` converts to the
 * backend's sequence type by a cast).  backend.c checks arguments once, for
 * every backend, and then calls through the table; a backend may trust them.
 * Private to the engine and its backends (engine/cpu/, gpu-worker/cuda/):
 * no process includes it (docs/ARCHITECTURE.md, the rooms table).  It brings
 * in the three public headers a backend works with — the interface, the
 * device memory plan (struct gw_backend keeps a gw_vram_parts) and the
 * expert FFN's kernels (gw_backend_params.kernels names a gw_kernels). */
#ifndef NB_ENGINE_BACKEND_IMPL_H
#define NB_ENGINE_BACKEND_IMPL_H

#include "core/model/model.h"
#include "engine/backend.h"
#include "engine/ffn.h"
#include "engine/vram.h"

/* GDN's chunked form works in blocks of this many rows from an eval's first
 * (both backends: CPU_GDN_CHUNK; core/model's model_resume_align follows it). */
#define GW_GDN_CHUNK MODEL_GDN_CHUNK

struct gw_seq_parts;

struct gw_backend_ops {
    const char *kind;
    int (*create)(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err, size_t errlen);
    void (*free)(gw_backend *be);
    int (*seq_create)(gw_backend *be, gw_seq **out, char *err, size_t errlen);
    void (*seq_free)(gw_seq *s);
    void (*seq_reset)(gw_seq *s);
    /* 0 < n_keep < pos (backend.c handles the trivial cases); a backend refuses with NB_ENOTSUP
     * what it cannot roll back (recurrent GDN / PLE conv state outside a verify window). */
    int (*seq_truncate)(gw_seq *s, int64_t n_keep, char *err, size_t errlen);
    int (*seq_copy)(gw_seq *dst, const gw_seq *src, char *err, size_t errlen);
    /* Must advance s->n_pos by n_tokens on success. */
    int (*eval)(gw_seq *s, const struct gw_eval_args *a, char *err, size_t errlen);
    int (*mtp_eval)(gw_seq *s, const struct gw_mtp_args *a, char *err, size_t errlen);
    /* gw_backend_set_expert_host (h checked, or NULL); NULL: the backend does not stream experts */
    int (*set_expert_host)(gw_backend *be, const struct gw_expert_host *h, char *err, size_t errlen);
    /* eval fills gw_eval_args.argmax itself (and takes logits NULL); false:
     * backend.c computes it from the logits. */
    bool argmax;
    /* gw_seq_save / gw_seq_load (engine/seq_state.c writes the format): the
     * sequence's arrays.  With load, first make room for n_pos positions and
     * mtp_n MTP entries (the state's contents then undefined, s->n_pos 0,
     * the last verify window forgotten); the caller then fills the arrays
     * and sets the counts. */
    int (*seq_parts)(gw_seq *s, bool load, int64_t n_pos, int64_t mtp_n, struct gw_seq_parts *p, char *err, size_t errlen);
    /* bytes between host memory and a sequence's array (to_dev: host → array) */
    int (*state_copy)(gw_backend *be, void *dst, const void *src, uint64_t bytes, bool to_dev, char *err, size_t errlen);
};

/* A sequence's arrays, where the backend keeps them (device or host; NULL:
 * the layer has none).  layers[i] for i < n_layer + n_nextn; the MTP block's
 * K/V at n_layer.  tokens and mtp_pos are host memory. */
struct gw_seq_layer {
    float *conv, *ssm, *ple_conv, *k, *v, *idx_k, *blk_k;
    int64_t *n_blk;
};
struct gw_seq_parts {
    int32_t *tokens;
    int64_t *mtp_pos, *mtp_n;
    bool *broken;
    struct gw_seq_layer *layers; /* the caller's array */
};

struct gw_backend {
    const struct gw_backend_ops *ops;
    const struct model *model;
    struct gw_moe_remote remote; /* remote.fn NULL: every expert is local */
    struct gw_ple_rows ple_rows; /* ple_rows.fn NULL: the model's table */
    uint64_t experts_computed;   /* see gw_backend_experts_computed; bumped atomically */
    uint64_t experts_skipped;    /* see gw_backend_experts_skipped; bumped atomically */
    uint64_t vram_peak;          /* see gw_backend_vram_bytes; the backend keeps it */
    struct gw_vram_parts vram_used; /* see gw_backend_vram_used; the backend keeps it */
    uint64_t bytes_copied;       /* see gw_backend_bytes_copied; bumped atomically */
    uint64_t graph_replays;      /* see gw_backend_graph_replays; bumped atomically */
    uint64_t rows_evaluated;     /* see gw_backend_rows_evaluated (backend.c) */
    uint64_t rows_replayed;      /* see gw_backend_rows_replayed; the backend bumps it */
    struct gw_slot_stats slot_stats; /* see gw_backend_slot_stats; bumped atomically */
};

/* A backend's slot counters += gw_slot_count's {selections, hits, static hits}. */
static inline void gw_slot_stats_add(struct gw_slot_stats *s, const uint64_t n[3])
{
    __atomic_add_fetch(&s->selections, n[0], __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->hits, n[1], __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->static_hits, n[2], __ATOMIC_RELAXED);
}

struct gw_seq {
    gw_backend *be;
    int64_t n_pos; /* tokens evaluated */
};

/* What seq_truncate keeps of a QSA layer's block keys: the blocks whole below
 * n_keep (layer il's compress_ratio a block), never more than it had. */
static inline int64_t gw_blocks_kept(const struct model *m, int il, int64_t n_blk, int64_t n_keep)
{
    const int cr = m->layers[il].compress_ratio;
    return cr > 0 && n_blk > n_keep / cr ? n_keep / cr : n_blk;
}

/* The first trunk layer that keeps recurrent state (GDN, or the PLE conv), or -1. */
int gw_recurrent_layer(const struct model *m);
/* Whether a truncation of s to n_keep returns into its last verify window,
 * which began at pos0 with `kept` of its rows still kept (0: none): 0, else
 * NB_ENOTSUP with the reason in err (a backend's rollback, ARCHITECTURE.md §5). */
int gw_rollback_check(const gw_seq *s, int64_t n_keep, int64_t pos0, int kept, char *err, size_t errlen);

extern const struct gw_backend_ops gw_cpu_ops;
/* gpu-worker/cuda/backend_cuda.cu; in the table only where nvcc built it (NB_HAVE_CUDA). */
extern const struct gw_backend_ops gw_cuda_ops;
/* backend_cuda.cu: 0 when a cuda backend can run here (msg: the device), else
 * NB_ENOTSUP with the reason (no driver or device, no kernels for its
 * architecture). */
int gw_cuda_probe(char *msg, size_t len);

#endif
