/* gguf_priv.h — the reader's in-memory index, shared by gguf_read.c (which
 * builds it) and gguf_kv.c (which answers questions about key/values).
 * Private to core/gguf/: nothing outside this folder includes it.
 *
 * The index never copies tensor data or numeric values: numeric key/values
 * point into the mapping (packed little-endian, read with memcpy because
 * GGUF packs them without alignment).  Only strings are copied, into an
 * arena, so that every key and string value is NUL-terminated. */
#ifndef NB_GGUF_PRIV_H
#define NB_GGUF_PRIV_H

#include "core/gguf/gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian values in place; big-endian hosts are not supported"
#endif

/* Bump allocator of fixed-size blocks (a big request gets a block of its
 * own): everything in it lives as long as the handle, so nothing is freed
 * one by one and pointers stay valid while it grows. */
struct gguf_arena_block;
struct gguf_arena {
    struct gguf_arena_block *head;
};

void *gguf_arena_alloc(struct gguf_arena *a, size_t bytes);
void gguf_arena_free(struct gguf_arena *a);
/* Moves every block of `from` into `into` (used when shards are merged). */
void gguf_arena_take(struct gguf_arena *into, struct gguf_arena *from);

/* Open-addressing hash of name -> index, used for keys and tensor names. */
struct gguf_name_slot {
    const char *name; /* NULL: empty slot */
    int64_t idx;
};
struct gguf_names {
    struct gguf_name_slot *slots;
    uint64_t cap; /* power of two, or 0 */
    uint64_t used;
};

/* Index of `name`, or -1. */
int64_t gguf_names_find(const struct gguf_names *h, const char *name);
/* Inserts name -> idx.  Returns idx, or the index already stored under that
 * name (the caller reports the duplicate), or -2 when out of memory. */
int64_t gguf_names_insert(struct gguf_names *h, const char *name, int64_t idx);
void gguf_names_free(struct gguf_names *h);

struct gguf_kv {
    const char *key;
    enum gguf_vtype type;  /* GGUF_VT_ARRAY for arrays */
    enum gguf_vtype elem;  /* element type; equals `type` for scalars */
    uint64_t n;            /* number of elements (1 for a scalar) */
    const void *raw;       /* numeric/bool elements, packed, in the mapping */
    const char *const *strs; /* string elements (arena copies), else NULL */
};

struct gguf_shard {
    void *map;             /* NULL for gguf_open_mem images */
    size_t size;
};

struct gguf_file {
    uint32_t version;
    uint32_t alignment;
    int n_shards;
    struct gguf_shard *shards;

    int64_t n_kv;
    struct gguf_kv *kv;
    struct gguf_names kv_names;

    int64_t n_tensors;
    int64_t tensors_cap;
    struct gguf_tensor *tensors;
    struct gguf_names tensor_names;

    struct gguf_arena arena;
};

#endif
