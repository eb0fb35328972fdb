/* test_gguf_split.c — split GGUF models (gguf-split's `NAME-NNNNN-of-MMMMM.gguf`):
 * opened from any shard as one file, and the ways a set can be broken. */
#include <criterion/criterion.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/util/err.h"
#include "tests/core/tmpfiles.h"

TestSuite(gguf_split, .init = tmp_setup, .fini = tmp_teardown);

static const struct {
    const char *name;
    uint32_t type;
    int64_t ne0, ne1;
} model[] = {
    {"token_embd.weight", QT_F32, 8, 4}, {"blk.0.attn_q.weight", QT_Q8_0, 32, 2}, {"blk.0.attn_norm.weight", QT_F16, 16, 1},
    {"blk.1.ffn_up.weight", QT_Q4_K, 256, 1}, {"output.weight", QT_F32, 8, 2},
};
enum { N_MODEL = sizeof model / sizeof model[0] };

static uint8_t pattern(int tensor, uint64_t i) { return (uint8_t)(i * 29u + (unsigned)tensor * 101u + 3u); }

static uint64_t model_bytes(int i)
{
    return quant_row_size(model[i].type, model[i].ne0) * (uint64_t)model[i].ne1;
}

/* Writes one shard holding model tensors [first, first + n), with the split
 * keys given (a negative value leaves that key out). */
static void write_shard(const char *name, int split_no, int split_count, int tensors_total, int first, int n)
{
    char err[256];
    gguf_writer *w;
    cr_assert_eq(gguf_writer_open(tmp_path(name), &w, err, sizeof err), 0, "%s", err);
    if (split_no == 0) cr_assert_eq(gguf_w_set_str(w, "general.architecture", "qwen4exp"), 0);
    if (split_no >= 0) cr_assert_eq(gguf_w_set_u16(w, "split.no", (uint16_t)split_no), 0);
    if (split_count >= 0) cr_assert_eq(gguf_w_set_u16(w, "split.count", (uint16_t)split_count), 0);
    if (tensors_total >= 0) cr_assert_eq(gguf_w_set_i32(w, "split.tensors.count", tensors_total), 0);
    for (int i = first; i < first + n; i++)
        cr_assert_eq(gguf_w_add_tensor(w, model[i].name, model[i].type, 2, (int64_t[]){model[i].ne0, model[i].ne1}), 0);
    cr_assert_eq(gguf_w_write_header(w), 0, "%s", gguf_writer_error(w));
    for (int i = first; i < first + n; i++) {
        uint64_t bytes = model_bytes(i);
        uint8_t *buf = malloc(bytes);
        for (uint64_t j = 0; j < bytes; j++) buf[j] = pattern(i, j);
        cr_assert_eq(gguf_w_write_data(w, buf, bytes), 0, "%s", gguf_writer_error(w));
        free(buf);
    }
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    gguf_writer_free(w);
}

/* The model as 3 shards of 2, 1 and 2 tensors. */
static void write_set(void)
{
    write_shard("m-00001-of-00003.gguf", 0, 3, N_MODEL, 0, 2);
    write_shard("m-00002-of-00003.gguf", 1, 3, N_MODEL, 2, 1);
    write_shard("m-00003-of-00003.gguf", 2, 3, N_MODEL, 3, 2);
}

