/* gguf_read.c — opens GGUF files (and split sets) into the index of gguf_priv.h.
 *
 * The one idea: every read goes through a cursor that knows how many bytes
 * are really left, and every count read from the file (key/values, tensors,
 * string and array lengths) is checked against those bytes *before* anything
 * is allocated or skipped.  A corrupt file therefore costs at most a few
 * bytes of work per byte of file, and its error names the item being parsed
 * (`kv 3 "general.name"`, `tensor 12 "blk.0.attn_q.weight"`), the field and
 * its file offset.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv;
 * n_kv × (string key, u32 type, value); n_tensors × (string name, u32 n_dims,
 * i64 ne[n_dims], u32 type, u64 offset); padding to the alignment; tensor
 * data, each tensor at data_start + offset.  A string is a u64 length and its
 * bytes (no NUL); an array is u32 element type, u64 count, the elements. */
#include "core/gguf/gguf_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/err.h"
#include "core/util/grow.h"
#include "core/util/mapfile.h"

/* Smallest encodings, used to bound counts by the bytes left: a key/value is
 * a key length, one key byte, a type and a one-byte value; a tensor entry is a
 * name length, one name byte, n_dims, one dim, type and offset. */
enum { MIN_KV_BYTES = 8 + 1 + 4 + 1, MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8 };

struct cursor {
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos;
    char *err;
    size_t errlen;
    char where[160]; /* the item being parsed, prefixed to every message */
    int64_t element; /* array element being parsed, or -1 */
};

static int fail(struct cursor *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct cursor *c, int code, const char *fmt, ...)
{
    char where[sizeof c->where + 32];
    if (c->element >= 0) snprintf(where, sizeof where, "%s: element %" PRId64, c->where, c->element);
    else snprintf(where, sizeof where, "%s", c->where);
    va_list ap;
    va_start(ap, fmt);
    int rc = nb_verrf_at(c->err, c->errlen, code, where, fmt, ap);
    va_end(ap);
    return rc;
}

static void set_where(struct cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_where(struct cursor *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->where, sizeof c->where, fmt, ap);
    va_end(ap);
}

