/* safetensors.h — reading Hugging Face safetensors checkpoints.
 *
 * A checkpoint is a single `model.safetensors`, a directory holding it, or a
 * directory with `model.safetensors.index.json` naming several shards; all
 * open as one set of named tensors.  Each shard is mmap'ed; its JSON header is
 * parsed with cJSON and every tensor's offsets are checked against the shard's
 * size and its dtype × shape before anything is read. */
#ifndef NB_SAFETENSORS_H
#define NB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_DTYPE_COUNT };

struct st_tensor {
    const char *name;
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* row-major: shape[n_dims-1] is the fastest axis */
    uint64_t nbytes;
    const void *data;           /* into the mapping */
};

typedef struct st_set st_set;

/* path: a .safetensors file, or a directory (index.json or model.safetensors). */
int st_open(const char *path, st_set **out, char *err, size_t errlen);
/* One in-memory shard (not copied). For fuzzing and tests. */
int st_open_mem(const void *buf, size_t len, st_set **out, char *err, size_t errlen);
void st_close(st_set *s);

int64_t st_count(const st_set *s);
const struct st_tensor *st_at(const st_set *s, int64_t i);       /* sorted by name */
const struct st_tensor *st_find(const st_set *s, const char *name); /* NULL if absent */
/* Value of a "__metadata__" entry, or NULL. */
const char *st_metadata(const st_set *s, const char *key);

int64_t st_numel(const struct st_tensor *t);
size_t st_dtype_size(enum st_dtype d);
const char *st_dtype_name(enum st_dtype d);
/* Converts n elements starting at element `first` to float (F32/F16/BF16/F64/
 * integers). NB_ENOTSUP for BOOL; NB_EINVAL if out of range. */
int st_read_f32(const struct st_tensor *t, int64_t first, int64_t n, float *dst, char *err, size_t errlen);
/* Same, to double (the converter's tests compare in double). */
int st_read_f64(const struct st_tensor *t, int64_t first, int64_t n, double *dst, char *err, size_t errlen);

#endif
