/* gguf_kv.c — questions about a GGUF file's key/values: lookup, typed
 * getters, and a human-readable rendering of any value.
 *
 * Numeric values stay packed in the mapping; an element is loaded with
 * memcpy and widened to a 128-bit integer (or a double), so one range check
 * serves every integer type: a u8 array can feed an i64 getter, a u64 of
 * 2^40 cannot feed a u32 getter, and the error says so with the key. */
#include "core/gguf/gguf_priv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

typedef __int128 wide_int;

int64_t gguf_kv_count(const gguf_file *g) { return g->n_kv; }

int64_t gguf_find_key(const gguf_file *g, const char *key) { return gguf_names_find(&g->kv_names, key); }

const char *gguf_kv_key(const gguf_file *g, int64_t i) { return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL; }

enum gguf_vtype gguf_kv_type(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].type : GGUF_VT_COUNT;
}

enum gguf_vtype gguf_kv_arr_type(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].elem : GGUF_VT_COUNT;
}

uint64_t gguf_kv_arr_len(const gguf_file *g, int64_t i)
{
    return i >= 0 && i < g->n_kv && g->kv[i].type == GGUF_VT_ARRAY ? g->kv[i].n : 0;
}

/* ---------- element loads ---------- */

/* Element j of a numeric/bool kv; NULL for string kvs, which have no packed
 * elements. */
static const void *elem_ptr(const struct gguf_kv *kv, uint64_t j)
{
    return kv->raw ? (const uint8_t *)kv->raw + j * gguf_vtype_size(kv->elem) : NULL;
}

/* Element j as an integer; false if the element type is not an integer. */
static bool elem_int(const struct gguf_kv *kv, uint64_t j, wide_int *v)
{
    const void *p = elem_ptr(kv, j);
    if (!p) return false;
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; uint64_t u64; int64_t i64;
    } x;
    switch (kv->elem) {
    case GGUF_VT_UINT8: memcpy(&x.u8, p, 1); *v = x.u8; return true;
    case GGUF_VT_INT8: memcpy(&x.i8, p, 1); *v = x.i8; return true;
    case GGUF_VT_UINT16: memcpy(&x.u16, p, 2); *v = x.u16; return true;
    case GGUF_VT_INT16: memcpy(&x.i16, p, 2); *v = x.i16; return true;
    case GGUF_VT_UINT32: memcpy(&x.u32, p, 4); *v = x.u32; return true;
    case GGUF_VT_INT32: memcpy(&x.i32, p, 4); *v = x.i32; return true;
    case GGUF_VT_UINT64: memcpy(&x.u64, p, 8); *v = x.u64; return true;
    case GGUF_VT_INT64: memcpy(&x.i64, p, 8); *v = x.i64; return true;
    default: return false;
    }
}

static bool elem_float(const struct gguf_kv *kv, uint64_t j, double *v)
{
    const void *p = elem_ptr(kv, j);
    if (!p) return false;
    if (kv->elem == GGUF_VT_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        *v = f;
        return true;
    }
    if (kv->elem == GGUF_VT_FLOAT64) {
        memcpy(v, p, 8);
        return true;
    }
    return false;
}

/* ---------- getters ---------- */

/* The kv of `key`, which must be an array (want_array) or a scalar. */
static int find_kv(const gguf_file *g, const char *key, bool want_array, const struct gguf_kv **out, char *err,
                   size_t errlen)
{
    int64_t i = gguf_find_key(g, key);
    if (i < 0) return nb_errf(err, errlen, NB_ENOENT, "key \"%s\" not found", key);
    *out = &g->kv[i];
    bool is_array = (*out)->type == GGUF_VT_ARRAY;
    if (is_array != want_array)
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" is %s %s, expected %s", key, is_array ? "an array of" : "a",
                       gguf_vtype_name((*out)->elem), want_array ? "an array" : "a single value");
    return 0;
}

static int elem_index(const struct gguf_kv *kv, uint64_t j, char *err, size_t errlen)
{
    if (j < kv->n) return 0;
    return nb_errf(err, errlen, NB_EINVAL, "key \"%s\": index %" PRIu64 " out of range (%" PRIu64 " items)", kv->key, j,
                   kv->n);
}