/* Reads n bytes into dst (or skips them when dst is NULL). */
static int rd(struct cursor *c, void *dst, uint64_t n, const char *field)
{
    if (c->size - c->pos < n)
        return fail(c, NB_EFORMAT, "%s at offset 0x%" PRIx64 " needs %" PRIu64 " bytes but the file ends at 0x%" PRIx64,
                    field, c->pos, n, c->size);
    if (dst) memcpy(dst, c->buf + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(struct cursor *c, uint32_t *v, const char *field) { return rd(c, v, sizeof *v, field); }
static int rd_u64(struct cursor *c, uint64_t *v, const char *field) { return rd(c, v, sizeof *v, field); }

/* A string in place: *s points into the buffer (not NUL-terminated). */
static int rd_str(struct cursor *c, const char **s, uint64_t *len, const char *field)
{
    uint64_t at = c->pos;
    int rc = rd_u64(c, len, field);
    if (rc) return rc;
    if (*len > c->size - c->pos)
        return fail(c, NB_EFORMAT, "%s length %" PRIu64 " at offset 0x%" PRIx64 " runs past end of file (size 0x%" PRIx64 ")",
                    field, *len, at, c->size);
    *s = (const char *)c->buf + c->pos;
    c->pos += *len;
    return 0;
}

static char *arena_strndup(struct gguf_file *g, const char *s, uint64_t len)
{
    char *p = gguf_arena_alloc(&g->arena, (size_t)len + 1);
    if (p) {
        memcpy(p, s, (size_t)len);
        p[len] = 0;
    }
    return p;
}

/* A key or tensor name: a NUL-terminated arena copy; empty names and names
 * with a NUL byte inside are refused (they could not be looked up). */
static int rd_name(struct cursor *c, struct gguf_file *g, const char **out, const char *field)
{
    const char *s;
    uint64_t len, at = c->pos;
    int rc = rd_str(c, &s, &len, field);
    if (rc) return rc;
    if (len == 0 || memchr(s, 0, (size_t)len))
        return fail(c, NB_EFORMAT, "%s at offset 0x%" PRIx64 " is empty or contains a NUL byte", field, at);
    *out = arena_strndup(g, s, len);
    return *out ? 0 : fail(c, NB_ENOMEM, "out of memory copying %s", field);
}

/* A count read from the file, bounded by the bytes left at `min_each` each. */
static int check_count(struct cursor *c, uint64_t n, uint64_t at, uint64_t min_each, const char *field)
{
    if (n > (c->size - c->pos) / min_each)
        return fail(c, NB_EFORMAT,
                    "%s %" PRIu64 " at offset 0x%" PRIx64 " is impossible: at least %" PRIu64
                    " bytes each, only %" PRIu64 " bytes left in the file",
                    field, n, at, min_each, c->size - c->pos);
    return 0;
}

/* ---------- key/values ---------- */

static int rd_string_values(struct cursor *c, struct gguf_file *g, struct gguf_kv *kv)
{
    const char **strs = gguf_arena_alloc(&g->arena, (size_t)kv->n * sizeof *strs);
    if (!strs && kv->n) return fail(c, NB_ENOMEM, "out of memory for %" PRIu64 " strings", kv->n);
    bool is_array = kv->type == GGUF_VT_ARRAY;
    for (uint64_t j = 0; j < kv->n; j++) {
        const char *s;
        uint64_t len;
        /* The element number is formatted only if there is an error: a
         * vocabulary has a quarter of a million of them. */
        c->element = is_array ? (int64_t)j : -1;
        int rc = rd_str(c, &s, &len, "string value");
        if (rc) return rc;
        if (!(strs[j] = arena_strndup(g, s, len))) return fail(c, NB_ENOMEM, "out of memory copying a string");
    }
    c->element = -1;
    kv->strs = strs;
    return 0;
}

static int rd_value(struct cursor *c, struct gguf_file *g, struct gguf_kv *kv)
{
    uint64_t at = c->pos;
    uint32_t t;
    int rc = rd_u32(c, &t, "value type");
    if (rc) return rc;
    kv->type = kv->elem = (enum gguf_vtype)t;
    kv->n = 1;
    if (t == GGUF_VT_ARRAY) {
        at = c->pos;
        if ((rc = rd_u32(c, &t, "array element type"))) return rc;
        if (t == GGUF_VT_ARRAY)
            return fail(c, NB_ENOTSUP, "nested array (element type arr at offset 0x%" PRIx64 ") is not supported", at);
        kv->elem = (enum gguf_vtype)t;
        uint64_t len_at = c->pos;
        if ((rc = rd_u64(c, &kv->n, "array length"))) return rc;
        size_t es = gguf_vtype_size(kv->elem);
        if (t < GGUF_VT_COUNT && (rc = check_count(c, kv->n, len_at, es ? es : 8, "array length"))) return rc;
    }
    if (t >= GGUF_VT_COUNT)
        return fail(c, NB_EFORMAT, "value type %" PRIu32 " at offset 0x%" PRIx64 " is not a GGUF type (0..%d)", t, at,
                    GGUF_VT_COUNT - 1);
    if (kv->elem == GGUF_VT_STRING) return rd_string_values(c, g, kv);
    uint64_t bytes = kv->n * gguf_vtype_size(kv->elem); /* bounded by check_count */
    kv->raw = c->buf + c->pos;
    return rd(c, NULL, bytes, kv->type == GGUF_VT_ARRAY ? "array data" : "value");
}

static int rd_kvs(struct cursor *c, struct gguf_file *g, uint64_t n_kv)
{
    int64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        set_where(c, "kv %" PRIu64, i);
        if (nb_grow((void **)&g->kv, &cap, g->n_kv, sizeof *g->kv, 16)) return fail(c, NB_ENOMEM, "out of memory");
        struct gguf_kv *kv = &g->kv[g->n_kv];
        memset(kv, 0, sizeof *kv);
        uint64_t at = c->pos;
        int rc = rd_name(c, g, &kv->key, "key");
        if (rc) return rc;
        set_where(c, "kv %" PRIu64 " \"%.100s\"", i, kv->key);
        int64_t prev = gguf_names_insert(&g->kv_names, kv->key, g->n_kv);
        if (prev == -2) return fail(c, NB_ENOMEM, "out of memory");
        if (prev != g->n_kv)
            return fail(c, NB_EFORMAT, "key at offset 0x%" PRIx64 " duplicates kv %" PRId64, at, prev);
        if ((rc = rd_value(c, g, kv))) return rc;
        g->n_kv++;
    }
    return 0;
}

static int rd_alignment(struct cursor *c, struct gguf_file *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_find_key(g, "general.alignment") < 0) return 0;
    set_where(c, "kv \"general.alignment\"");
    char why[200];
    uint32_t a;
    if (gguf_get_u32(g, "general.alignment", &a, why, sizeof why)) return fail(c, NB_EFORMAT, "%s", why);
    if (a == 0 || (a & (a - 1))) return fail(c, NB_EFORMAT, "alignment %" PRIu32 " is not a power of two", a);
    g->alignment = a;
    return 0;
}

