/* safetensors.c — opens Hugging Face safetensors checkpoints (one file, or a
 * directory of shards named by model.safetensors.index.json) as one sorted
 * set of named tensors.
 *
 * A shard is: u64 little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}), then the data; offsets are relative to the
 * end of the header.  The key idea: nothing in the JSON is trusted.  The
 * header length is bounded before cJSON sees it, and a tensor is accepted
 * only when its offsets lie inside the data and span exactly
 * numel × dtype size (computed without overflow), so that every later read
 * through st_tensor.data is in bounds. */
#include "core/safetensors/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/quant/quant.h"
#include "core/util/err.h"
#include "core/util/grow.h"
#include "core/util/mapfile.h"

#define ST_MAX_HEADER_BYTES (100u * 1000 * 1000) /* the reference implementation's limit */
#define ST_MAX_INDEX_BYTES (100u * 1000 * 1000)
#define JSON_MAX_EXACT_INT 9007199254740992.0 /* 2^53: cJSON keeps numbers as doubles */

struct st_entry {
    struct st_tensor t; /* first, so st_at can hand out &entry->t */
    int shard;
};

struct st_shard {
    void *map; /* NULL for st_open_mem */
    size_t size;
    char *label; /* file path, for messages */
};

struct st_meta {
    char *key, *value;
};

struct st_set {
    struct st_shard *shards;
    int n_shards;
    struct st_entry *tensors;
    int64_t n_tensors, tensors_cap;
    struct st_meta *meta;
    int64_t n_meta;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};

size_t st_dtype_size(enum st_dtype d) { return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].size : 0; }
const char *st_dtype_name(enum st_dtype d) { return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].name : "?"; }

int64_t st_numel(const struct st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d]; /* cannot overflow: checked at load */
    return n;
}

void st_close(st_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) {
        if (s->shards[i].map) munmap(s->shards[i].map, s->shards[i].size);
        free(s->shards[i].label);
    }
    for (int64_t i = 0; i < s->n_tensors; i++) free((char *)s->tensors[i].t.name);
    for (int64_t i = 0; i < s->n_meta; i++) free(s->meta[i].key), free(s->meta[i].value);
    free(s->shards);
    free(s->tensors);
    free(s->meta);
    free(s);
}

/* ---------- one shard's header ---------- */

/* Parsing context of one shard: its bytes, its label, the error buffer. */
struct shard_ctx {
    st_set *set;
    int shard;
    const uint8_t *data; /* start of the data section */
    uint64_t data_bytes;
    char *err;
    size_t errlen;
};

static int shard_fail(struct shard_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int shard_fail(struct shard_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = nb_verrf_at(c->err, c->errlen, code, c->set->shards[c->shard].label, fmt, ap);
    va_end(ap);
    return rc;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static bool json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= JSON_MAX_EXACT_INT) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static int parse_dtype(struct shard_ctx *c, const char *name, const cJSON *v, enum st_dtype *out)
{
    if (!cJSON_IsString(v)) return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": \"dtype\" missing or not a string", name);
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (strcmp(v->valuestring, dtypes[d].name) == 0) {
            *out = (enum st_dtype)d;
            return 0;
        }
    return shard_fail(c, NB_ENOTSUP, "tensor \"%.100s\": dtype \"%.20s\" is not supported", name, v->valuestring);
}

/* Shape and byte size; numel and bytes are checked for overflow. */
static int parse_shape(struct shard_ctx *c, const char *name, const cJSON *v, struct st_tensor *t)
{
    if (!cJSON_IsArray(v)) return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": \"shape\" missing or not an array", name);
    int n = cJSON_GetArraySize(v);
    if (n > ST_MAX_DIMS) return shard_fail(c, NB_ENOTSUP, "tensor \"%.100s\": %d dims, at most %d", name, n, ST_MAX_DIMS);
    uint64_t numel = 1, dim;
    bool overflow = false;
    const cJSON *e;
    t->n_dims = 0;
    cJSON_ArrayForEach(e, v)
    {
        if (!json_uint(e, &dim))
            return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": shape[%d] is not a whole number >= 0", name, t->n_dims);
        t->shape[t->n_dims++] = (int64_t)dim;
        overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    overflow |= __builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &t->nbytes);
    if (overflow || t->nbytes > INT64_MAX)
        return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": element count x dtype size overflows", name);
    return 0;
}

