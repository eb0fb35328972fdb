/* gguf_write.c — writes GGUF v3 files, streaming tensor data.
 *
 * Key/values are serialised into a memory blob as they are set (they are
 * small, except a vocabulary: a few MB); tensors are only declared.  At
 * gguf_w_write_header every tensor's offset is fixed (each padded to the
 * alignment), so the header goes out first and the data follows in
 * declaration order, piece by piece: memory does not grow with the model.
 *
 * The file is written as PATH.tmp and renamed to PATH only by
 * gguf_writer_finish, after the byte count matched the layout and the data
 * was synced: an interrupted conversion never leaves a half file under the
 * final name.  The first error poisons the writer; every later call returns
 * it again, so a caller may check only the last call. */
#include "core/gguf/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "core/util/grow.h"

struct w_tensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
};

enum w_state { W_DECLARING, W_DATA, W_DONE, W_FAILED };

struct gguf_writer {
    char *path, *tmp_path;
    FILE *f;
    bool tmp_created;
    enum w_state state;
    int failed_code;
    char err[512];

    uint8_t *kv_blob; /* serialised key/values, freed once written */
    size_t kv_len, kv_cap;
    char **keys;
    uint64_t n_kv;
    uint32_t alignment;

    struct w_tensor *tensors;
    int64_t n_tensors, tensors_cap;
    int64_t cur;          /* tensor receiving data */
    uint64_t cur_written; /* its bytes so far */
    uint64_t pos;         /* bytes written to the file */
    uint64_t total;       /* file size fixed by the header */
};

static int w_fail(gguf_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int w_fail(gguf_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->state = W_FAILED;
    w->failed_code = code;
    return code;
}

/* 0 if the writer is in state `want`; otherwise the error to return. */
static int w_state_is(gguf_writer *w, enum w_state want, const char *call)
{
    if (w->state == want) return 0;
    if (w->state == W_FAILED) return w->failed_code;
    static const char *names[] = {"declaring", "writing data", "finished", "failed"};
    return w_fail(w, NB_EINVAL, "%s: not allowed while %s", call, names[w->state]);
}

int gguf_writer_open(const char *path, gguf_writer **out, char *err, size_t errlen)
{
    *out = NULL;
    gguf_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    if (w) w->path = strdup(path);
    if (w) w->tmp_path = malloc(n + 5);
    if (!w || !w->path || !w->tmp_path) {
        gguf_writer_free(w);
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp", 5);
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!(w->f = fopen(w->tmp_path, "wb"))) {
        int rc = nb_errf(err, errlen, NB_EIO, "%s: %s", w->tmp_path, strerror(errno));
        gguf_writer_free(w);
        return rc;
    }
    w->tmp_created = true;
    *out = w;
    return 0;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp_created && w->state != W_DONE) unlink(w->tmp_path);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (int64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->keys);
    free(w->tensors);
    free(w->kv_blob);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

const char *gguf_writer_error(const gguf_writer *w) { return w->err; }

/* ---------- key/values ---------- */

static int blob_put(gguf_writer *w, const void *p, size_t n)
{
    if (n > w->kv_cap - w->kv_len) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap - w->kv_len < n) {
            if (cap > SIZE_MAX / 2) return w_fail(w, NB_ENOMEM, "key/values too large");
            cap *= 2;
        }
        uint8_t *b = realloc(w->kv_blob, cap);
        if (!b) return w_fail(w, NB_ENOMEM, "out of memory for key/values");
        w->kv_blob = b;
        w->kv_cap = cap;
    }
    if (n) memcpy(w->kv_blob + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int blob_u32(gguf_writer *w, uint32_t v) { return blob_put(w, &v, 4); }
static int blob_u64(gguf_writer *w, uint64_t v) { return blob_put(w, &v, 8); }
static int blob_str(gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    int rc = blob_u64(w, n);
    return rc ? rc : blob_put(w, s, n);
}

/* Checks and records a new key, and serialises it with its type tag. */
static int begin_kv(gguf_writer *w, const char *key, enum gguf_vtype type)
{
    int rc = w_state_is(w, W_DECLARING, "set key");
    if (rc) return rc;
    if (!key || !*key) return w_fail(w, NB_EINVAL, "empty key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return w_fail(w, NB_EINVAL, "key \"%s\" set twice", key);
    char **keys = realloc(w->keys, (w->n_kv + 1) * sizeof *keys);
    if (!keys) return w_fail(w, NB_ENOMEM, "out of memory");
    w->keys = keys;
    if (!(keys[w->n_kv] = strdup(key))) return w_fail(w, NB_ENOMEM, "out of memory");
    w->n_kv++;
    /* llama.cpp reads general.alignment as a u32 and nothing else. */
    if (strcmp(key, "general.alignment") == 0 && type != GGUF_VT_UINT32)
        return w_fail(w, NB_EINVAL, "key \"general.alignment\" must be u32, not %s", gguf_vtype_name(type));
    if ((rc = blob_str(w, key))) return rc;
    return blob_u32(w, (uint32_t)type);
}

static int set_scalar(gguf_writer *w, const char *key, enum gguf_vtype type, const void *v)
{
    int rc = begin_kv(w, key, type);
    return rc ? rc : blob_put(w, v, gguf_vtype_size(type));
}

int gguf_w_set_u8(gguf_writer *w, const char *key, uint8_t v) { return set_scalar(w, key, GGUF_VT_UINT8, &v); }
int gguf_w_set_i8(gguf_writer *w, const char *key, int8_t v) { return set_scalar(w, key, GGUF_VT_INT8, &v); }
int gguf_w_set_i16(gguf_writer *w, const char *key, int16_t v) { return set_scalar(w, key, GGUF_VT_INT16, &v); }
int gguf_w_set_f64(gguf_writer *w, const char *key, double v) { return set_scalar(w, key, GGUF_VT_FLOAT64, &v); }
int gguf_w_set_u16(gguf_writer *w, const char *key, uint16_t v) { return set_scalar(w, key, GGUF_VT_UINT16, &v); }
int gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, GGUF_VT_INT32, &v); }
int gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, GGUF_VT_UINT64, &v); }
int gguf_w_set_i64(gguf_writer *w, const char *key, int64_t v) { return set_scalar(w, key, GGUF_VT_INT64, &v); }
int gguf_w_set_f32(gguf_writer *w, const char *key, float v) { return set_scalar(w, key, GGUF_VT_FLOAT32, &v); }