/* One tensor-table entry; `data` is filled in later, once data_start is known. */
static int rd_tensor(struct cursor *c, struct gguf_file *g, uint64_t i, struct gguf_tensor *t)
{
    memset(t, 0, sizeof *t);
    uint64_t at = c->pos;
    int rc = rd_name(c, g, &t->name, "name");
    if (rc) return rc;
    set_where(c, "tensor %" PRIu64 " \"%.100s\"", i, t->name);
    int64_t prev = gguf_names_insert(&g->tensor_names, t->name, (int64_t)i);
    if (prev == -2) return fail(c, NB_ENOMEM, "out of memory");
    if (prev != (int64_t)i)
        return fail(c, NB_EFORMAT, "name at offset 0x%" PRIx64 " duplicates tensor %" PRId64, at, prev);

    uint32_t n_dims;
    at = c->pos;
    if ((rc = rd_u32(c, &n_dims, "n_dims"))) return rc;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return fail(c, NB_EFORMAT, "n_dims %" PRIu32 " at offset 0x%" PRIx64 " is not in 1..%d", n_dims, at, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t shape_at = c->pos;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    if ((rc = rd(c, t->ne, 8 * (uint64_t)n_dims, "shape"))) return rc;
    if ((rc = rd_u32(c, &t->type, "type"))) return rc;
    char why[160];
    if ((rc = gguf_tensor_nbytes(t->type, t->n_dims, t->ne, &t->nbytes, why, sizeof why)))
        return fail(c, rc, "%s (shape at offset 0x%" PRIx64 ", type at 0x%" PRIx64 ")", why, shape_at, c->pos - 4);
    at = c->pos;
    if ((rc = rd_u64(c, &t->offset, "data offset"))) return rc;
    if (t->offset % g->alignment)
        return fail(c, NB_EFORMAT, "data offset 0x%" PRIx64 " (at offset 0x%" PRIx64 ") is not a multiple of the alignment %" PRIu32,
                    t->offset, at, g->alignment);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Every tensor's bytes must lie in the data section and no two may share a
 * byte: a writer bug that overlaps tensors would otherwise go unnoticed until
 * a model produced garbage. */
static int check_data(struct cursor *c, struct gguf_file *g, uint64_t data_start)
{
    uint64_t data_bytes = c->size - data_start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset) {
            uint64_t abs;
            if (__builtin_add_overflow(data_start, t->offset, &abs)) abs = UINT64_MAX;
            set_where(c, "tensor %" PRId64 " \"%.100s\"", i, t->name);
            return fail(c, NB_EFORMAT, "data [offset 0x%" PRIx64 ", %" PRIu64 " bytes] runs past end of file (size 0x%" PRIx64 ")",
                        abs, t->nbytes, c->size);
        }
        t->data = c->buf + data_start + t->offset;
    }
    if (g->n_tensors < 2) return 0;
    const struct gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return fail(c, NB_ENOMEM, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    int rc = 0;
    for (int64_t i = 1; i < g->n_tensors && !rc; i++) {
        const struct gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->nbytes > b->offset) {
            set_where(c, "tensor \"%.100s\"", b->name);
            rc = fail(c, NB_EFORMAT, "data [+0x%" PRIx64 ", %" PRIu64 " bytes] overlaps tensor \"%.100s\" [+0x%" PRIx64 ", %" PRIu64 " bytes]",
                      b->offset, b->nbytes, a->name, a->offset, a->nbytes);
        }
    }
    free(order);
    return rc;
}

