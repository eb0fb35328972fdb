/* model_fixture.h — the transformers fixtures (tests/fixtures/NAME) as the
 * model and backend suites use them: the checkpoint converted to an f32 GGUF
 * on first use, the reference outputs read into memory, and a GGUF copier
 * that edits on the way (drop or replace a key, drop, rename, reshape or
 * retype a tensor) to make broken or re-typed variants of a good file.
 *
 * fixture_gguf_gdn_dims (fixture_gguf_edited) makes a synthetic (random-weight) model of a
 * fixture's shapes with other GDN head sizes, for dk ≠ dv.
 *
 * The GGUF lives in build/fixtures/NAME-TYPE.gguf and is remade when the
 * converter binary is newer than it.  Criterion runs tests in parallel
 * processes, so a conversion writes a file of its own and renames it into
 * place (the last writer wins; every writer writes the same bytes).
 * Paths are relative to the repository root, where the tests run. */
#ifndef NB_TEST_MODEL_FIXTURE_H
#define NB_TEST_MODEL_FIXTURE_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"

#define FIXTURE_CONVERTER "build/bin/nebula-convert"

static inline void *fixture_read(const char *name, const char *file, size_t *bytes)
{
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s/%s", name, file);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len + 1 : 1);
    cr_assert(buf && fread(buf, 1, (size_t)len, f) == (size_t)len, "read %s", path);
    fclose(f);
    ((char *)buf)[len > 0 ? len : 0] = 0;
    *bytes = (size_t)len;
    return buf;
}

/* build/fixtures/STEM.gguf made by `nebula-convert SRC OUT OPTS` (SRC a
 * checkpoint folder or "--synthetic CONFIG"), remade when the converter is
 * newer than it. */
static inline const char *fixture_converted(const char *stem, const char *src, const char *opts)
{
    static char bufs[4][256];
    static int next;
    char *path = bufs[next++ & 3];
    snprintf(path, sizeof bufs[0], "build/fixtures/%s.gguf", stem);
    struct stat conv, out;
    cr_assert(stat(FIXTURE_CONVERTER, &conv) == 0, "%s is not built (make)", FIXTURE_CONVERTER);
    if (stat(path, &out) == 0 && out.st_mtime >= conv.st_mtime) return path;
    char tmp[300], cmd[1024];
    snprintf(tmp, sizeof tmp, "build/fixtures/%s.%d.gguf", stem, (int)getpid());
    /* stems may be paths (sweep/sweep-101-f32): the GGUF's folder is made first */
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname %s)\" && %s %s %s %s -q --threads 1", path, FIXTURE_CONVERTER, src, tmp,
             opts);
    cr_assert(system(cmd) == 0, "conversion failed: %s", cmd);
    cr_assert(rename(tmp, path) == 0, "rename %s", tmp);
    return path;
}

static inline const char *fixture_gguf_typed(const char *name, const char *type)
{
    char stem[128], src[160], opts[64];
    snprintf(stem, sizeof stem, "%s-%s", name, type);
    snprintf(src, sizeof src, "tests/fixtures/%s", name);
    snprintf(opts, sizeof opts, "--type %s", type);
    return fixture_converted(stem, src, opts);
}

/* A synthetic model (random weights, nebula-convert --synthetic) with the
 * shapes of fixture NAME's config.json but n integer fields replaced
 * (keys[i] = vals[i]), converted with OPTS; STEM names the GGUF (and its
 * config) under build/fixtures/.  Its vocabulary is the fixture's, so the
 * fixture's tokens.txt is a valid prompt. */
