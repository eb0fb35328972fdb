/* test_gguf.c — GGUF writer → reader round trips, writer misuse, and the
 * reader's answer to truncated and corrupt files (an error that names the
 * field, never a crash or a silent success).  Split sets: test_gguf_split.c. */
#include <criterion/criterion.h>
#include <math.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

TestSuite(gguf, .init = tmp_setup, .fini = tmp_teardown);

static uint8_t pattern(unsigned seed, uint64_t i) { return (uint8_t)(i * 131u + seed * 7u + (i >> 8)); }

struct spec {
    const char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
};

static uint64_t spec_bytes(const struct spec *t)
{
    uint64_t n;
    cr_assert_eq(gguf_tensor_nbytes(t->type, t->n_dims, t->ne, &n, NULL, 0), 0);
    return n;
}

/* Declares the tensors, writes the header, streams each tensor's pattern in
 * three uneven pieces, finishes. Key/values are set by the caller before. */
static void write_tensors(gguf_writer *w, const struct spec *ts, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(gguf_w_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne), 0, "%s", gguf_writer_error(w));
    cr_assert_eq(gguf_w_write_header(w), 0, "%s", gguf_writer_error(w));
    for (int i = 0; i < n; i++) {
        uint64_t bytes = spec_bytes(&ts[i]);
        uint8_t *buf = malloc(bytes);
        for (uint64_t j = 0; j < bytes; j++) buf[j] = pattern((unsigned)i, j);
        uint64_t cut1 = bytes / 3, cut2 = bytes - 1;
        cr_assert_eq(gguf_w_write_data(w, buf, cut1), 0, "%s", gguf_writer_error(w));
        cr_assert_eq(gguf_w_write_data(w, buf + cut1, cut2 - cut1), 0, "%s", gguf_writer_error(w));
        cr_assert_eq(gguf_w_write_data(w, buf + cut2, bytes - cut2), 0, "%s", gguf_writer_error(w));
        free(buf);
    }
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    gguf_writer_free(w);
}

static void check_tensors(const gguf_file *g, const struct spec *ts, int n)
{
    cr_assert_eq(gguf_tensor_count(g), n);
    for (int i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(g, ts[i].name);
        cr_assert(t, "tensor %s", ts[i].name);
        cr_assert_eq(t, gguf_tensor_at(g, i), "file order");
        cr_assert_eq(t->type, ts[i].type);
        cr_assert_eq(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < GGUF_MAX_DIMS; d++) cr_assert_eq(t->ne[d], d < ts[i].n_dims ? ts[i].ne[d] : 1);
        cr_assert_eq(t->nbytes, spec_bytes(&ts[i]));
        cr_assert_eq(t->offset % gguf_alignment(g), 0);
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->nbytes; j++) cr_assert_eq(p[j], pattern((unsigned)i, j), "%s byte %lu", t->name, j);
    }
}

static const struct spec mixed[] = {
    {"token_embd.weight", QT_F32, 2, {8, 3}},
    {"blk.0.attn_norm.weight", QT_F16, 1, {17}},
    {"blk.0.attn_q.weight", QT_Q8_0, 2, {64, 2}},
    {"blk.0.ffn_down.weight", QT_Q4_K, 3, {256, 2, 2}},
    {"output.weight", QT_BF16, 4, {2, 1, 3, 2}},
};
enum { N_MIXED = sizeof mixed / sizeof mixed[0] };

static const char *const words[] = {"alpha", "", "quote\"d", "ünïcode", "tab\there"};