static int parse_offsets(struct shard_ctx *c, const char *name, const cJSON *v, struct st_tensor *t)
{
    uint64_t begin, end;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !json_uint(cJSON_GetArrayItem(v, 0), &begin) ||
        !json_uint(cJSON_GetArrayItem(v, 1), &end))
        return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": \"data_offsets\" is not two whole numbers", name);
    if (begin > end || end > c->data_bytes)
        return shard_fail(c, NB_EFORMAT,
                          "tensor \"%.100s\": data_offsets [%" PRIu64 ", %" PRIu64 "] outside the data (%" PRIu64 " bytes)",
                          name, begin, end, c->data_bytes);
    if (end - begin != t->nbytes)
        return shard_fail(c, NB_EFORMAT,
                          "tensor \"%.100s\": data_offsets span %" PRIu64 " bytes but %s x shape needs %" PRIu64, name,
                          end - begin, st_dtype_name(t->dtype), t->nbytes);
    t->data = c->data + begin;
    return 0;
}

static int add_tensor(struct shard_ctx *c, const cJSON *item)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item)) return shard_fail(c, NB_EFORMAT, "tensor \"%.100s\": not a JSON object", name);
    struct st_tensor t = {0};
    int rc = parse_dtype(c, name, cJSON_GetObjectItemCaseSensitive(item, "dtype"), &t.dtype);
    if (!rc) rc = parse_shape(c, name, cJSON_GetObjectItemCaseSensitive(item, "shape"), &t);
    if (!rc) rc = parse_offsets(c, name, cJSON_GetObjectItemCaseSensitive(item, "data_offsets"), &t);
    if (rc) return rc;
    st_set *s = c->set;
    if (nb_grow((void **)&s->tensors, &s->tensors_cap, s->n_tensors, sizeof *s->tensors, 64))
        return shard_fail(c, NB_ENOMEM, "out of memory");
    if (!(t.name = strdup(name))) return shard_fail(c, NB_ENOMEM, "out of memory");
    s->tensors[s->n_tensors++] = (struct st_entry){t, c->shard};
    return 0;
}

/* "__metadata__": string values only (the format says so); the first shard
 * that sets a key wins. */
static int add_metadata(struct shard_ctx *c, const cJSON *obj)
{
    if (!cJSON_IsObject(obj)) return shard_fail(c, NB_EFORMAT, "\"__metadata__\" is not a JSON object");
    const cJSON *e;
    cJSON_ArrayForEach(e, obj)
    {
        if (!cJSON_IsString(e)) return shard_fail(c, NB_EFORMAT, "__metadata__ \"%.100s\" is not a string", e->string);
        if (st_metadata(c->set, e->string)) continue;
        struct st_meta *m = realloc(c->set->meta, (size_t)(c->set->n_meta + 1) * sizeof *m);
        if (!m) return shard_fail(c, NB_ENOMEM, "out of memory");
        c->set->meta = m;
        m = &m[c->set->n_meta];
        m->key = strdup(e->string);
        m->value = strdup(e->valuestring);
        if (!m->key || !m->value) {
            free(m->key), free(m->value);
            return shard_fail(c, NB_ENOMEM, "out of memory");
        }
        c->set->n_meta++;
    }
    return 0;
}