static inline const char *fixture_gguf_edited(const char *name, const char *stem, int n, const char *const keys[],
                                              const int vals[], const char *opts)
{
    char cfg[200], tmp[240], src[240];
    snprintf(cfg, sizeof cfg, "build/fixtures/%s.config.json", stem);
    snprintf(tmp, sizeof tmp, "%s.%d", cfg, (int)getpid());
    size_t len;
    char *text = fixture_read(name, "config.json", &len);
    cJSON *root = cJSON_Parse(text);
    cr_assert(root, "config.json of %s", name);
    for (int i = 0; i < n; i++) cJSON_ReplaceItemInObject(root, keys[i], cJSON_CreateNumber(vals[i]));
    char *out = cJSON_Print(root);
    cr_assert(system("mkdir -p build/fixtures") == 0);
    FILE *f = fopen(tmp, "w");
    cr_assert(f && fputs(out, f) >= 0 && fclose(f) == 0, "write %s", tmp);
    cr_assert(rename(tmp, cfg) == 0, "rename %s", tmp); /* parallel tests write the same bytes */
    free(out);
    cJSON_Delete(root);
    free(text);
    snprintf(src, sizeof src, "--synthetic %s", cfg);
    return fixture_converted(stem, src, opts);
}

/* The f32 synthetic model of NAME with GDN head sizes dk (keys, queries,
 * state rows) and dv (values, outputs, state columns): what the fixtures,
 * all dk = dv, cannot show. */
static inline const char *fixture_gguf_gdn_dims(const char *name, int dk, int dv)
{
    char stem[128];
    snprintf(stem, sizeof stem, "%s-dk%d-dv%d-synthetic-f32", name, dk, dv);
    static const char *const keys[] = {"linear_key_head_dim", "linear_value_head_dim"};
    const int vals[] = {dk, dv};
    return fixture_gguf_edited(name, stem, 2, keys, vals, "--type f32");
}

static inline const char *fixture_gguf(const char *name) { return fixture_gguf_typed(name, "f32"); }

/* Whitespace-separated integers of a text file (tokens.txt, greedy.txt). */
static inline int32_t *fixture_ints(const char *name, const char *file, int *n)
{
    size_t len;
    char *text = fixture_read(name, file, &len), *p = text, *end;
    int32_t *v = malloc((len / 2 + 1) * sizeof *v);
    *n = 0;
    for (long x; (x = strtol(p, &end, 10)), end != p; p = end) v[(*n)++] = (int32_t)x;
    free(text);
    return v;
}

/* float32 little-endian, row-major; *n = number of floats. */
static inline float *fixture_f32(const char *name, const char *file, size_t *n)
{
    size_t len;
    float *v = fixture_read(name, file, &len);
    *n = len / sizeof(float);
    return v;
}

/* manifest.json of the fixture, parsed (cJSON_Delete it). */
static inline cJSON *fixture_manifest(const char *name)
{
    size_t len;
    char *text = fixture_read(name, "manifest.json", &len);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cr_assert(root, "manifest.json of %s", name);
    return root;
}

/* checks.greedy.prefix_len of manifest.json. */
static inline int fixture_prefix_len(const char *name)
{
    cJSON *root = fixture_manifest(name);
    cJSON *checks = cJSON_GetObjectItem(root, "checks"), *greedy = cJSON_GetObjectItem(checks, "greedy");
    cJSON *pl = cJSON_GetObjectItem(greedy, "prefix_len");
    cr_assert(cJSON_IsNumber(pl), "no checks.greedy.prefix_len in %s", name);
    int v = pl->valueint;
    cJSON_Delete(root);
    return v;
}

/* The first row where transformers' own QSA choice was a tie on the top-k
 * boundary (checks.qsa[].boundary_tie_rows of manifest.json, written by
 * make_sweep.py for fixtures that keep such ties); INT32_MAX when there is
 * none.  torch.topk breaks those ties in an unspecified order, so no engine
 * can be held to the reference from that row on (tests/fixtures/make_sweep.py,
 * TIES). */
static inline int fixture_first_tie_row(const char *name)
{
    cJSON *root = fixture_manifest(name);
    int first = INT32_MAX;
    const cJSON *q, *qsa = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "checks"), "qsa");
    cJSON_ArrayForEach(q, qsa)
    {
        const cJSON *row;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(q, "boundary_tie_rows"))
        if (cJSON_IsNumber(row) && row->valueint < first) first = row->valueint;
    }
    cJSON_Delete(root);
    return first;
}