/* Element j of kv as an integer in [lo, hi]; `what` names the target type. */
static int int_in_range(const struct gguf_kv *kv, uint64_t j, wide_int lo, wide_int hi, const char *what, wide_int *v,
                        char *err, size_t errlen)
{
    if (!elem_int(kv, j, v))
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" holds %s, not an integer", kv->key, gguf_vtype_name(kv->elem));
    if (*v < lo || *v > hi) {
        char num[32];
        if (*v < 0) snprintf(num, sizeof num, "%" PRId64, (int64_t)*v);
        else snprintf(num, sizeof num, "%" PRIu64, (uint64_t)*v);
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\": value %s does not fit %s", kv->key, num, what);
    }
    return 0;
}

/* The kv of `key` and its element i: a single value (array false, i 0) or
 * element i of an array. */
static int find_elem(const gguf_file *g, const char *key, bool array, uint64_t i, const struct gguf_kv **kv, char *err,
                     size_t errlen)
{
    int rc = find_kv(g, key, array, kv, err, errlen);
    if (!rc && array) rc = elem_index(*kv, i, err, errlen);
    return rc;
}

static int get_int(const gguf_file *g, const char *key, bool array, uint64_t i, wide_int lo, wide_int hi,
                   const char *what, wide_int *v, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = find_elem(g, key, array, i, &kv, err, errlen);
    return rc ? rc : int_in_range(kv, i, lo, hi, what, v, err, errlen);
}

static int get_float(const gguf_file *g, const char *key, bool array, uint64_t i, float *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    double v;
    int rc = find_elem(g, key, array, i, &kv, err, errlen);
    if (rc) return rc;
    if (!elem_float(kv, i, &v))
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" holds %s, not %s", key, gguf_vtype_name(kv->elem),
                       array ? "floats" : "a float");
    *out = (float)v;
    return 0;
}

static int get_str(const gguf_file *g, const char *key, bool array, uint64_t i, const char **out, char *err,
                   size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = find_elem(g, key, array, i, &kv, err, errlen);
    if (rc) return rc;
    if (kv->elem != GGUF_VT_STRING)
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" holds %s, not %s", key, gguf_vtype_name(kv->elem),
                       array ? "strings" : "a string");
    *out = kv->strs[i];
    return 0;
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, char *err, size_t errlen)
{
    wide_int v;
    int rc = get_int(g, key, false, 0, 0, UINT64_MAX, "u64", &v, err, errlen);
    if (!rc) *out = (uint64_t)v;
    return rc;
}

int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen)
{
    wide_int v;
    int rc = get_int(g, key, false, 0, INT64_MIN, INT64_MAX, "i64", &v, err, errlen);
    if (!rc) *out = (int64_t)v;
    return rc;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, char *err, size_t errlen)
{
    wide_int v;
    int rc = get_int(g, key, false, 0, 0, UINT32_MAX, "u32", &v, err, errlen);
    if (!rc) *out = (uint32_t)v;
    return rc;
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err, size_t errlen)
{
    return get_float(g, key, false, 0, out, err, errlen);
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = find_kv(g, key, false, &kv, err, errlen);
    if (rc) return rc;
    if (kv->elem != GGUF_VT_BOOL)
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" holds %s, not a bool", key, gguf_vtype_name(kv->elem));
    *out = *(const uint8_t *)kv->raw != 0;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err, size_t errlen)
{
    return get_str(g, key, false, 0, out, err, errlen);
}

int gguf_get_arr_i64(const gguf_file *g, const char *key, uint64_t i, int64_t *out, char *err, size_t errlen)
{
    wide_int v;
    int rc = get_int(g, key, true, i, INT64_MIN, INT64_MAX, "i64", &v, err, errlen);
    if (!rc) *out = (int64_t)v;
    return rc;
}

int gguf_get_arr_f32(const gguf_file *g, const char *key, uint64_t i, float *out, char *err, size_t errlen)
{
    return get_float(g, key, true, i, out, err, errlen);
}

