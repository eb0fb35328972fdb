/* test_safetensors.c — safetensors files and sharded directories: every dtype
 * converted (bf16/f16 bit patterns checked), lookups, and the malformed
 * headers, offsets and index files that must be refused with a message. */
#include <criterion/criterion.h>
#include <math.h>
#include <sys/stat.h>

#include "core/safetensors/safetensors.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

TestSuite(safetensors, .init = tmp_setup, .fini = tmp_teardown);

struct st_spec {
    const char *name, *dtype, *shape; /* shape as JSON, e.g. "[2, 3]" */
    size_t nbytes;
    const void *data;
};

/* Builds a shard image: 8-byte header length, the JSON header padded with
 * spaces to a multiple of 8 (as the reference writer does), the data. */
static uint8_t *build_raw(const char *header, const void *data, size_t data_len, size_t *len)
{
    size_t h = strlen(header), padded = (h + 7) / 8 * 8;
    *len = 8 + padded + data_len;
    uint8_t *img = malloc(*len);
    uint64_t h64 = padded;
    memcpy(img, &h64, 8);
    memcpy(img + 8, header, h);
    memset(img + 8 + h, ' ', padded - h);
    if (data_len) memcpy(img + 8 + padded, data, data_len);
    return img;
}

static uint8_t *build_st(const struct st_spec *ts, int n, const char *metadata, size_t *len)
{
    char header[4096];
    size_t at = 0, off = 0;
    uint8_t data[1024];
    at += (size_t)snprintf(header + at, sizeof header - at, "{");
    if (metadata) at += (size_t)snprintf(header + at, sizeof header - at, "\"__metadata__\": %s, ", metadata);
    for (int i = 0; i < n; i++) {
        at += (size_t)snprintf(header + at, sizeof header - at,
                               "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}", i ? ", " : "",
                               ts[i].name, ts[i].dtype, ts[i].shape, off, off + ts[i].nbytes);
        cr_assert_leq(off + ts[i].nbytes, sizeof data);
        memcpy(data + off, ts[i].data, ts[i].nbytes);
        off += ts[i].nbytes;
    }
    snprintf(header + at, sizeof header - at, "}");
    return build_raw(header, data, off, len);
}

static void write_st(const char *path, const struct st_spec *ts, int n, const char *metadata)
{
    size_t len;
    uint8_t *img = build_st(ts, n, metadata, &len);
    spit(path, img, len);
    free(img);
}

/* Values and their encodings in each dtype. */
static const float f32s[6] = {1, -2, 0.5f, 3.25f, 1e-3f, -1e6f};
static const uint16_t f16s[4] = {0x3c00, 0xc000, 0x3800, 0x7bff}; /* 1, -2, 0.5, 65504 */
static const uint16_t bf16s[3] = {0x3f80, 0xc060, 0x4049};        /* 1, -3.5, 3.140625 */
static const double f64s[2] = {0.1, -1e300};
static const int64_t i64s[2] = {-5, 1ll << 40};
static const int32_t i32s[2] = {-70000, 70000};
static const int16_t i16s[2] = {-300, 300};
static const int8_t i8s[3] = {-128, 0, 127};
static const uint8_t u8s[3] = {0, 7, 255};
static const uint8_t bools[2] = {1, 0};

/* u8 first, so that every later tensor sits at an odd offset. */
static const struct st_spec every_dtype[] = {
    {"u8", "U8", "[3]", 3, u8s},         {"f32", "F32", "[2, 3]", 24, f32s}, {"f16", "F16", "[4]", 8, f16s},
    {"bf16", "BF16", "[3]", 6, bf16s},   {"f64", "F64", "[2]", 16, f64s},    {"i64", "I64", "[2]", 16, i64s},
    {"i32", "I32", "[2]", 8, i32s},      {"i16", "I16", "[2]", 4, i16s},     {"i8", "I8", "[3]", 3, i8s},
    {"bool", "BOOL", "[2]", 2, bools},   {"scalar", "F32", "[]", 4, f32s},   {"empty", "F32", "[0, 4]", 0, f32s},
};
enum { N_EVERY = sizeof every_dtype / sizeof every_dtype[0] };