/* One key per scalar type and one array per element type. */
static void set_every_type(gguf_writer *w)
{
    static const uint8_t u8s[] = {0, 1, 255};
    static const int8_t i8s[] = {-128, 0, 127};
    static const uint16_t u16s[] = {0, 65535};
    static const int16_t i16s[] = {-32768, 5};
    static const uint32_t u32s[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    static const int32_t i32s[] = {-7, 7};
    static const float f32s[] = {0.5f, -1.25f, 3e38f};
    static const uint8_t bools[] = {1, 0, 1};
    static const uint64_t u64s[] = {UINT64_MAX, 0};
    static const int64_t i64s[] = {INT64_MIN, INT64_MAX};
    static const double f64s[] = {0.1, -2.5};
    cr_assert_eq(gguf_w_set_str(w, "general.architecture", "qwen4exp"), 0);
    cr_assert_eq(gguf_w_set_u8(w, "v.u8", 200), 0);
    cr_assert_eq(gguf_w_set_i8(w, "v.i8", -100), 0);
    cr_assert_eq(gguf_w_set_u16(w, "v.u16", 60000), 0);
    cr_assert_eq(gguf_w_set_i16(w, "v.i16", -30000), 0);
    cr_assert_eq(gguf_w_set_u32(w, "v.u32", 4000000000u), 0);
    cr_assert_eq(gguf_w_set_i32(w, "v.i32", -2000000000), 0);
    cr_assert_eq(gguf_w_set_f32(w, "v.f32", 0.1f), 0);
    cr_assert_eq(gguf_w_set_bool(w, "v.bool", true), 0);
    cr_assert_eq(gguf_w_set_u64(w, "v.u64", UINT64_MAX), 0);
    cr_assert_eq(gguf_w_set_i64(w, "v.i64", INT64_MIN), 0);
    cr_assert_eq(gguf_w_set_f64(w, "v.f64", 1e300), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.u8", GGUF_VT_UINT8, u8s, 3), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.i8", GGUF_VT_INT8, i8s, 3), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.u16", GGUF_VT_UINT16, u16s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.i16", GGUF_VT_INT16, i16s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.u32", GGUF_VT_UINT32, u32s, 10), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.i32", GGUF_VT_INT32, i32s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.f32", GGUF_VT_FLOAT32, f32s, 3), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.bool", GGUF_VT_BOOL, bools, 3), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.u64", GGUF_VT_UINT64, u64s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.i64", GGUF_VT_INT64, i64s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.f64", GGUF_VT_FLOAT64, f64s, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "a.empty", GGUF_VT_INT32, NULL, 0), 0);
    cr_assert_eq(gguf_w_set_arr_str(w, "a.str", words, 5), 0);
}

static void check_scalars(const gguf_file *g)
{
    char err[256];
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    float f;
    bool b;
    const char *s;
    cr_assert_eq(gguf_get_str(g, "general.architecture", &s, err, sizeof err), 0);
    cr_assert_str_eq(s, "qwen4exp");
    cr_assert_eq(gguf_get_u32(g, "v.u8", &u32, err, sizeof err), 0);
    cr_assert_eq(u32, 200);
    cr_assert_eq(gguf_get_i64(g, "v.i8", &i64, err, sizeof err), 0);
    cr_assert_eq(i64, -100);
    cr_assert_eq(gguf_get_u64(g, "v.u16", &u64, err, sizeof err), 0);
    cr_assert_eq(u64, 60000);
    cr_assert_eq(gguf_get_i64(g, "v.i16", &i64, err, sizeof err), 0);
    cr_assert_eq(i64, -30000);
    cr_assert_eq(gguf_get_u32(g, "v.u32", &u32, err, sizeof err), 0);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(gguf_get_i64(g, "v.i32", &i64, err, sizeof err), 0);
    cr_assert_eq(i64, -2000000000);
    cr_assert_eq(gguf_get_f32(g, "v.f32", &f, err, sizeof err), 0);
    cr_assert_eq(f, 0.1f);
    cr_assert_eq(gguf_get_bool(g, "v.bool", &b, err, sizeof err), 0);
    cr_assert(b);
    cr_assert_eq(gguf_get_u64(g, "v.u64", &u64, err, sizeof err), 0);
    cr_assert_eq(u64, UINT64_MAX);
    cr_assert_eq(gguf_get_i64(g, "v.i64", &i64, err, sizeof err), 0);
    cr_assert_eq(i64, INT64_MIN);
    cr_assert_eq(gguf_get_f32(g, "v.f64", &f, err, sizeof err), 0);
    cr_assert(isinf(f), "1e300 as float");
    /* Conversions that do not fit are errors naming the key. */
    cr_assert_eq(gguf_get_u64(g, "v.i8", &u64, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "v.i8") && strstr(err, "-100"), "%s", err);
    cr_assert_eq(gguf_get_i64(g, "v.u64", &i64, err, sizeof err), NB_EFORMAT);
    cr_assert_eq(gguf_get_u32(g, "v.u64", &u32, err, sizeof err), NB_EFORMAT);
    cr_assert_eq(gguf_get_u32(g, "general.architecture", &u32, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, "str"), "%s", err);
    cr_assert_eq(gguf_get_f32(g, "v.u8", &f, err, sizeof err), NB_EFORMAT);
    cr_assert_eq(gguf_get_bool(g, "v.u8", &b, err, sizeof err), NB_EFORMAT);
    cr_assert_eq(gguf_get_str(g, "a.str", &s, err, sizeof err), NB_EFORMAT, "array is not a scalar");
    cr_assert_eq(gguf_get_u32(g, "no.such.key", &u32, err, sizeof err), NB_ENOENT);
    cr_assert(strstr(err, "no.such.key"), "%s", err);
}