static int rd_header(struct cursor *c, struct gguf_file *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    set_where(c, "header");
    char magic[4];
    int rc = rd(c, magic, 4, "magic");
    if (rc) return rc;
    if (memcmp(magic, "GGUF", 4))
        return fail(c, NB_EFORMAT, "bad magic %02x %02x %02x %02x at offset 0 (expected \"GGUF\")", (uint8_t)magic[0],
                    (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    if ((rc = rd_u32(c, &g->version, "version"))) return rc;
    /* A big-endian v2/v3 file reads as 0x02000000 / 0x03000000 here. */
    if (g->version && (g->version & 0xffff) == 0)
        return fail(c, NB_ENOTSUP, "version field at offset 0x4 reads 0x%08" PRIx32 ": a big-endian GGUF, not supported", g->version);
    if (g->version == 1)
        return fail(c, NB_ENOTSUP, "GGUF version 1 (offset 0x4) is not supported: it is obsolete, reconvert the model");
    if (g->version < 2 || g->version > 3)
        return fail(c, NB_ENOTSUP, "version %" PRIu32 " at offset 0x4 is not supported (2 or 3)", g->version);
    uint64_t at = c->pos;
    if ((rc = rd_u64(c, n_tensors, "n_tensors"))) return rc;
    if ((rc = rd_u64(c, n_kv, "n_kv"))) return rc;
    if ((rc = check_count(c, *n_kv, at + 8, MIN_KV_BYTES, "n_kv"))) return rc;
    return check_count(c, *n_tensors, at, MIN_TENSOR_BYTES, "n_tensors");
}

/* Parses one image into g (one shard, numbered 0). */
static int parse_image(struct gguf_file *g, const uint8_t *buf, uint64_t size, char *err, size_t errlen)
{
    struct cursor c = {.buf = buf, .size = size, .err = err, .errlen = errlen, .element = -1};
    uint64_t n_tensors, n_kv;
    int rc = rd_header(&c, g, &n_tensors, &n_kv);
    if (!rc) rc = rd_kvs(&c, g, n_kv);
    if (!rc) rc = rd_alignment(&c, g);
    for (uint64_t i = 0; !rc && i < n_tensors; i++) {
        set_where(&c, "tensor %" PRIu64, i);
        if (nb_grow((void **)&g->tensors, &g->tensors_cap, g->n_tensors, sizeof *g->tensors, 16))
            return fail(&c, NB_ENOMEM, "out of memory");
        if (!(rc = rd_tensor(&c, g, i, &g->tensors[i]))) g->n_tensors++;
    }
    if (rc) return rc;
    uint64_t data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors && data_start > size) {
        set_where(&c, "tensor data");
        return fail(&c, NB_EFORMAT, "data section starts at offset 0x%" PRIx64 " (after the tensor table, aligned to %" PRIu32
                    "), past end of file (size 0x%" PRIx64 ")", data_start, g->alignment, size);
    }
    return n_tensors ? check_data(&c, g, data_start) : 0;
}

/* ---------- handles ---------- */

void gguf_close(gguf_file *g)
{
    if (!g) return;
    for (int s = 0; s < g->n_shards; s++)
        if (g->shards[s].map) munmap(g->shards[s].map, g->shards[s].size);
    free(g->shards);
    free(g->kv);
    free(g->tensors);
    gguf_names_free(&g->kv_names);
    gguf_names_free(&g->tensor_names);
    gguf_arena_free(&g->arena);
    free(g);
}

static gguf_file *new_handle(void *map, size_t size)
{
    gguf_file *g = calloc(1, sizeof *g);
    if (!g || !(g->shards = calloc(1, sizeof *g->shards))) {
        free(g);
        return NULL;
    }
    g->n_shards = 1;
    g->shards[0] = (struct gguf_shard){map, size};
    return g;
}

int gguf_open_mem(const void *buf, size_t len, gguf_file **out, char *err, size_t errlen)
{
    *out = NULL;
    gguf_file *g = new_handle(NULL, len);
    if (!g) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    int rc = parse_image(g, buf, len, err, errlen);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* Maps and parses one file; messages are prefixed with its path. */
static int open_one(const char *path, gguf_file **out, char *err, size_t errlen)
{
    *out = NULL;
    void *map;
    size_t size;
    int rc = nb_map_file(path, 1, NB_EIO, "empty file", &map, &size, err, errlen);
    if (rc) return rc;
    gguf_file *g = new_handle(map, size);
    if (!g) {
        munmap(map, size);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    char why[512];
    rc = parse_image(g, map, (uint64_t)size, why, sizeof why);
    if (rc) {
        gguf_close(g);
        return nb_errf(err, errlen, rc, "%s: %s", path, why);
    }
    *out = g;
    return 0;
}

/* ---------- split sets ---------- */

/* Recognises "PREFIX-NNNNN-of-MMMMM.gguf" (gguf-split's naming, 1-based). */
static bool split_name(const char *path, size_t *prefix_len, int *count)
{
    static const char shape[] = "-#####-of-#####.gguf";
    size_t n = strlen(path), tail = sizeof shape - 1;
    if (n <= tail) return false;
    const char *p = path + n - tail;
    for (size_t i = 0; i < tail; i++)
        if (shape[i] == '#' ? (p[i] < '0' || p[i] > '9') : p[i] != shape[i]) return false;
    int no = atoi(p + 1);
    *count = atoi(p + 10);
    *prefix_len = n - tail;
    return no >= 1 && no <= *count;
}

/* A split key that must be there (unless the set has one file) and hold
 * `expect`; `source` says where the expected value comes from. */
static int check_split_key(gguf_file *g, const char *key, uint64_t expect, const char *source, int count,
                           const char *path, char *err, size_t errlen)
{
    char why[256];
    uint64_t v;
    int rc = gguf_get_u64(g, key, &v, why, sizeof why);
    if (rc == NB_ENOENT && count == 1) return 0;
    if (rc) return nb_errf(err, errlen, rc, "%s: split model: %s", path, why);
    if (v != expect)
        return nb_errf(err, errlen, NB_EFORMAT, "%s: split model: %s is %" PRIu64 ", expected %" PRIu64 " (%s)", path,
                       key, v, expect, source);
    return 0;
}

/* Moves shard `s` (a single-image handle) into `first`; always consumes g. */
static int merge_shard(gguf_file *first, gguf_file *g, int s, char *err, size_t errlen)
{
    int rc = 0;
    struct gguf_shard *shards = realloc(first->shards, (size_t)(s + 1) * sizeof *shards);
    int64_t need = first->n_tensors + g->n_tensors;
    struct gguf_tensor *tensors = shards ? realloc(first->tensors, (size_t)need * sizeof *tensors) : NULL;
    if (shards) first->shards = shards;
    if (tensors) first->tensors = tensors, first->tensors_cap = need;
    if (!shards || (!tensors && need)) {
        gguf_close(g);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    first->shards[first->n_shards++] = g->shards[0];
    g->shards[0].map = NULL;
    gguf_arena_take(&first->arena, &g->arena); /* tensor names live there */
    for (int64_t i = 0; i < g->n_tensors && !rc; i++) {
        struct gguf_tensor t = g->tensors[i];
        t.shard = s;
        int64_t prev = gguf_names_insert(&first->tensor_names, t.name, first->n_tensors);
        if (prev == -2) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        else if (prev != first->n_tensors)
            rc = nb_errf(err, errlen, NB_EFORMAT, "split model: tensor \"%.100s\" is in shard %d and shard %d",
                         t.name, first->tensors[prev].shard + 1, s + 1);
        else first->tensors[first->n_tensors++] = t;
    }
    gguf_close(g);
    return rc;
}

static int open_split(const char *path, size_t prefix_len, int count, gguf_file **out, char *err, size_t errlen)
{
    size_t plen = prefix_len + 32;
    char *shard_path = malloc(plen);
    if (!shard_path) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    gguf_file *first = NULL;
    int rc = 0;
    for (int s = 0; s < count && !rc; s++) {
        snprintf(shard_path, plen, "%.*s-%05d-of-%05d.gguf", (int)prefix_len, path, s + 1, count);
        gguf_file *g;
        rc = open_one(shard_path, &g, err, errlen);
        if (rc == NB_ENOENT)
            rc = nb_errf(err, errlen, rc, "split model: shard %d of %d is missing: %s", s + 1, count, shard_path);
        if (!rc) rc = check_split_key(g, "split.count", (uint64_t)count, "the file names", count, shard_path, err, errlen);
        if (!rc) rc = check_split_key(g, "split.no", (uint64_t)s, "0-based position in the set", count, shard_path, err, errlen);
        if (!first) first = g; /* shard 1 holds the set (closed below on error) */
        else if (rc) gguf_close(g);
        else rc = merge_shard(first, g, s, err, errlen);
    }
    snprintf(shard_path, plen, "%.*s-%05d-of-%05d.gguf", (int)prefix_len, path, 1, count);
    if (!rc)
        rc = check_split_key(first, "split.tensors.count", (uint64_t)first->n_tensors, "tensors found in the shards", count,
                             shard_path, err, errlen);
    free(shard_path);
    if (rc) {
        gguf_close(first);
        return rc;
    }
    *out = first;
    return 0;
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t prefix_len;
    int count;
    if (split_name(path, &prefix_len, &count)) return open_split(path, prefix_len, count, out, err, errlen);
    gguf_file *g;
    int rc = open_one(path, &g, err, errlen);
    if (rc) return rc;
    uint64_t n;
    if (gguf_get_u64(g, "split.count", &n, NULL, 0) == 0 && n > 1) {
        gguf_close(g);
        return nb_errf(err, errlen, NB_EINVAL,
                       "%s: shard of a %" PRIu64 "-file split model, but its name does not end in -NNNNN-of-MMMMM.gguf",
                       path, n);
    }
    *out = g;
    return 0;
}

/* ---------- accessors ---------- */

uint32_t gguf_version(const gguf_file *g) { return g->version; }
uint32_t gguf_alignment(const gguf_file *g) { return g->alignment; }
int gguf_shard_count(const gguf_file *g) { return g->n_shards; }
int64_t gguf_tensor_count(const gguf_file *g) { return g->n_tensors; }

const struct gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    int64_t i = gguf_names_find(&g->tensor_names, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}