static void expect_f64(const st_set *s, const char *name, int n, const double *want)
{
    const struct st_tensor *t = st_find(s, name);
    cr_assert(t, "%s", name);
    cr_assert_eq(st_numel(t), n, "%s", name);
    double got[8];
    float got32[8];
    char err[256];
    cr_assert_eq(st_read_f64(t, 0, n, got, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_read_f32(t, 0, n, got32, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(got[i], want[i], "%s[%d]: %g != %g", name, i, got[i], want[i]);
        cr_assert_eq(got32[i], (float)want[i], "%s[%d] as float", name, i);
    }
}

static void check_every_dtype(const st_set *s)
{
    cr_assert_eq(st_count(s), N_EVERY);
    for (int64_t i = 1; i < st_count(s); i++) cr_assert_lt(strcmp(st_at(s, i - 1)->name, st_at(s, i)->name), 0, "sorted");
    cr_assert_null(st_at(s, N_EVERY));
    cr_assert_null(st_find(s, "nope"));
    const struct st_tensor *t = st_find(s, "f32");
    cr_assert(t->dtype == ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 24);
    expect_f64(s, "f32", 6, (double[]){1, -2, 0.5, 3.25, (double)1e-3f, -1e6});
    expect_f64(s, "f16", 4, (double[]){1, -2, 0.5, 65504});
    expect_f64(s, "bf16", 3, (double[]){1, -3.5, 3.140625});
    expect_f64(s, "f64", 2, (double[]){0.1, -1e300});
    expect_f64(s, "i64", 2, (double[]){-5, 1099511627776.0});
    expect_f64(s, "i32", 2, (double[]){-70000, 70000});
    expect_f64(s, "i16", 2, (double[]){-300, 300});
    expect_f64(s, "i8", 3, (double[]){-128, 0, 127});
    expect_f64(s, "u8", 3, (double[]){0, 7, 255});
    expect_f64(s, "scalar", 1, (double[]){1});
    cr_assert_eq(st_find(s, "scalar")->n_dims, 0);
    cr_assert_eq(st_numel(st_find(s, "empty")), 0);

    char err[256];
    float part[2];
    cr_assert_eq(st_read_f32(st_find(s, "bf16"), 1, 2, part, err, sizeof err), 0);
    cr_assert(part[0] == -3.5f && part[1] == 3.140625f);
    cr_assert_eq(st_read_f32(st_find(s, "bf16"), 2, 2, part, err, sizeof err), NB_EINVAL);
    cr_assert(strstr(err, "bf16"), "%s", err);
    cr_assert_eq(st_read_f32(st_find(s, "bf16"), -1, 1, part, err, sizeof err), NB_EINVAL);
    cr_assert_eq(st_read_f32(st_find(s, "bool"), 0, 1, part, err, sizeof err), NB_ENOTSUP);
    cr_assert(st_find(s, "bool")->dtype == ST_BOOL && memcmp(st_find(s, "bool")->data, bools, 2) == 0);
    cr_assert_str_eq(st_dtype_name(ST_BF16), "BF16");
    cr_assert_eq(st_dtype_size(ST_F64), 8);
}

Test(safetensors, single_file_every_dtype)
{
    const char *path = tmp_path("model.safetensors");
    write_st(path, every_dtype, N_EVERY, "{\"format\": \"pt\", \"note\": \"x\"}");
    char err[256];
    st_set *s;
    cr_assert_eq(st_open(path, &s, err, sizeof err), 0, "%s", err);
    check_every_dtype(s);
    cr_assert_str_eq(st_metadata(s, "format"), "pt");
    cr_assert_null(st_metadata(s, "missing"));
    st_close(s);
    /* The directory holding it opens the same, and lookups work although the
     * file lists its tensors out of name order ("u8" before "f32"). */
    cr_assert_eq(st_open(tmp_dir, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(s), N_EVERY);
    check_every_dtype(s);
    st_close(s);
}

static const float w0[4] = {1, 2, 3, 4}, w1[2] = {5, 6}, w2[2] = {7, 8};

/* Two shards and an index; `index_map` is the weight_map JSON. */
static void write_sharded(const char *index_map)
{
    write_st(tmp_path("model-00001-of-00002.safetensors"),
             (struct st_spec[]){{"a.weight", "F32", "[2, 2]", 16, w0}, {"b.weight", "F32", "[2]", 8, w1}}, 2,
             "{\"format\": \"pt\"}");
    write_st(tmp_path("model-00002-of-00002.safetensors"), (struct st_spec[]){{"c.weight", "F32", "[2]", 8, w2}}, 1,
             "{\"format\": \"np\", \"extra\": \"yes\"}");
    char json[1024];
    snprintf(json, sizeof json, "{\"metadata\": {\"total_size\": 32}, \"weight_map\": %s}", index_map);
    spit(tmp_path("model.safetensors.index.json"), json, strlen(json));
}

static const char good_map[] = "{\"a.weight\": \"model-00001-of-00002.safetensors\", "
                               "\"c.weight\": \"model-00002-of-00002.safetensors\", "
                               "\"b.weight\": \"model-00001-of-00002.safetensors\"}";

Test(safetensors, sharded_directory)
{
    write_sharded(good_map);
    char err[256];
    st_set *s;
    cr_assert_eq(st_open(tmp_dir, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(s), 3);
    static const char *names[] = {"a.weight", "b.weight", "c.weight"};
    for (int i = 0; i < 3; i++) cr_assert_str_eq(st_at(s, i)->name, names[i]);
    float v[4];
    cr_assert_eq(st_read_f32(st_find(s, "a.weight"), 0, 4, v, err, sizeof err), 0);
    cr_assert(memcmp(v, w0, 16) == 0);
    cr_assert_eq(st_read_f32(st_find(s, "c.weight"), 0, 2, v, err, sizeof err), 0);
    cr_assert(v[0] == 7 && v[1] == 8);
    cr_assert_str_eq(st_metadata(s, "format"), "pt", "the first shard's value wins");
    cr_assert_str_eq(st_metadata(s, "extra"), "yes");
    st_close(s);
}

static void expect_open_error(const char *path, int code, const char *needle1, const char *needle2)
{
    char err[512] = "";
    st_set *s = NULL;
    int rc = st_open(path, &s, err, sizeof err);
    cr_assert_eq(rc, code, "rc %d: %s", rc, err);
    cr_assert_null(s);
    cr_assert(strstr(err, needle1), "message \"%s\" lacks \"%s\"", err, needle1);
    cr_assert(!needle2 || strstr(err, needle2), "message \"%s\" lacks \"%s\"", err, needle2);
}

Test(safetensors, index_errors)
{
    write_sharded("{\"a.weight\": \"../model-00001-of-00002.safetensors\"}");
    expect_open_error(tmp_dir, NB_EFORMAT, "tensor \"a.weight\": shard name is not a plain file name", NULL);
    write_sharded("{\"a.weight\": \"/etc/passwd\"}");
    expect_open_error(tmp_dir, NB_EFORMAT, "not a plain file name", NULL);
    write_sharded("{\"a.weight\": \"sub/x.safetensors\"}");
    expect_open_error(tmp_dir, NB_EFORMAT, "not a plain file name", NULL);
    write_sharded("{\"a.weight\": 3}");
    expect_open_error(tmp_dir, NB_EFORMAT, "not a plain file name", NULL);
    write_sharded("{\"a.weight\": \"model-00003-of-00002.safetensors\"}");
    expect_open_error(tmp_dir, NB_ENOENT, "model-00003-of-00002.safetensors", "No such file");
    write_sharded("{\"c.weight\": \"model-00001-of-00002.safetensors\", \"x\": \"model-00002-of-00002.safetensors\"}");
    expect_open_error(tmp_dir, NB_EFORMAT, "tensor \"c.weight\" is mapped to model-00001-of-00002.safetensors",
                      "found in another shard");
    write_sharded("{\"zz\": \"model-00001-of-00002.safetensors\"}");
    expect_open_error(tmp_dir, NB_EFORMAT, "tensor \"zz\"", "no shard holds it");
    write_sharded("[1, 2");
    expect_open_error(tmp_dir, NB_EFORMAT, "model.safetensors.index.json: not valid JSON", NULL);
    write_sharded("[]");
    expect_open_error(tmp_dir, NB_EFORMAT, "no \"weight_map\" object", NULL);
    /* The same tensor in two shards. */
    write_sharded(good_map);
    write_st(tmp_path("model-00002-of-00002.safetensors"), (struct st_spec[]){{"a.weight", "F32", "[2]", 8, w2}}, 1, NULL);
    expect_open_error(tmp_dir, NB_EFORMAT, "tensor \"a.weight\" is in two shards", "model-00002-of-00002.safetensors");

    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty", tmp_dir);
    cr_assert_eq(mkdir(empty, 0700), 0);
    expect_open_error(empty, NB_ENOENT, "neither model.safetensors.index.json nor model.safetensors", NULL);
    expect_open_error(tmp_path("nothing.safetensors"), NB_ENOENT, "nothing.safetensors", NULL);
}

/* ---------- malformed shards (in memory, exact-size copies) ---------- */

static void expect_mem_error(const uint8_t *img, size_t len, int code, const char *needle)
{
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, img, len);
    char err[512] = "";
    st_set *s = NULL;
    int rc = st_open_mem(copy, len, &s, err, sizeof err);
    cr_assert_eq(rc, code, "rc %d: %s (expected %s)", rc, err, needle);
    cr_assert_null(s);
    cr_assert(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    free(copy);
}

static void expect_header_error(const char *header, size_t data_len, int code, const char *needle)
{
    static const uint8_t zeros[64];
    size_t len;
    uint8_t *img = build_raw(header, zeros, data_len, &len);
    expect_mem_error(img, len, code, needle);
    free(img);
}

Test(safetensors, bad_header_length)
{
    uint8_t img[16] = {0};
    expect_mem_error(img, 7, NB_EFORMAT, "header length: file is 7 bytes, needs at least 8");
    uint64_t h = 100000001;
    memcpy(img, &h, 8);
    expect_mem_error(img, 16, NB_EFORMAT, "header length 100000001 exceeds the 100000000-byte limit");
    h = UINT64_MAX;
    memcpy(img, &h, 8);
    expect_mem_error(img, 16, NB_EFORMAT, "exceeds");
    h = 9;
    memcpy(img, &h, 8);
    expect_mem_error(img, 16, NB_EFORMAT, "header length 9 runs past end of file (16 bytes)");
}

Test(safetensors, bad_json)
{
    expect_header_error("{\"a\": {\"dtype\": \"F32\", ", 0, NB_EFORMAT, "JSON header is not a valid object");
    expect_header_error("[1, 2]", 0, NB_EFORMAT, "JSON header is not a valid object");
    expect_header_error("", 0, NB_EFORMAT, "JSON header is not a valid object");
    expect_header_error("{\"a\": 3}", 0, NB_EFORMAT, "tensor \"a\": not a JSON object");
    expect_header_error("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, NB_EFORMAT, "\"dtype\" missing");
    expect_header_error("{\"a\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, NB_ENOTSUP,
                        "dtype \"F8_E4M3\" is not supported");
    expect_header_error("{\"__metadata__\": {\"k\": 1}}", 0, NB_EFORMAT, "__metadata__ \"k\" is not a string");
    expect_header_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
                        " \"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}",
                        2, NB_EFORMAT, "tensor \"a\" appears twice");
}

Test(safetensors, bad_shapes_and_offsets)
{
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, NB_EFORMAT,
                        "tensor \"a\": shape[0] is not a whole number");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, NB_EFORMAT,
                        "shape[0] is not a whole number");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": \"4\", \"data_offsets\": [0, 4]}}", 4, NB_EFORMAT,
                        "\"shape\" missing or not an array");
    expect_header_error("{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1,
                        NB_ENOTSUP, "9 dims, at most 8");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [4503599627370496, 4503599627370496], "
                        "\"data_offsets\": [0, 4]}}",
                        4, NB_EFORMAT, "tensor \"a\": element count x dtype size overflows");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, NB_EFORMAT,
                        "tensor \"a\": data_offsets [4, 0] outside the data (4 bytes)");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 4, NB_EFORMAT,
                        "data_offsets [4, 8] outside the data (4 bytes)");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8, NB_EFORMAT,
                        "tensor \"a\": data_offsets span 4 bytes but F32 x shape needs 8");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, NB_EFORMAT,
                        "\"data_offsets\" is not two whole numbers");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4, NB_EFORMAT,
                        "\"data_offsets\" is not two whole numbers");
    expect_header_error("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e300]}}", 4, NB_EFORMAT,
                        "\"data_offsets\" is not two whole numbers");
}

Test(safetensors, every_truncation_is_an_error)
{
    size_t len;
    uint8_t *img = build_st(every_dtype, N_EVERY, "{\"format\": \"pt\"}", &len);
    char err[256];
    st_set *s;
    cr_assert_eq(st_open_mem(img, len, &s, err, sizeof err), 0, "%s", err);
    check_every_dtype(s);
    st_close(s);
    /* The last tensor is 4 bytes of "scalar" or 0 of "empty": every cut
     * shortens either the header or some tensor's data. */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, img, cut);
        s = NULL;
        cr_assert_lt(st_open_mem(copy, cut, &s, err, sizeof err), 0, "length %zu of %zu parsed", cut, len);
        cr_assert(strstr(err, "header length") || strstr(err, "outside the data"), "length %zu: %s", cut, err);
        free(copy);
    }
    free(img);
}