static void check_arrays(const gguf_file *g)
{
    char err[256];
    int64_t v;
    float f;
    const char *s;
    static const struct {
        const char *key;
        uint64_t i;
        int64_t want;
    } ints[] = {{"a.u8", 2, 255},     {"a.i8", 0, -128},         {"a.u16", 1, 65535}, {"a.i16", 0, -32768},
                {"a.u32", 9, 10},     {"a.i32", 0, -7},          {"a.i64", 0, INT64_MIN}, {"a.i64", 1, INT64_MAX},
                {"a.u64", 1, 0}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        cr_assert_eq(gguf_get_arr_i64(g, ints[k].key, ints[k].i, &v, err, sizeof err), 0, "%s", err);
        cr_assert_eq(v, ints[k].want, "%s[%lu]", ints[k].key, ints[k].i);
    }
    cr_assert_eq(gguf_get_arr_i64(g, "a.u64", 0, &v, err, sizeof err), NB_EFORMAT, "UINT64_MAX does not fit i64");
    cr_assert_eq(gguf_get_arr_i64(g, "a.u32", 10, &v, err, sizeof err), NB_EINVAL);
    cr_assert(strstr(err, "index 10"), "%s", err);
    cr_assert_eq(gguf_get_arr_f32(g, "a.f32", 1, &f, err, sizeof err), 0);
    cr_assert_eq(f, -1.25f);
    cr_assert_eq(gguf_get_arr_f32(g, "a.f64", 0, &f, err, sizeof err), 0);
    cr_assert_eq(f, 0.1f);
    for (uint64_t i = 0; i < 5; i++) {
        cr_assert_eq(gguf_get_arr_str(g, "a.str", i, &s, err, sizeof err), 0);
        cr_assert_str_eq(s, words[i]);
    }
    enum gguf_vtype t;
    const void *data;
    uint64_t n;
    cr_assert_eq(gguf_get_arr_data(g, "a.bool", &t, &data, &n, err, sizeof err), 0);
    cr_assert(t == GGUF_VT_BOOL && n == 3 && memcmp(data, "\1\0\1", 3) == 0);
    cr_assert_eq(gguf_get_arr_data(g, "a.empty", &t, &data, &n, err, sizeof err), 0);
    cr_assert(t == GGUF_VT_INT32 && n == 0);
    cr_assert_eq(gguf_get_arr_data(g, "a.str", &t, &data, &n, err, sizeof err), NB_EFORMAT);
    int64_t k = gguf_find_key(g, "a.i16");
    cr_assert(k >= 0);
    cr_assert_str_eq(gguf_kv_key(g, k), "a.i16");
    cr_assert_eq(gguf_kv_type(g, k), GGUF_VT_ARRAY);
    cr_assert_eq(gguf_kv_arr_type(g, k), GGUF_VT_INT16);
    cr_assert_eq(gguf_kv_arr_len(g, k), 2);
    cr_assert_eq(gguf_kv_arr_len(g, gguf_find_key(g, "v.u8")), 0);
}

static void check_format(const gguf_file *g, const char *key, const char *want)
{
    char buf[256];
    gguf_kv_format(g, gguf_find_key(g, key), buf, sizeof buf);
    cr_assert_str_eq(buf, want, "%s", key);
}

/* A writer of path, opened (every test that writes a file starts so). */
static gguf_writer *writer_at(const char *path)
{
    char err[256];
    gguf_writer *w;
    cr_assert_eq(gguf_writer_open(path, &w, err, sizeof err), 0, "%s", err);
    return w;
}

