/* prepared.h — readers of the prepared directory for the worker processes:
 * experts.idx (where each expert's blob is in experts.bin), placement.json
 * (each expert's one tier) and ple.bin's header page (docs/FILES.md has the
 * layouts; nebula-prepare writes them).
 *
 * The key idea: everything a worker needs to find an expert's bytes is
 * resolved once at start into flat arrays indexed by (idx layer, expert), so
 * the serving loops never parse anything.  Layers are numbered in experts.idx
 * order ("idx layer"); prepared_idx_layer_of_block() maps a GGUF block index
 * (what ring messages carry) to it.  Errors are values: 0 or NB_E*, with a
 * one-line message in err. */
#ifndef NB_PREPARED_H
#define NB_PREPARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREPARED_PAGE 4096u

enum { PREPARED_GATE = 0, PREPARED_UP = 1, PREPARED_DOWN = 2 };

struct prepared_part {
    uint32_t type;      /* ggml type number (= enum quant_type) */
    uint32_t row_len;   /* values per row */
    uint32_t n_rows;
    uint32_t row_bytes;
    uint64_t offset;    /* inside the blob */
};

struct prepared_layer {
    uint32_t block;       /* GGUF block index */
    bool mtp;
    uint32_t n_expert;
    uint64_t offset;      /* of expert 0's blob in experts.bin */
    uint64_t blob_bytes;  /* multiple of PREPARED_PAGE */
    uint64_t payload_bytes;
    struct prepared_part part[3];
};

struct prepared_idx {
    int n_layers;
    struct prepared_layer *layers;
    uint64_t file_bytes;  /* of experts.bin */
    uint64_t max_blob_bytes;
};

/* DIR/experts.idx, validated (magic, version, sizes, blob offsets inside the file). */
int prepared_idx_load(const char *dir, struct prepared_idx *x, char *err, size_t errlen);
void prepared_idx_free(struct prepared_idx *x);
/* The idx layer of GGUF block `block`, or -1. */
int prepared_idx_layer_of_block(const struct prepared_idx *x, uint32_t block);
/* Byte offset of expert e's blob of idx layer i in experts.bin. */
static inline uint64_t prepared_blob_offset(const struct prepared_idx *x, int i, uint32_t e)
{
    return x->layers[i].offset + (uint64_t)e * x->layers[i].blob_bytes;
}

enum prepared_tier { PREPARED_VRAM = 0, PREPARED_RAM = 1, PREPARED_SSD = 2 };

/* placement.json resolved against an idx: tier[i][e] for idx layer i. */
struct prepared_placement {
    int n_layers;
    uint8_t **tier;       /* [n_layers][n_expert of the layer] */
    uint64_t *arena_off;  /* [n_layers][max n_expert]: RAM-tier blob offset in the arena, UINT64_MAX otherwise */
    uint32_t stride;      /* max n_expert (row length of arena_off) */
    uint64_t arena_bytes; /* PREPARED_PAGE header + Σ RAM-tier blob bytes */
    uint64_t n_ram, n_ssd, n_vram;
    uint64_t n_arena;     /* blobs in the arena: the RAM tier's, and the VRAM tier's with arena_vram */
    uint64_t tier_bytes[3]; /* Σ blob bytes per tier (PREPARED_VRAM, _RAM, _SSD) */
    char idx_sha[72];     /* model.experts_index_sha256 of the plan */
    /* What nebula-prepare was asked for ("request"; absent keys: 0/false). */
    bool ple_ssd;         /* request.ple_tier "ssd": the n-gram table is paged from SSD */
    bool ple_vram;        /* request.ple_tier "vram": a CUDA gpu-worker holds the table on the device
                           * ("ram", the default: in host memory, its rows read there: gw_ple_host) */
    uint64_t vram_budget; /* request.vram_budget in bytes (0: "all" or not recorded) */
    int64_t vram_ctx;     /* request.vram_ctx: positions the VRAM plan reserved K/V for (0: not recorded) */
    bool arena_vram;      /* request.arena_vram: the arena holds the VRAM tier's blobs too (adaptive slots) */
};

/* Reads `path` (normally DIR/placement.json) and checks it against the idx:
 * same layers (block, E), each layer's vram/ram/ssd lists a partition of
 * 0 … E−1.  Also lays out the RAM arena (prepared_arena_*) and reads the
 * request.  The one reader of placement.json: every process calls it. */
int prepared_placement_load(const char *path, const struct prepared_idx *x, struct prepared_placement *p, char *err,
                            size_t errlen);
void prepared_placement_free(struct prepared_placement *p);
/* The VRAM tier as a map of n_blocks × E bytes (1: in VRAM), gw_moe_remote's
 * `local` layout, into map (zeroed first); an idx layer whose block or
 * expert count is not the model's is NB_EFORMAT.  Returns the experts in VRAM
 * through *n_vram (may be NULL). */
int prepared_vram_map(const struct prepared_idx *x, const struct prepared_placement *p, int n_blocks, int E, uint8_t *map,
                      int64_t *n_vram, char *err, size_t errlen);
/* DIR/experts.idx, then `path` (NULL or "": DIR/placement.json) against it. */
int prepared_plan_load(const char *dir, const char *path, struct prepared_idx *x, struct prepared_placement *p,
                       char *err, size_t errlen);

/* The RAM arena (the `experts` region): a header page, then the RAM-tier
 * blobs, idx layer by idx layer, experts in ascending id.  Anyone who knows
 * the placement computes the same layout; the coordinator sizes the region
 * with arena_bytes. */
#define PREPARED_ARENA_MAGIC 0x414e5241424e /* "NBARNA" */
struct prepared_arena_header {
    uint64_t magic;
    uint32_t version;     /* 1 */
    uint32_t loaded;      /* 1 once every blob is in (stored last, release) */
    uint64_t arena_bytes;
    uint64_t n_blobs;
    char experts_idx_sha[72]; /* identity of what was loaded: placement's experts_index_sha256 */
};

/* ple.bin's header page. */
struct prepared_ple {
    uint32_t type, row_len;
    uint64_t rows, row_bytes;
    uint32_t rows_per_page, pages_per_row;
    uint64_t data_offset, pages, file_bytes;
};
/* NB_ENOENT when DIR has no ple.bin (a model without an n-gram table). */
int prepared_ple_load(const char *dir, struct prepared_ple *p, char *err, size_t errlen);
/* Where row r lies: the page to read (file offset) and the row's offset in it. */
static inline void prepared_ple_row(const struct prepared_ple *p, uint64_t r, uint64_t *page_off, uint32_t *in_page)
{
    if (p->rows_per_page) {
        *page_off = p->data_offset + r / p->rows_per_page * PREPARED_PAGE;
        *in_page = (uint32_t)(r % p->rows_per_page * p->row_bytes);
    } else {
        *page_off = p->data_offset + r * p->pages_per_row * PREPARED_PAGE;
        *in_page = 0;
    }
}

#endif
