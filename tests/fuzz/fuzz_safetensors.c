/* fuzz_safetensors.c — libFuzzer target for the safetensors reader.
 *
 * Any input either fails with a message or opens; an opened set must then
 * find every tensor by name, keep them sorted, and convert a few elements at
 * each end of every tensor (reads that the header checks promised are in
 * bounds; AddressSanitizer watches the exact-size input). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors/safetensors.h"

static void walk_tensor(const st_set *s, int64_t i)
{
    const struct st_tensor *t = st_at(s, i);
    if (!t || st_find(s, t->name) != t) abort();
    if (i > 0 && strcmp(st_at(s, i - 1)->name, t->name) >= 0) abort();
    int64_t numel = st_numel(t);
    if ((uint64_t)numel * st_dtype_size(t->dtype) != t->nbytes) abort();
    float f[4];
    double d[4];
    char err[256];
    int64_t n = numel < 4 ? numel : 4;
    st_read_f32(t, 0, n, f, err, sizeof err);
    st_read_f64(t, numel - n, n, d, err, sizeof err);
    if (st_read_f32(t, numel, 1, f, err, sizeof err) == 0) abort(); /* one past the end */
    if (t->nbytes) {
        const uint8_t *p = t->data;
        volatile uint8_t sink = p[0] ^ p[t->nbytes - 1];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    st_set *s;
    if (st_open_mem(data, size, &s, err, sizeof err) != 0) {
        if (!err[0]) abort();
        return 0;
    }
    for (int64_t i = 0; i < st_count(s); i++) walk_tensor(s, i);
    const char *v = st_metadata(s, "format");
    if (v) (void)strlen(v);
    st_close(s);
    return 0;
}