static void roundtrip(uint32_t alignment)
{
    const char *path = tmp_path("rt.gguf");
    char err[512];
    gguf_writer *w = writer_at(path);
    if (alignment != GGUF_DEFAULT_ALIGNMENT) cr_assert_eq(gguf_w_set_u32(w, "general.alignment", alignment), 0);
    set_every_type(w);
    write_tensors(w, mixed, N_MIXED);

    gguf_file *g;
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_version(g), 3);
    cr_assert_eq(gguf_alignment(g), alignment);
    cr_assert_eq(gguf_shard_count(g), 1);
    cr_assert_eq(gguf_kv_count(g), 25 + (alignment != GGUF_DEFAULT_ALIGNMENT));
    check_scalars(g);
    check_arrays(g);
    check_tensors(g, mixed, N_MIXED);
    /* The layout, checked on the raw bytes: every tensor padded (the last
     * one too), the data section aligned, offsets relative to it. */
    size_t size;
    uint8_t *img = slurp(path, &size);
    uint64_t data_bytes = 0;
    for (int i = 0; i < N_MIXED; i++) data_bytes += (spec_bytes(&mixed[i]) + alignment - 1) / alignment * alignment;
    uint64_t data_start = size - data_bytes;
    cr_assert_eq(data_start % alignment, 0);
    for (int i = 0; i < N_MIXED; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        cr_assert_eq(memcmp(img + data_start + t->offset, t->data, t->nbytes), 0, "%s", t->name);
    }
    free(img);
    gguf_close(g);
}

Test(gguf, roundtrip_default_alignment) { roundtrip(32); }
Test(gguf, roundtrip_alignment_64) { roundtrip(64); }

Test(gguf, format_values)
{
    const char *path = tmp_path("fmt.gguf");
    char err[256];
    gguf_writer *w = writer_at(path);
    set_every_type(w);
    write_tensors(w, NULL, 0);
    gguf_file *g;
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), 0, "%s", err);
    check_format(g, "general.architecture", "\"qwen4exp\"");
    check_format(g, "v.i8", "-100");
    check_format(g, "v.f32", "0.1");
    check_format(g, "v.f64", "1e+300");
    check_format(g, "v.bool", "true");
    check_format(g, "v.u64", "18446744073709551615");
    check_format(g, "a.u8", "[0, 1, 255]");
    check_format(g, "a.u32", "[1, 2, 3, ... ] (10 items)");
    check_format(g, "a.bool", "[true, false, true]");
    check_format(g, "a.str", "[\"alpha\", \"\", \"quote\\\"d\", \"ünïcode\", \"tab\\x09here\"]");
    check_format(g, "a.empty", "[]");
    char small[12];
    gguf_kv_format(g, gguf_find_key(g, "a.u32"), small, sizeof small);
    cr_assert_str_eq(small, "[1, 2, 3...", "cut output ends in ...");
    cr_assert_str_eq(gguf_vtype_name(GGUF_VT_STRING), "str");
    gguf_close(g);
}

/* ---------- writer misuse ---------- */

Test(gguf, writer_keeps_temp_name_until_finish)
{
    const char *path = tmp_path("w.gguf"), *tmp = tmp_path("w.gguf.tmp");
    gguf_writer *w = writer_at(path);
    static const struct spec one = {"x", QT_F32, 1, {4}};
    cr_assert_eq(gguf_w_add_tensor(w, one.name, one.type, one.n_dims, one.ne), 0);
    cr_assert_eq(gguf_w_write_header(w), 0);
    cr_assert(file_exists(tmp) && !file_exists(path));
    float v[4] = {1, 2, 3, 4};
    cr_assert_eq(gguf_w_write_data(w, v, sizeof v), 0);
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    cr_assert(!file_exists(tmp) && file_exists(path));
    gguf_writer_free(w);
    cr_assert(file_exists(path), "free of a finished writer keeps the file");
}

/* Opens a writer with one F32 [4] and one Q8_0 [32] tensor declared. */
static gguf_writer *two_tensor_writer(const char *path)
{
    gguf_writer *w = writer_at(path);
    cr_assert_eq(gguf_w_add_tensor(w, "a", QT_F32, 1, (int64_t[]){4}), 0);
    cr_assert_eq(gguf_w_add_tensor(w, "b", QT_Q8_0, 1, (int64_t[]){32}), 0);
    return w;
}