/* The sweep fixtures (tests/fixtures/sweep/NAME, made by make_sweep.py) as
 * Criterion parameters: names "sweep/NAME", sorted, in cr_malloc'd memory
 * (each parameterized test runs in its own process). */
struct sweep_fixture {
    char name[64];
};

static inline int sweep_name_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sweep_fixture *)a)->name, ((const struct sweep_fixture *)b)->name);
}

static inline struct sweep_fixture *sweep_fixtures(size_t *n)
{
    FILE *ls = popen("ls tests/fixtures/sweep 2>/dev/null", "r");
    struct sweep_fixture *v = NULL;
    size_t cap = 0;
    char line[128];
    *n = 0;
    while (ls && fgets(line, sizeof line, ls)) {
        line[strcspn(line, "\n")] = 0;
        char probe[300];
        snprintf(probe, sizeof probe, "tests/fixtures/sweep/%s/manifest.json", line);
        if (access(probe, R_OK) != 0) continue;
        if (*n == cap) {
            struct sweep_fixture *w = cr_malloc((cap = cap ? 2 * cap : 32) * sizeof *w);
            if (v) memcpy(w, v, *n * sizeof *w), cr_free(v);
            v = w;
        }
        snprintf(v[(*n)++].name, sizeof v->name, "sweep/%.56s", line);
    }
    if (ls) pclose(ls);
    if (v) qsort(v, *n, sizeof *v, sweep_name_cmp);
    return v;
}

/* ---------- GGUF copy with edits ---------- */

/* One tensor as it will be written; an edit may change any field.  data
 * points into the source mapping unless the edit replaced it (then `owned`
 * is set and the copier frees it). */
struct fx_tensor {
    char name[128];
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    bool owned;
};

struct fx_edits {
    /* false: leave the key out */
    bool (*keep_key)(const char *key, void *ctx);
    /* false: leave the tensor out.  May rename, reshape, retype, replace data. */
    bool (*edit_tensor)(struct fx_tensor *t, const gguf_file *src, void *ctx);
    /* extra keys, added after the copied ones */
    void (*add_keys)(gguf_writer *w, void *ctx);
    void *ctx;
};

static inline void fx_copy_kv(const gguf_file *g, int64_t i, gguf_writer *w)
{
    const char *key = gguf_kv_key(g, i);
    enum gguf_vtype t = gguf_kv_type(g, i);
    uint64_t u;
    int64_t s;
    float f;
    bool b;
    const char *str;
    int rc = 0;
    switch (t) {
    case GGUF_VT_UINT8: rc = gguf_get_u64(g, key, &u, NULL, 0) || gguf_w_set_u8(w, key, (uint8_t)u); break;
    case GGUF_VT_UINT16: rc = gguf_get_u64(g, key, &u, NULL, 0) || gguf_w_set_u16(w, key, (uint16_t)u); break;
    case GGUF_VT_UINT32: rc = gguf_get_u64(g, key, &u, NULL, 0) || gguf_w_set_u32(w, key, (uint32_t)u); break;
    case GGUF_VT_UINT64: rc = gguf_get_u64(g, key, &u, NULL, 0) || gguf_w_set_u64(w, key, u); break;
    case GGUF_VT_INT8: rc = gguf_get_i64(g, key, &s, NULL, 0) || gguf_w_set_i8(w, key, (int8_t)s); break;
    case GGUF_VT_INT16: rc = gguf_get_i64(g, key, &s, NULL, 0) || gguf_w_set_i16(w, key, (int16_t)s); break;
    case GGUF_VT_INT32: rc = gguf_get_i64(g, key, &s, NULL, 0) || gguf_w_set_i32(w, key, (int32_t)s); break;
    case GGUF_VT_INT64: rc = gguf_get_i64(g, key, &s, NULL, 0) || gguf_w_set_i64(w, key, s); break;
    case GGUF_VT_FLOAT32:
    case GGUF_VT_FLOAT64: rc = gguf_get_f32(g, key, &f, NULL, 0) || gguf_w_set_f32(w, key, f); break;
    case GGUF_VT_BOOL: rc = gguf_get_bool(g, key, &b, NULL, 0) || gguf_w_set_bool(w, key, b); break;
    case GGUF_VT_STRING: rc = gguf_get_str(g, key, &str, NULL, 0) || gguf_w_set_str(w, key, str); break;
    case GGUF_VT_ARRAY:
        if (gguf_kv_arr_type(g, i) == GGUF_VT_STRING) {
            uint64_t n = gguf_kv_arr_len(g, i);
            const char **strs = malloc((n ? n : 1) * sizeof *strs);
            for (uint64_t j = 0; j < n; j++) cr_assert_eq(gguf_get_arr_str(g, key, j, &strs[j], NULL, 0), 0);
            rc = gguf_w_set_arr_str(w, key, strs, n);
            free(strs);
        } else {
            enum gguf_vtype et;
            const void *data;
            uint64_t n;
            rc = gguf_get_arr_data(g, key, &et, &data, &n, NULL, 0) || gguf_w_set_arr(w, key, et, data, n);
        }
        break;
    default: cr_assert_fail("key %s of type %d", key, t);
    }
    cr_assert_eq(rc, 0, "copying key %s: %s", key, gguf_writer_error(w));
}