int gguf_get_arr_str(const gguf_file *g, const char *key, uint64_t i, const char **out, char *err, size_t errlen)
{
    return get_str(g, key, true, i, out, err, errlen);
}

int gguf_get_arr_data(const gguf_file *g, const char *key, enum gguf_vtype *type, const void **data, uint64_t *n,
                      char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = find_kv(g, key, true, &kv, err, errlen);
    if (rc) return rc;
    if (kv->elem == GGUF_VT_STRING)
        return nb_errf(err, errlen, NB_EFORMAT, "key \"%s\" holds strings, not packed numbers", key);
    *type = kv->elem;
    *data = kv->raw;
    *n = kv->n;
    return 0;
}

/* ---------- formatting ---------- */

/* Appends into a fixed buffer; output that does not fit ends in "...". */
struct out {
    char *p;
    size_t len, cap;
    bool full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    if (o->full) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->cap - o->len) {
        o->full = true;
        o->len = o->cap - 1;
        if (o->cap >= 4) memcpy(o->p + o->cap - 4, "...", 4);
        return;
    }
    o->len += (size_t)n;
}

/* The shortest decimal that reads back as the same value. */
static void put_float(struct out *o, double v, bool is_f32)
{
    char s[40];
    for (int digits = is_f32 ? 6 : 15; digits <= (is_f32 ? 9 : 17); digits++) {
        snprintf(s, sizeof s, "%.*g", digits, v);
        if (is_f32 ? strtof(s, NULL) == (float)v : strtod(s, NULL) == v) break;
    }
    put(o, "%s", s);
}

/* A string in quotes, escaped, cut after max_chars (array elements are cut
 * so that a long first element cannot hide the item count). */
static void put_quoted(struct out *o, const char *s, size_t max_chars)
{
    put(o, "\"");
    for (size_t n = 0; *s && !o->full; s++, n++) {
        if (n == max_chars) {
            put(o, "...");
            break;
        }
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') put(o, "\\%c", ch);
        else if (ch == '\n') put(o, "\\n");
        else if (ch < 0x20 || ch == 0x7f) put(o, "\\x%02x", ch);
        else put(o, "%c", ch);
    }
    put(o, "\"");
}

static void put_elem(struct out *o, const struct gguf_kv *kv, uint64_t j)
{
    wide_int i;
    double f;
    if (kv->elem == GGUF_VT_STRING) put_quoted(o, kv->strs[j], kv->type == GGUF_VT_ARRAY ? 48 : SIZE_MAX);
    else if (kv->elem == GGUF_VT_BOOL) put(o, "%s", ((const uint8_t *)kv->raw)[j] ? "true" : "false");
    else if (elem_float(kv, j, &f)) put_float(o, f, kv->elem == GGUF_VT_FLOAT32);
    else if (elem_int(kv, j, &i) && i < 0) put(o, "%" PRId64, (int64_t)i);
    else if (elem_int(kv, j, &i)) put(o, "%" PRIu64, (uint64_t)i);
}

enum { ARRAY_SHOWN_IN_FULL = 8, ARRAY_SHOWN_ABBREVIATED = 3 };

void gguf_kv_format(const gguf_file *g, int64_t i, char *buf, size_t len)
{
    if (!buf || !len) return;
    struct out o = {buf, 0, len, false};
    buf[0] = 0;
    if (i < 0 || i >= g->n_kv) return;
    const struct gguf_kv *kv = &g->kv[i];
    if (kv->type != GGUF_VT_ARRAY) {
        put_elem(&o, kv, 0);
        return;
    }
    bool abbreviate = kv->n > ARRAY_SHOWN_IN_FULL;
    uint64_t shown = abbreviate ? ARRAY_SHOWN_ABBREVIATED : kv->n;
    put(&o, "[");
    for (uint64_t j = 0; j < shown; j++) {
        if (j) put(&o, ", ");
        put_elem(&o, kv, j);
    }
    if (abbreviate) put(&o, ", ... ] (%" PRIu64 " items)", kv->n);
    else put(&o, "]");
}