static void check_set(const char *shard)
{
    char err[512];
    gguf_file *g;
    cr_assert_eq(gguf_open(tmp_path(shard), &g, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_shard_count(g), 3);
    cr_assert_eq(gguf_kv_count(g), 4, "the key/values of shard 1");
    const char *arch;
    cr_assert_eq(gguf_get_str(g, "general.architecture", &arch, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(arch, "qwen4exp");
    cr_assert_eq(gguf_tensor_count(g), N_MODEL);
    static const int shard_of[N_MODEL] = {0, 0, 1, 2, 2};
    for (int i = 0; i < N_MODEL; i++) {
        const struct gguf_tensor *t = gguf_find_tensor(g, model[i].name);
        cr_assert(t, "%s", model[i].name);
        cr_assert_eq(t, gguf_tensor_at(g, i), "shard order, then file order");
        cr_assert_eq(t->shard, shard_of[i], "%s", t->name);
        cr_assert_eq(t->nbytes, model_bytes(i));
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->nbytes; j++) cr_assert_eq(p[j], pattern(i, j), "%s byte %lu", t->name, j);
    }
    gguf_close(g);
}

Test(gguf_split, opens_from_any_shard)
{
    write_set();
    check_set("m-00001-of-00003.gguf");
    check_set("m-00002-of-00003.gguf");
    check_set("m-00003-of-00003.gguf");
}

static void expect_open_error(const char *shard, int code, const char *needle1, const char *needle2)
{
    char err[512] = "";
    gguf_file *g = NULL;
    int rc = gguf_open(tmp_path(shard), &g, err, sizeof err);
    cr_assert_eq(rc, code, "rc %d, message \"%s\"", rc, err);
    cr_assert_null(g);
    cr_assert(strstr(err, needle1), "message \"%s\" lacks \"%s\"", err, needle1);
    cr_assert(!needle2 || strstr(err, needle2), "message \"%s\" lacks \"%s\"", err, needle2);
}

Test(gguf_split, missing_shard)
{
    write_set();
    cr_assert_eq(remove(tmp_path("m-00003-of-00003.gguf")), 0);
    expect_open_error("m-00002-of-00003.gguf", NB_ENOENT, "split model: shard 3 of 3 is missing", "m-00003-of-00003.gguf");
}

Test(gguf_split, inconsistent_split_count)
{
    write_set();
    write_shard("m-00002-of-00003.gguf", 1, 4, N_MODEL, 2, 1);
    expect_open_error("m-00001-of-00003.gguf", NB_EFORMAT, "m-00002-of-00003.gguf: split model: split.count is 4, expected 3",
                      NULL);
}

Test(gguf_split, wrong_split_no)
{
    write_set();
    write_shard("m-00003-of-00003.gguf", 1, 3, N_MODEL, 3, 2);
    expect_open_error("m-00001-of-00003.gguf", NB_EFORMAT, "m-00003-of-00003.gguf: split model: split.no is 1, expected 2",
                      NULL);
}

Test(gguf_split, missing_split_key)
{
    write_set();
    write_shard("m-00002-of-00003.gguf", -1, 3, N_MODEL, 2, 1);
    expect_open_error("m-00001-of-00003.gguf", NB_ENOENT, "m-00002-of-00003.gguf: split model: key \"split.no\" not found",
                      NULL);
}

Test(gguf_split, wrong_tensor_total)
{
    write_set();
    write_shard("m-00001-of-00003.gguf", 0, 3, N_MODEL + 1, 0, 2);
    expect_open_error("m-00003-of-00003.gguf", NB_EFORMAT, "split.tensors.count is 6, expected 5", NULL);
}

Test(gguf_split, tensor_in_two_shards)
{
    write_set();
    write_shard("m-00003-of-00003.gguf", 2, 3, N_MODEL, 1, 2); /* repeats blk.0.attn_q.weight */
    expect_open_error("m-00001-of-00003.gguf", NB_EFORMAT,
                      "split model: tensor \"blk.0.attn_q.weight\" is in shard 1 and shard 3", NULL);
}

Test(gguf_split, corrupt_shard_names_its_file)
{
    write_set();
    spit(tmp_path("m-00002-of-00003.gguf"), "GGUF\3\0\0\0", 8);
    expect_open_error("m-00003-of-00003.gguf", NB_EFORMAT, "m-00002-of-00003.gguf: header: n_tensors at offset 0x8", NULL);
}

Test(gguf_split, renamed_shard_is_refused)
{
    write_set();
    cr_assert_eq(rename(tmp_path("m-00001-of-00003.gguf"), tmp_path("renamed.gguf")), 0);
    expect_open_error("renamed.gguf", NB_EINVAL, "shard of a 3-file split model", NULL);
}

Test(gguf_split, single_file_set)
{
    write_shard("one-00001-of-00001.gguf", -1, -1, -1, 0, N_MODEL);
    char err[256];
    gguf_file *g;
    cr_assert_eq(gguf_open(tmp_path("one-00001-of-00001.gguf"), &g, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_shard_count(g), 1);
    cr_assert_eq(gguf_tensor_count(g), N_MODEL);
    gguf_close(g);
}