/* Parses shard `shard` of s (its bytes already recorded in s->shards). */
static int parse_shard(st_set *s, int shard, const uint8_t *buf, uint64_t size, char *err, size_t errlen)
{
    struct shard_ctx c = {.set = s, .shard = shard, .err = err, .errlen = errlen};
    uint64_t header_bytes;
    if (size < 8) return shard_fail(&c, NB_EFORMAT, "header length: file is %" PRIu64 " bytes, needs at least 8", size);
    memcpy(&header_bytes, buf, 8);
    if (header_bytes > ST_MAX_HEADER_BYTES)
        return shard_fail(&c, NB_EFORMAT, "header length %" PRIu64 " exceeds the %u-byte limit", header_bytes,
                          ST_MAX_HEADER_BYTES);
    if (header_bytes > size - 8)
        return shard_fail(&c, NB_EFORMAT, "header length %" PRIu64 " runs past end of file (%" PRIu64 " bytes)",
                          header_bytes, size);
    c.data = buf + 8 + header_bytes;
    c.data_bytes = size - 8 - header_bytes;
    const char *json_text = (const char *)buf + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json_text, (size_t)header_bytes, &end, false);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        long at = end && end >= json_text && end <= json_text + header_bytes ? (long)(end - json_text) : -1;
        return shard_fail(&c, NB_EFORMAT, "JSON header is not a valid object (parse stopped at header byte %ld)", at);
    }
    int rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (rc) break;
        rc = strcmp(item->string, "__metadata__") == 0 ? add_metadata(&c, item) : add_tensor(&c, item);
    }
    cJSON_Delete(root);
    return rc;
}

/* ---------- sets ---------- */

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct st_entry *)a)->t.name, ((const struct st_entry *)b)->t.name);
}

/* Sorts by name (for bsearch) and refuses a name seen twice. */
static int sort_tensors(st_set *s, char *err, size_t errlen)
{
    if (s->n_tensors) qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_entry);
    for (int64_t i = 1; i < s->n_tensors; i++) {
        const struct st_entry *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->t.name, b->t.name)) continue;
        if (a->shard == b->shard)
            return nb_errf(err, errlen, NB_EFORMAT, "%s: tensor \"%.100s\" appears twice", s->shards[a->shard].label,
                           a->t.name);
        return nb_errf(err, errlen, NB_EFORMAT, "tensor \"%.100s\" is in two shards: %s and %s", a->t.name,
                       s->shards[a->shard].label, s->shards[b->shard].label);
    }
    return 0;
}

static st_set *new_set(void) { return calloc(1, sizeof(st_set)); }

/* Records a shard's bytes and label (copied); on failure the caller still
 * owns the mapping. */
static int add_shard(st_set *s, void *map, size_t size, const char *label)
{
    struct st_shard *p = realloc(s->shards, (size_t)(s->n_shards + 1) * sizeof *p);
    if (!p) return NB_ENOMEM;
    s->shards = p;
    p[s->n_shards] = (struct st_shard){map, size, strdup(label)};
    if (!p[s->n_shards].label) return NB_ENOMEM;
    s->n_shards++;
    return 0;
}

