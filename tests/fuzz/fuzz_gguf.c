/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Any input either fails with a message or opens; an opened file must then
 * answer every question without touching a byte outside the input: each
 * key/value is formatted (into a roomy and a tiny buffer) and read through
 * every getter, each tensor's first and last data byte is read, and every
 * name must find itself.  libFuzzer hands us an exact-size heap copy, so
 * AddressSanitizer sees any overread. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"

static void walk_kv(const gguf_file *g, int64_t i)
{
    char big[512], tiny[6], err[256];
    const char *key = gguf_kv_key(g, i);
    if (!key || gguf_find_key(g, key) != i) abort();
    gguf_kv_format(g, i, big, sizeof big);
    gguf_kv_format(g, i, tiny, sizeof tiny);
    if (strlen(big) >= sizeof big || strlen(tiny) >= sizeof tiny) abort();
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    float f;
    bool b;
    const char *s;
    gguf_get_u64(g, key, &u64, err, sizeof err);
    gguf_get_i64(g, key, &i64, err, sizeof err);
    gguf_get_u32(g, key, &u32, err, sizeof err);
    gguf_get_f32(g, key, &f, err, sizeof err);
    gguf_get_bool(g, key, &b, err, sizeof err);
    if (gguf_get_str(g, key, &s, err, sizeof err) == 0) (void)strlen(s);
    uint64_t n = gguf_kv_arr_len(g, i);
    uint64_t probe[3] = {0, n ? n - 1 : 0, n};
    for (int k = 0; k < 3; k++) {
        gguf_get_arr_i64(g, key, probe[k], &i64, err, sizeof err);
        gguf_get_arr_f32(g, key, probe[k], &f, err, sizeof err);
        if (gguf_get_arr_str(g, key, probe[k], &s, err, sizeof err) == 0) (void)strlen(s);
    }
    enum gguf_vtype t;
    const void *data;
    uint64_t count;
    if (gguf_get_arr_data(g, key, &t, &data, &count, err, sizeof err) == 0 && count) {
        size_t bytes = count * gguf_vtype_size(t);
        volatile uint8_t sink = ((const uint8_t *)data)[0] ^ ((const uint8_t *)data)[bytes - 1];
        (void)sink;
    }
}

static void walk_tensor(const gguf_file *g, int64_t i)
{
    const struct gguf_tensor *t = gguf_tensor_at(g, i);
    if (!t || gguf_find_tensor(g, t->name) != t || t->nbytes == 0) abort();
    const uint8_t *p = t->data;
    volatile uint8_t sink = p[0] ^ p[t->nbytes - 1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    gguf_file *g;
    if (gguf_open_mem(data, size, &g, err, sizeof err) != 0) {
        if (!err[0]) abort(); /* every error explains itself */
        return 0;
    }
    for (int64_t i = 0; i < gguf_kv_count(g); i++) walk_kv(g, i);
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) walk_tensor(g, i);
    (void)gguf_version(g), (void)gguf_alignment(g), (void)gguf_shard_count(g);
    gguf_close(g);
    return 0;
}
