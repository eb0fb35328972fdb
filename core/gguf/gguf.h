/* gguf.h — reading and writing GGUF v3 files (llama.cpp's model format).
 *
 * Reader: the file is mmap'ed; the header, key/values and tensor table are
 * parsed once into a compact index, every offset, count and length checked
 * against the bytes that are really there (an error names the field and its
 * file offset; nothing past the end is ever touched).  Tensor data stays in
 * the mapping: a tensor is a pointer and a size.  A split model
 * (`name-00001-of-00003.gguf`) opens from any of its shards as one file:
 * the metadata of shard 1, the tensors of all shards.
 *
 * Writer: key/values and tensor descriptors are declared first, the header is
 * written, then tensor data is streamed in declaration order (a tensor may
 * arrive in several pieces), each padded to the alignment.  Memory use does
 * not grow with tensor sizes. */
#ifndef NB_GGUF_H
#define NB_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

const char *gguf_vtype_name(enum gguf_vtype t); /* "u32", "str", "arr", ... */
/* Bytes of one element of a numeric/bool type; 0 for str, arr and unknown types. */
size_t gguf_vtype_size(enum gguf_vtype t);

/* Byte size of a tensor of that type and shape (ne[0] fastest), checking what
 * the reader and writer both require: a known type, 1..GGUF_MAX_DIMS dims,
 * every ne > 0, ne[0] a multiple of the block size, no overflow.  Returns 0
 * or NB_EFORMAT/NB_ENOTSUP with err naming the fault. */
int gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne, uint64_t *nbytes, char *err, size_t errlen);

/* ---------- reader ---------- */

typedef struct gguf_file gguf_file;

struct gguf_tensor {
    const char *name;         /* NUL-terminated */
    uint32_t type;            /* enum quant_type (ggml numbering) */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest axis); unused dims are 1 */
    uint64_t offset;          /* offset within its shard's data section */
    uint64_t nbytes;
    const void *data;         /* into the mapping of its shard */
    int shard;                /* 0-based shard index */
};

/* Opens a file (or the split set it belongs to). Returns 0 or a negative NB_E*. */
int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen);
/* Parses an in-memory image (not copied; must outlive the handle). For fuzzing
 * and tests; split sets are not followed. */
int gguf_open_mem(const void *buf, size_t len, gguf_file **out, char *err, size_t errlen);
void gguf_close(gguf_file *g);

uint32_t gguf_version(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
int gguf_shard_count(const gguf_file *g);

/* Key/values (of the first shard; split.* keys included). */
int64_t gguf_kv_count(const gguf_file *g);
int64_t gguf_find_key(const gguf_file *g, const char *key); /* index or -1 */
const char *gguf_kv_key(const gguf_file *g, int64_t i);
enum gguf_vtype gguf_kv_type(const gguf_file *g, int64_t i);
enum gguf_vtype gguf_kv_arr_type(const gguf_file *g, int64_t i); /* element type of an array */
uint64_t gguf_kv_arr_len(const gguf_file *g, int64_t i);         /* 0 for non-arrays */
/* Human-readable value (arrays show the first few elements and their length). */
void gguf_kv_format(const gguf_file *g, int64_t i, char *buf, size_t len);

/* Typed getters by key. Integers convert between integer types when the value
 * fits (else NB_EFORMAT); floats accept either float type.  Missing key:
 * NB_ENOENT; wrong type: NB_EFORMAT; err names the key. */
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, char *err, size_t errlen);
int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen);
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err, size_t errlen);
/* NUL-terminated copy owned by the handle. */
int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err, size_t errlen);
/* Arrays: element i of an integer / float / string array (same conversions). */
int gguf_get_arr_i64(const gguf_file *g, const char *key, uint64_t i, int64_t *out, char *err, size_t errlen);
int gguf_get_arr_f32(const gguf_file *g, const char *key, uint64_t i, float *out, char *err, size_t errlen);
int gguf_get_arr_str(const gguf_file *g, const char *key, uint64_t i, const char **out, char *err, size_t errlen);
/* Raw access to a numeric array's packed elements (little-endian, in the mapping). */
int gguf_get_arr_data(const gguf_file *g, const char *key, enum gguf_vtype *type, const void **data,
                      uint64_t *n, char *err, size_t errlen);

/* Tensors (of all shards, in file order). */
int64_t gguf_tensor_count(const gguf_file *g);
const struct gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name); /* NULL if absent */

/* ---------- writer ---------- */

typedef struct gguf_writer gguf_writer;

int gguf_writer_open(const char *path, gguf_writer **out, char *err, size_t errlen);
/* Abandons the file (deletes it) if it was not completed by gguf_writer_finish. */
void gguf_writer_free(gguf_writer *w);

/* Key/values, in the order they are added; a key may be set only once. */
int gguf_w_set_u8(gguf_writer *w, const char *key, uint8_t v);
int gguf_w_set_i8(gguf_writer *w, const char *key, int8_t v);
int gguf_w_set_i16(gguf_writer *w, const char *key, int16_t v);
int gguf_w_set_f64(gguf_writer *w, const char *key, double v);
int gguf_w_set_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_w_set_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_w_set_f32(gguf_writer *w, const char *key, float v);
int gguf_w_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_w_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of a numeric/bool type: n packed elements of that type. */
int gguf_w_set_arr(gguf_writer *w, const char *key, enum gguf_vtype type, const void *data, uint64_t n);
int gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* Declares a tensor (shape ne[0..n_dims-1], ne[0] fastest). Its size follows
 * from type and shape; ne[0] must be a multiple of the type's block size. */
int gguf_w_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne);
/* Writes header, key/values and tensor table. No key or tensor may be added after. */
int gguf_w_write_header(gguf_writer *w);
/* Appends bytes of the current tensor (declaration order). When a tensor's
 * bytes are complete the writer pads and moves to the next. Writing more than
 * a tensor's size is an error. */
int gguf_w_write_data(gguf_writer *w, const void *data, size_t nbytes);
/* Like gguf_w_write_data, but leaves the bytes a hole of the file (they read
 * as zeros, take no disk): a full-size model's header and layout whose data
 * nobody reads (nebula-gen --sparse, for planning without the download). */
int gguf_w_skip_data(gguf_writer *w, size_t nbytes);
/* Checks all tensors were written in full, flushes, closes. */
int gguf_writer_finish(gguf_writer *w);
/* Last error message of the writer. */
const char *gguf_writer_error(const gguf_writer *w);

#endif