static void expect_writer_error(gguf_writer *w, int rc, const char *needle)
{
    cr_assert_lt(rc, 0, "expected an error about %s", needle);
    cr_assert(strstr(gguf_writer_error(w), needle), "message \"%s\" lacks \"%s\"", gguf_writer_error(w), needle);
    cr_assert_eq(gguf_w_set_u8(w, "later", 1), rc, "the first error sticks");
}

Test(gguf, writer_rejects_misuse)
{
    const char *path = tmp_path("bad.gguf"), *tmp = tmp_path("bad.gguf.tmp");
    gguf_writer *w = two_tensor_writer(path);
    cr_assert_eq(gguf_w_set_u8(w, "k", 1), 0);
    expect_writer_error(w, gguf_w_set_str(w, "k", "again"), "\"k\" set twice");
    gguf_writer_free(w);
    cr_assert(!file_exists(tmp) && !file_exists(path), "abandoned writer leaves no file");

    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_add_tensor(w, "a", QT_F32, 1, (int64_t[]){4}), "\"a\" declared twice");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_add_tensor(w, "c", QT_Q4_K, 2, (int64_t[]){128, 2}), "multiple of the q4_K block");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_add_tensor(w, "c", 99, 1, (int64_t[]){4}), "unknown tensor type 99");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_add_tensor(w, "c", QT_F32, 5, (int64_t[]){1, 1, 1, 1, 1}), "n_dims 5");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_set_u32(w, "general.alignment", 48), "power of two");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_set_u64(w, "general.alignment", 64), "must be u32");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_set_arr(w, "s", GGUF_VT_STRING, NULL, 0), "not numeric");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    expect_writer_error(w, gguf_w_write_data(w, "x", 1), "not allowed while declaring");
    gguf_writer_free(w);

    w = two_tensor_writer(path);
    cr_assert_eq(gguf_w_write_header(w), 0);
    expect_writer_error(w, gguf_w_write_data(w, (float[5]){0}, 20), "only 16 of its 16 bytes remain");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    cr_assert_eq(gguf_w_write_header(w), 0);
    expect_writer_error(w, gguf_w_add_tensor(w, "late", QT_F32, 1, (int64_t[]){4}), "not allowed while writing data");
    gguf_writer_free(w);
    w = two_tensor_writer(path);
    cr_assert_eq(gguf_w_write_header(w), 0);
    cr_assert_eq(gguf_w_write_data(w, (float[4]){0}, 16), 0);
    expect_writer_error(w, gguf_writer_finish(w), "tensor \"b\": 0 of 34 bytes written");
    cr_assert(file_exists(tmp) && !file_exists(path));
    gguf_writer_free(w);
    cr_assert(!file_exists(tmp) && !file_exists(path));

    char err[256];
    cr_assert_eq(gguf_writer_open(tmp_path("no/such/dir.gguf"), &w, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "no/such/dir.gguf.tmp"), "%s", err);
}

/* ---------- truncated and corrupt files ---------- */

/* Parses an exact-size copy (so that AddressSanitizer sees any overread) and
 * expects an error whose message holds both needles. */
static void expect_error(const uint8_t *img, size_t len, const char *needle1, const char *needle2)
{
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, img, len);
    char err[512] = "";
    gguf_file *g = NULL;
    int rc = gguf_open_mem(copy, len, &g, err, sizeof err);
    cr_assert_lt(rc, 0, "length %zu parsed (expected an error about %s)", len, needle1);
    cr_assert_null(g);
    cr_assert(strstr(err, needle1), "length %zu: message \"%s\" lacks \"%s\"", len, err, needle1);
    cr_assert(!needle2 || strstr(err, needle2), "length %zu: message \"%s\" lacks \"%s\"", len, err, needle2);
    free(copy);
}