/* Writes the edited copy of src_path to dst_path. */
static inline void fx_gguf_copy(const char *src_path, const char *dst_path, const struct fx_edits *ed)
{
    char err[256];
    gguf_file *g;
    cr_assert_eq(gguf_open(src_path, &g, err, sizeof err), 0, "%s", err);
    gguf_writer *w;
    cr_assert_eq(gguf_writer_open(dst_path, &w, err, sizeof err), 0, "%s", err);
    for (int64_t i = 0; i < gguf_kv_count(g); i++)
        if (!ed->keep_key || ed->keep_key(gguf_kv_key(g, i), ed->ctx)) fx_copy_kv(g, i, w);
    if (ed->add_keys) ed->add_keys(w, ed->ctx);
    int64_t n = gguf_tensor_count(g), kept = 0;
    struct fx_tensor *ts = calloc((size_t)n, sizeof *ts);
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor *gt = gguf_tensor_at(g, i);
        struct fx_tensor *t = &ts[kept];
        snprintf(t->name, sizeof t->name, "%s", gt->name);
        t->type = gt->type;
        t->n_dims = gt->n_dims;
        memcpy(t->ne, gt->ne, sizeof t->ne);
        t->data = gt->data;
        if (ed->edit_tensor && !ed->edit_tensor(t, g, ed->ctx)) continue;
        cr_assert_eq(gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne), 0, "%s", gguf_writer_error(w));
        kept++;
    }
    cr_assert_eq(gguf_w_write_header(w), 0, "%s", gguf_writer_error(w));
    for (int64_t i = 0; i < kept; i++) {
        uint64_t bytes;
        cr_assert_eq(gguf_tensor_nbytes(ts[i].type, ts[i].n_dims, ts[i].ne, &bytes, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gguf_w_write_data(w, ts[i].data, bytes), 0, "%s", gguf_writer_error(w));
        if (ts[i].owned) free((void *)ts[i].data);
    }
    cr_assert_eq(gguf_writer_finish(w), 0, "%s", gguf_writer_error(w));
    gguf_writer_free(w);
    free(ts);
    gguf_close(g);
}

/* Every element of a source tensor as fp32 (rows of ne[0]). */
static inline float *fx_dequant(const struct gguf_tensor *gt)
{
    const struct quant_traits *qt = quant_traits_of((enum quant_type)gt->type);
    cr_assert(qt && qt->to_float, "%s: type %u", gt->name, gt->type);
    int64_t rows = gt->ne[1] * gt->ne[2] * gt->ne[3];
    size_t rb = quant_row_size((enum quant_type)gt->type, gt->ne[0]);
    float *out = malloc((size_t)(rows * gt->ne[0]) * sizeof *out);
    for (int64_t r = 0; r < rows; r++) qt->to_float((const uint8_t *)gt->data + r * rb, out + r * gt->ne[0], gt->ne[0]);
    return out;
}

#endif
