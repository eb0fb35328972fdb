/* gguf_index.c — small building blocks of the GGUF reader and writer: the
 * value-type table, the tensor size rule, the string arena and the name hash.
 *
 * The tensor size rule lives here once so that the writer refuses exactly
 * what the reader would refuse: a file we write always opens. */
#include "core/gguf/gguf_priv.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/util/err.h"

static const struct {
    const char *name;
    size_t size;
} vtypes[GGUF_VT_COUNT] = {
    [GGUF_VT_UINT8] = {"u8", 1},    [GGUF_VT_INT8] = {"i8", 1},     [GGUF_VT_UINT16] = {"u16", 2},
    [GGUF_VT_INT16] = {"i16", 2},   [GGUF_VT_UINT32] = {"u32", 4},  [GGUF_VT_INT32] = {"i32", 4},
    [GGUF_VT_FLOAT32] = {"f32", 4}, [GGUF_VT_BOOL] = {"bool", 1},   [GGUF_VT_STRING] = {"str", 0},
    [GGUF_VT_ARRAY] = {"arr", 0},   [GGUF_VT_UINT64] = {"u64", 8},  [GGUF_VT_INT64] = {"i64", 8},
    [GGUF_VT_FLOAT64] = {"f64", 8},
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VT_COUNT ? vtypes[t].name : "?";
}

size_t gguf_vtype_size(enum gguf_vtype t)
{
    return (unsigned)t < GGUF_VT_COUNT ? vtypes[t].size : 0;
}

int gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne, uint64_t *nbytes, char *err, size_t errlen)
{
    const struct quant_traits *tr = type < QT_COUNT ? quant_traits_of((enum quant_type)type) : NULL;
    if (!tr) return nb_errf(err, errlen, NB_ENOTSUP, "unknown tensor type %" PRIu32, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return nb_errf(err, errlen, NB_EFORMAT, "n_dims %d not in 1..%d", n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < n_dims; d++)
        if (ne[d] <= 0) return nb_errf(err, errlen, NB_EFORMAT, "ne[%d] = %" PRId64 " is not positive", d, ne[d]);
    if (ne[0] % tr->blck_size)
        return nb_errf(err, errlen, NB_EFORMAT, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64,
                       ne[0], tr->name, tr->blck_size);
    /* Bytes = blocks per row x bytes per block x the other dims; each step
     * checked, so a shape of 2^62 x 2^62 is an error, not a small number. */
    uint64_t bytes = (uint64_t)(ne[0] / tr->blck_size);
    bool overflow = __builtin_mul_overflow(bytes, (uint64_t)tr->type_size, &bytes);
    for (int d = 1; d < n_dims; d++) overflow |= __builtin_mul_overflow(bytes, (uint64_t)ne[d], &bytes);
    if (overflow || bytes > INT64_MAX) return nb_errf(err, errlen, NB_EFORMAT, "byte size overflows 63 bits");
    *nbytes = bytes;
    return 0;
}

/* ---------- arena ---------- */

struct gguf_arena_block {
    struct gguf_arena_block *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char mem[];
};

enum { ARENA_BLOCK_BYTES = 64 * 1024 };

void *gguf_arena_alloc(struct gguf_arena *a, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15; /* keeps pointer arrays aligned */
    struct gguf_arena_block *b = a->head;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > ARENA_BLOCK_BYTES ? bytes : ARENA_BLOCK_BYTES;
        if (cap > SIZE_MAX - sizeof *b) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        /* A big private block goes behind the head so that the head's free
         * space is still used by the small strings that follow. */
        if (a->head && cap > ARENA_BLOCK_BYTES) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->mem + b->used;
    b->used += bytes;
    return p;
}

void gguf_arena_free(struct gguf_arena *a)
{
    for (struct gguf_arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
}

void gguf_arena_take(struct gguf_arena *into, struct gguf_arena *from)
{
    struct gguf_arena_block *last = from->head;
    if (!last) return;
    while (last->next) last = last->next;
    /* Behind into's head, so that its head keeps serving small requests. */
    if (into->head) {
        last->next = into->head->next;
        into->head->next = from->head;
    } else {
        into->head = from->head;
    }
    from->head = NULL;
}

/* ---------- name hash ---------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int64_t gguf_names_find(const struct gguf_names *h, const char *name)
{
    if (!h->cap) return -1;
    for (uint64_t i = name_hash(name) & (h->cap - 1);; i = (i + 1) & (h->cap - 1)) {
        const struct gguf_name_slot *s = &h->slots[i];
        if (!s->name) return -1;
        if (strcmp(s->name, name) == 0) return s->idx;
    }
}

static int names_grow(struct gguf_names *h)
{
    uint64_t cap = h->cap ? h->cap * 2 : 64;
    struct gguf_name_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (uint64_t i = 0; i < h->cap; i++) {
        if (!h->slots[i].name) continue;
        uint64_t j = name_hash(h->slots[i].name) & (cap - 1);
        while (slots[j].name) j = (j + 1) & (cap - 1);
        slots[j] = h->slots[i];
    }
    free(h->slots);
    h->slots = slots;
    h->cap = cap;
    return 0;
}

int64_t gguf_names_insert(struct gguf_names *h, const char *name, int64_t idx)
{
    if ((h->used + 1) * 2 > h->cap && names_grow(h) != 0) return -2; /* load <= 1/2 */
    uint64_t i = name_hash(name) & (h->cap - 1);
    for (; h->slots[i].name; i = (i + 1) & (h->cap - 1))
        if (strcmp(h->slots[i].name, name) == 0) return h->slots[i].idx;
    h->slots[i].name = name;
    h->slots[i].idx = idx;
    h->used++;
    return idx;
}

void gguf_names_free(struct gguf_names *h)
{
    free(h->slots);
    memset(h, 0, sizeof *h);
}