int gguf_w_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    return set_scalar(w, key, GGUF_VT_BOOL, &b);
}

int gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
    int rc = set_scalar(w, key, GGUF_VT_UINT32, &v);
    if (rc || strcmp(key, "general.alignment")) return rc;
    if (v == 0 || (v & (v - 1))) return w_fail(w, NB_EINVAL, "general.alignment %" PRIu32 " is not a power of two", v);
    w->alignment = v;
    return 0;
}

int gguf_w_set_str(gguf_writer *w, const char *key, const char *v)
{
    int rc = begin_kv(w, key, GGUF_VT_STRING);
    return rc ? rc : blob_str(w, v);
}

static int begin_array(gguf_writer *w, const char *key, enum gguf_vtype elem, uint64_t n)
{
    int rc = begin_kv(w, key, GGUF_VT_ARRAY);
    if (!rc) rc = blob_u32(w, (uint32_t)elem);
    return rc ? rc : blob_u64(w, n);
}

int gguf_w_set_arr(gguf_writer *w, const char *key, enum gguf_vtype type, const void *data, uint64_t n)
{
    size_t each = gguf_vtype_size(type);
    if (w->state == W_DECLARING && !each)
        return w_fail(w, NB_EINVAL, "key \"%s\": array element type %s is not numeric", key, gguf_vtype_name(type));
    if (w->state == W_DECLARING && n > SIZE_MAX / each)
        return w_fail(w, NB_EINVAL, "key \"%s\": array of %" PRIu64 " items is too large", key, n);
    int rc = begin_array(w, key, type, n);
    return rc ? rc : blob_put(w, data, (size_t)n * each);
}

int gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    int rc = begin_array(w, key, GGUF_VT_STRING, n);
    for (uint64_t i = 0; i < n && !rc; i++) rc = blob_str(w, strs[i]);
    return rc;
}

/* ---------- tensors ---------- */

int gguf_w_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne)
{
    int rc = w_state_is(w, W_DECLARING, "add tensor");
    if (rc) return rc;
    if (!name || !*name) return w_fail(w, NB_EINVAL, "empty tensor name");
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0) return w_fail(w, NB_EINVAL, "tensor \"%s\" declared twice", name);
    struct w_tensor t = {.type = type, .n_dims = n_dims};
    char why[200];
    if ((rc = gguf_tensor_nbytes(type, n_dims, ne, &t.nbytes, why, sizeof why)))
        return w_fail(w, NB_EINVAL, "tensor \"%s\": %s", name, why);
    memcpy(t.ne, ne, (size_t)n_dims * sizeof *ne);
    if (nb_grow((void **)&w->tensors, &w->tensors_cap, w->n_tensors, sizeof *w->tensors, 64))
        return w_fail(w, NB_ENOMEM, "out of memory");
    if (!(t.name = strdup(name))) return w_fail(w, NB_ENOMEM, "out of memory");
    w->tensors[w->n_tensors++] = t;
    return 0;
}

/* ---------- file output ---------- */

static uint64_t pad_to(uint64_t n, uint32_t alignment) { return (n + alignment - 1) / alignment * alignment; }

static int out_bytes(gguf_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return w_fail(w, NB_EIO, "%s: write failed at offset %" PRIu64 ": %s", w->tmp_path, w->pos, strerror(errno));
    w->pos += n;
    return 0;
}

static int out_u32(gguf_writer *w, uint32_t v) { return out_bytes(w, &v, 4); }
static int out_u64(gguf_writer *w, uint64_t v) { return out_bytes(w, &v, 8); }