int st_open_mem(const void *buf, size_t len, st_set **out, char *err, size_t errlen)
{
    *out = NULL;
    st_set *s = new_set();
    int rc = s ? add_shard(s, NULL, len, "<memory>") : NB_ENOMEM;
    if (rc) {
        st_close(s);
        return nb_errf(err, errlen, rc, "out of memory");
    }
    rc = parse_shard(s, 0, buf, len, err, errlen);
    if (!rc) rc = sort_tensors(s, err, errlen);
    if (rc) {
        st_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Maps one shard file and parses it into s. */
static int open_shard(st_set *s, const char *path, char *err, size_t errlen)
{
    void *map;
    size_t size;
    int rc = nb_map_file(path, 8, NB_EFORMAT, "too short for a safetensors header (8 bytes)", &map, &size, err, errlen);
    if (rc) return rc;
    if (add_shard(s, map, size, path)) {
        munmap(map, size);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    return parse_shard(s, s->n_shards - 1, map, (uint64_t)size, err, errlen);
}

/* A shard name from index.json must name a file inside the directory. */
static bool safe_shard_name(const char *name)
{
    return *name && !strchr(name, '/') && !strchr(name, '\\') && strcmp(name, ".") && !strstr(name, "..");
}

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static cJSON *read_json_file(const char *path, char *err, size_t errlen, int *rc)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *rc = nb_errf(err, errlen, NB_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    bool size_ok = size >= 0 && (unsigned long)size <= ST_MAX_INDEX_BYTES && fseek(f, 0, SEEK_SET) == 0;
    char *text = size_ok ? malloc((size_t)size + 1) : NULL;
    size_t n = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    cJSON *root = text && n == (size_t)size ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    if (!root) *rc = nb_errf(err, errlen, NB_EFORMAT, "%s: %s", path, size_ok ? "not valid JSON" : "unreadable or over 100 MB");
    return root;
}

/* Every weight_map entry must name a tensor that its shard really holds. */
static int check_weight_map(st_set *s, const cJSON *map, const char *index_path, char *err, size_t errlen)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, map)
    {
        const struct st_entry *t = (const struct st_entry *)st_find(s, e->string);
        const char *label = t ? s->shards[t->shard].label : NULL, *base = label ? strrchr(label, '/') + 1 : NULL;
        if (!t || strcmp(base, e->valuestring))
            return nb_errf(err, errlen, NB_EFORMAT, "%s: tensor \"%.100s\" is mapped to %.100s but %s", index_path, e->string,
                           e->valuestring, t ? "found in another shard" : "no shard holds it");
    }
    return 0;
}

/* Opens each shard named in the index's weight_map once, in order of first mention. */
static int open_index(st_set *s, const char *dir, const char *index_path, char *err, size_t errlen)
{
    int rc = 0;
    cJSON *root = read_json_file(index_path, err, errlen, &rc);
    if (!root) return rc;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    if (!cJSON_IsObject(map)) rc = nb_errf(err, errlen, NB_EFORMAT, "%s: no \"weight_map\" object", index_path);
    cJSON_ArrayForEach(e, map)
    {
        if (rc) break;
        if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
            rc = nb_errf(err, errlen, NB_EFORMAT, "%s: tensor \"%.100s\": shard name is not a plain file name in the directory",
                         index_path, e->string);
            break;
        }
        bool seen = false;
        for (int i = 0; i < s->n_shards && !seen; i++) seen = strcmp(strrchr(s->shards[i].label, '/') + 1, e->valuestring) == 0;
        if (seen) continue;
        char *path = join_path(dir, e->valuestring);
        rc = path ? open_shard(s, path, err, errlen) : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
        free(path);
    }
    if (!rc) rc = sort_tensors(s, err, errlen);
    if (!rc) rc = check_weight_map(s, map, index_path, err, errlen);
    cJSON_Delete(root);
    return rc;
}

static int open_dir(st_set *s, const char *dir, char *err, size_t errlen)
{
    char *index = join_path(dir, "model.safetensors.index.json"), *single = join_path(dir, "model.safetensors");
    int rc;
    if (!index || !single) rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    else if (access(index, F_OK) == 0) rc = open_index(s, dir, index, err, errlen);
    else if (access(single, F_OK) == 0) {
        rc = open_shard(s, single, err, errlen);
        if (!rc) rc = sort_tensors(s, err, errlen); /* lookups bsearch; files need not be in name order */
    }
    else rc = nb_errf(err, errlen, NB_ENOENT, "%s: neither model.safetensors.index.json nor model.safetensors", dir);
    free(index);
    free(single);
    return rc;
}