Test(gguf, every_truncation_is_an_error)
{
    const char *path = tmp_path("cut.gguf");
    char err[512];
    gguf_writer *w = writer_at(path);
    set_every_type(w);
    /* The last tensor fills its padding exactly: a file cut inside padding
     * after the last tensor would still hold every byte of every tensor. */
    static const struct spec ts[] = {{"q", QT_Q8_0, 2, {32, 3}}, {"f", QT_F32, 2, {8, 2}}};
    write_tensors(w, ts, 2);
    size_t size;
    uint8_t *img = slurp(path, &size);
    gguf_file *g;
    cr_assert_eq(gguf_open_mem(img, size, &g, err, sizeof err), 0, "%s", err);
    gguf_close(g);
    for (size_t len = 0; len < size; len++) expect_error(img, len, "offset", NULL);
    /* Through the file path too: a cut file and an empty one. */
    spit(path, img, size - 1);
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), NB_EFORMAT);
    cr_assert(strstr(err, path) && strstr(err, "tensor 1 \"f\": data"), "%s", err);
    spit(path, img, 0);
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "empty file"), "%s", err);
    cr_assert_eq(gguf_open(tmp_path("missing.gguf"), &g, err, sizeof err), NB_ENOENT);
    cr_assert_eq(gguf_open(tmp_dir, &g, err, sizeof err), NB_EIO);
    cr_assert(strstr(err, "not a regular file"), "%s", err);
    free(img);
}

/* Byte layout of the corruption base file (its size is asserted):
 *   0 magic, 4 version, 8 n_tensors, 16 n_kv
 *   24 kv 0: key length, 32 "a", 33 type (str), 37 value length, 45 "hello"
 *   50 kv 1: key length, 58 "b", 59 type (arr), 63 element type, 67 length, 75 3 × u32
 *   87 tensor 0: name length, 95 "t0", 97 n_dims, 101 ne0, 109 type, 113 offset
 *   121 tensor 1: name length, 129 "t1", 131 n_dims, 135 ne0, 143 type, 147 offset
 *   155 padding; 160 data: t0 F32 [8] 32 bytes, 192 t1 Q8_0 [32] 34 bytes, padding to 256 */
static uint8_t *corrupt_base(size_t *size)
{
    const char *path = tmp_path("base.gguf");
    gguf_writer *w = writer_at(path);
    cr_assert_eq(gguf_w_set_str(w, "a", "hello"), 0);
    cr_assert_eq(gguf_w_set_arr(w, "b", GGUF_VT_UINT32, (uint32_t[]){1, 2, 3}, 3), 0);
    static const struct spec ts[] = {{"t0", QT_F32, 1, {8}}, {"t1", QT_Q8_0, 1, {32}}};
    write_tensors(w, ts, 2);
    uint8_t *img = slurp(path, size);
    cr_assert_eq(*size, 256, "layout drifted: update the offsets above");
    expect_error(img, 225, "tensor 1 \"t1\": data [offset 0xc0, 34 bytes] runs past end of file (size 0xe1)", NULL);
    return img;
}

static void patch(uint8_t *img, size_t at, uint64_t v, int bytes) { memcpy(img + at, &v, (size_t)bytes); }

/* Applies one patch to a fresh copy of the base and expects the error. */
static void expect_patch_error(size_t at, uint64_t v, int bytes, const char *needle1, const char *needle2)
{
    size_t size;
    uint8_t *img = corrupt_base(&size);
    patch(img, at, v, bytes);
    expect_error(img, size, needle1, needle2);
    free(img);
}

Test(gguf, corrupt_header)
{
    expect_patch_error(0, 'X', 1, "bad magic 58 47 55 46", NULL);
    expect_patch_error(4, 7, 4, "version 7", NULL);
    expect_patch_error(4, 1, 4, "GGUF version 1", "not supported");
    expect_patch_error(4, 0x03000000, 4, "big-endian", NULL);
    expect_patch_error(8, 1ull << 60, 8, "header: n_tensors 1152921504606846976 at offset 0x8 is impossible", NULL);
    expect_patch_error(16, UINT64_MAX, 8, "header: n_kv", "at offset 0x10");
}

Test(gguf, corrupt_key_values)
{
    expect_patch_error(24, 1ull << 62, 8, "kv 0: key length 4611686018427387904 at offset 0x18 runs past end", NULL);
    expect_patch_error(24, 0, 8, "kv 0: key at offset 0x18 is empty", NULL);
    expect_patch_error(37, 1ull << 62, 8, "kv 0 \"a\": string value length", "offset 0x25");
    expect_patch_error(67, 1ull << 61, 8, "kv 1 \"b\": array length 2305843009213693952 at offset 0x43 is impossible",
                       NULL);
    expect_patch_error(33, 99, 4, "kv 0 \"a\": value type 99 at offset 0x21 is not a GGUF type", NULL);
    expect_patch_error(63, GGUF_VT_ARRAY, 4, "kv 1 \"b\": nested array", NULL);
    expect_patch_error(63, 42, 4, "kv 1 \"b\": value type 42", NULL);
    expect_patch_error(58, 'a', 1, "kv 1 \"a\": key at offset 0x32 duplicates kv 0", NULL);
}