/* Zeros up to the next multiple of the alignment. */
static int out_padding(gguf_writer *w)
{
    static const uint8_t zeros[256];
    uint64_t n = pad_to(w->pos, w->alignment) - w->pos;
    int rc = 0;
    while (n && !rc) {
        size_t chunk = n < sizeof zeros ? (size_t)n : sizeof zeros;
        rc = out_bytes(w, zeros, chunk);
        n -= chunk;
    }
    return rc;
}

static int out_tensor_info(gguf_writer *w, const struct w_tensor *t)
{
    size_t n = strlen(t->name);
    int rc = out_u64(w, n);
    if (!rc) rc = out_bytes(w, t->name, n);
    if (!rc) rc = out_u32(w, (uint32_t)t->n_dims);
    if (!rc) rc = out_bytes(w, t->ne, (size_t)t->n_dims * sizeof t->ne[0]);
    if (!rc) rc = out_u32(w, t->type);
    if (!rc) rc = out_u64(w, t->offset);
    return rc;
}

int gguf_w_write_header(gguf_writer *w)
{
    int rc = w_state_is(w, W_DECLARING, "write header");
    if (rc) return rc;
    uint64_t data_bytes = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].offset = data_bytes;
        data_bytes += pad_to(w->tensors[i].nbytes, w->alignment);
    }
    if (!rc) rc = out_bytes(w, "GGUF", 4);
    if (!rc) rc = out_u32(w, 3);
    if (!rc) rc = out_u64(w, (uint64_t)w->n_tensors);
    if (!rc) rc = out_u64(w, w->n_kv);
    if (!rc) rc = out_bytes(w, w->kv_blob, w->kv_len);
    for (int64_t i = 0; i < w->n_tensors && !rc; i++) rc = out_tensor_info(w, &w->tensors[i]);
    if (!rc) rc = out_padding(w);
    if (rc) return rc;
    free(w->kv_blob);
    w->kv_blob = NULL;
    w->kv_len = w->kv_cap = 0;
    w->total = w->pos + data_bytes;
    w->state = W_DATA;
    return 0;
}

/* The next nbytes of the current tensor's data: written from data, or (skip) passed over, leaving what the
 * file holds there. */
static int w_data(gguf_writer *w, const void *data, size_t nbytes, bool skip)
{
    const char *verb = skip ? "skipped" : "written";
    int rc = w_state_is(w, W_DATA, skip ? "skip data" : "write data");
    if (rc) return rc;
    if (w->cur == w->n_tensors)
        return w_fail(w, NB_EINVAL, "%zu bytes of data %s after the last tensor", nbytes, verb);
    const struct w_tensor *t = &w->tensors[w->cur];
    if (nbytes > t->nbytes - w->cur_written)
        return w_fail(w, NB_EINVAL, "tensor \"%s\": %zu bytes %s but only %" PRIu64 " of its %" PRIu64 " bytes remain",
                      t->name, nbytes, verb, t->nbytes - w->cur_written, t->nbytes);
    if (!skip) {
        if ((rc = out_bytes(w, data, nbytes))) return rc;
    } else if (nbytes) {
        if (fseeko(w->f, (off_t)nbytes, SEEK_CUR) != 0)
            return w_fail(w, NB_EIO, "%s: seek failed at offset %" PRIu64 ": %s", w->tmp_path, w->pos, strerror(errno));
        w->pos += nbytes;
    }
    w->cur_written += nbytes;
    if (w->cur_written < t->nbytes) return 0;
    w->cur++;
    w->cur_written = 0;
    return out_padding(w);
}

int gguf_w_write_data(gguf_writer *w, const void *data, size_t nbytes) { return w_data(w, data, nbytes, false); }

int gguf_w_skip_data(gguf_writer *w, size_t nbytes) { return w_data(w, NULL, nbytes, true); }

int gguf_writer_finish(gguf_writer *w)
{
    int rc = w_state_is(w, W_DATA, "finish");
    if (rc) return rc;
    if (w->cur < w->n_tensors)
        return w_fail(w, NB_EINVAL, "tensor \"%s\": %" PRIu64 " of %" PRIu64 " bytes written (%" PRId64 " of %" PRId64
                      " tensors complete)", w->tensors[w->cur].name, w->cur_written, w->tensors[w->cur].nbytes, w->cur,
                      w->n_tensors);
    if (w->pos != w->total)
        return w_fail(w, NB_EIO, "%s: %" PRIu64 " bytes written, layout says %" PRIu64, w->tmp_path, w->pos, w->total);
    /* Synced before the rename, so the final name never points at data
     * that a crash could still lose. */
    /* A file ending in a hole (gguf_w_skip_data) gets its length here. */
    int bad = fflush(w->f) != 0 || ftruncate(fileno(w->f), (off_t)w->total) != 0 || fsync(fileno(w->f)) != 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (bad) return w_fail(w, NB_EIO, "%s: %s", w->tmp_path, strerror(errno));
    if (rename(w->tmp_path, w->path) != 0)
        return w_fail(w, NB_EIO, "rename %s -> %s: %s", w->tmp_path, w->path, strerror(errno));
    w->state = W_DONE;
    return 0;
}