int st_open(const char *path, st_set **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return nb_errf(err, errlen, errno == ENOENT ? NB_ENOENT : NB_EIO, "%s: %s", path, strerror(errno));
    st_set *s = new_set();
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    int rc;
    if (S_ISDIR(st.st_mode)) {
        rc = open_dir(s, path, err, errlen);
    } else {
        rc = open_shard(s, path, err, errlen);
        if (!rc) rc = sort_tensors(s, err, errlen);
    }
    if (rc) {
        st_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---------- lookups ---------- */

int64_t st_count(const st_set *s) { return s->n_tensors; }

const struct st_tensor *st_at(const st_set *s, int64_t i)
{
    return i >= 0 && i < s->n_tensors ? &s->tensors[i].t : NULL;
}

static int cmp_name_entry(const void *key, const void *e) { return strcmp(key, ((const struct st_entry *)e)->t.name); }

const struct st_tensor *st_find(const st_set *s, const char *name)
{
    if (!s->n_tensors) return NULL;
    const struct st_entry *e = bsearch(name, s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_name_entry);
    return e ? &e->t : NULL;
}

const char *st_metadata(const st_set *s, const char *key)
{
    for (int64_t i = 0; i < s->n_meta; i++)
        if (strcmp(s->meta[i].key, key) == 0) return s->meta[i].value;
    return NULL;
}

/* ---------- conversion ---------- */

/* Element i of src (unaligned: safetensors offsets need not be aligned). */
static double load_f64(enum st_dtype d, const uint8_t *p)
{
    union {
        float f32; double f64; uint16_t u16; int64_t i64; int32_t i32; int16_t i16; int8_t i8; uint8_t u8;
    } x;
    memcpy(&x, p, st_dtype_size(d));
    switch (d) {
    case ST_F32: return x.f32;
    case ST_F16: return quant_f16_to_f32(x.u16);
    case ST_BF16: return quant_bf16_to_f32(x.u16);
    case ST_F64: return x.f64;
    case ST_I64: return (double)x.i64;
    case ST_I32: return x.i32;
    case ST_I16: return x.i16;
    case ST_I8: return x.i8;
    case ST_U8: return x.u8;
    default: return 0;
    }
}

/* Elements [first, first + n) of t as numbers: where they start and their size. */
static int check_range(const struct st_tensor *t, int64_t first, int64_t n, const uint8_t **src, size_t *es, char *err,
                       size_t errlen)
{
    if (t->dtype == ST_BOOL)
        return nb_errf(err, errlen, NB_ENOTSUP, "tensor \"%.100s\": BOOL does not convert to numbers", t->name);
    int64_t numel = st_numel(t);
    if (first < 0 || n < 0 || first > numel || n > numel - first)
        return nb_errf(err, errlen, NB_EINVAL, "tensor \"%.100s\": elements [%" PRId64 ", +%" PRId64 ") outside its %" PRId64,
                       t->name, first, n, numel);
    *es = st_dtype_size(t->dtype);
    *src = (const uint8_t *)t->data + (size_t)first * *es;
    return 0;
}

int st_read_f32(const struct st_tensor *t, int64_t first, int64_t n, float *dst, char *err, size_t errlen)
{
    const uint8_t *src;
    size_t es;
    int rc = check_range(t, first, n, &src, &es, err, errlen);
    if (rc) return rc;
    /* The checkpoint dtypes get loops of their own: converting a model
     * reads every weight through here. */
    if (t->dtype == ST_F32) {
        memcpy(dst, src, (size_t)n * es);
    } else if (t->dtype == ST_BF16 || t->dtype == ST_F16) {
        float (*cvt)(uint16_t) = t->dtype == ST_BF16 ? quant_bf16_to_f32 : quant_f16_to_f32;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cvt(h);
        }
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = (float)load_f64(t->dtype, src + (size_t)i * es);
    }
    return 0;
}

int st_read_f64(const struct st_tensor *t, int64_t first, int64_t n, double *dst, char *err, size_t errlen)
{
    const uint8_t *src;
    size_t es;
    int rc = check_range(t, first, n, &src, &es, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < n; i++) dst[i] = load_f64(t->dtype, src + (size_t)i * es);
    return 0;
}