Test(gguf, corrupt_string_array)
{
    const char *path = tmp_path("strs.gguf");
    gguf_writer *w = writer_at(path);
    cr_assert_eq(gguf_w_set_arr_str(w, "s", (const char *[]){"ab", "cd", "ef"}, 3), 0);
    write_tensors(w, NULL, 0);
    size_t size;
    uint8_t *img = slurp(path, &size);
    /* kv 0: key length 24, "s" 32, type 33, element type 37, count 41,
     * element 0 length 49 and "ab" 57, element 1 length at 59 (0x3b) */
    patch(img, 59, 1ull << 40, 8);
    expect_error(img, size, "kv 0 \"s\": element 1: string value length 1099511627776 at offset 0x3b runs past end", NULL);
    patch(img, 41, 1ull << 59, 8);
    expect_error(img, size, "kv 0 \"s\": array length 576460752303423488 at offset 0x29 is impossible", NULL);
    free(img);
}

Test(gguf, corrupt_tensor_table)
{
    expect_patch_error(121, UINT64_MAX, 8, "tensor 1: name length", "offset 0x79");
    expect_patch_error(131, 5, 4, "tensor 1 \"t1\": n_dims 5 at offset 0x83 is not in 1..4", NULL);
    expect_patch_error(131, 0, 4, "n_dims 0", NULL);
    expect_patch_error(135, 33, 8, "tensor 1 \"t1\": ne[0] = 33 is not a multiple of the q8_0 block size 32",
                       "shape at offset 0x87");
    expect_patch_error(135, 0, 8, "ne[0] = 0 is not positive", NULL);
    expect_patch_error(135, (uint64_t)-32, 8, "ne[0] = -32 is not positive", NULL);
    expect_patch_error(101, 1ull << 62, 8, "tensor 0 \"t0\"", "overflow");
    expect_patch_error(143, 77, 4, "tensor 1 \"t1\": unknown tensor type 77", NULL);
    expect_patch_error(130, '0', 1, "tensor 1 \"t0\": name at offset 0x79 duplicates tensor 0", NULL);
}

Test(gguf, corrupt_tensor_data)
{
    expect_patch_error(147, 0x1000, 8, "tensor 1 \"t1\": data [offset 0x10a0, 34 bytes] runs past end of file", NULL);
    expect_patch_error(147, UINT64_MAX - 31, 8, "tensor 1 \"t1\": data", "runs past end of file");
    expect_patch_error(147, 33, 8, "tensor 1 \"t1\": data offset 0x21 (at offset 0x93) is not a multiple of the alignment 32",
                       NULL);
    expect_patch_error(147, 0, 8, "tensor \"t1\": data [+0x0, 34 bytes] overlaps tensor \"t0\" [+0x0, 32 bytes]", NULL);
    expect_patch_error(8, 3, 8, "tensor 2: name length", NULL); /* a third entry read from the padding */
}

Test(gguf, corrupt_alignment)
{
    const char *path = tmp_path("al.gguf");
    gguf_writer *w = writer_at(path);
    cr_assert_eq(gguf_w_set_u32(w, "general.alignment", 64), 0);
    write_tensors(w, (struct spec[]){{"t", QT_F32, 1, {16}}}, 1);
    size_t size;
    uint8_t *img = slurp(path, &size);
    /* kv 0: key length at 24, "general.alignment" at 32, type at 49, value at 53 */
    patch(img, 53, 48, 4);
    expect_error(img, size, "kv \"general.alignment\": alignment 48 is not a power of two", NULL);
    patch(img, 49, GGUF_VT_FLOAT32, 4);
    expect_error(img, size, "general.alignment", "not an integer");
    free(img);
}

Test(gguf, version_2_is_read)
{
    size_t size;
    uint8_t *img = corrupt_base(&size);
    patch(img, 4, 2, 4);
    char err[256];
    gguf_file *g;
    cr_assert_eq(gguf_open_mem(img, size, &g, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_version(g), 2);
    cr_assert_eq(gguf_tensor_count(g), 2);
    gguf_close(g);
    free(img);
}
