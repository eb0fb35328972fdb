/* test_prepare.c — nebula-prepare's outputs read back as the engine will.
 *
 * Each test prepares a fixture GGUF with the real binary, then reads the
 * prepared files with nothing but docs/FILES.md's byte offsets (no code
 * shared with the tool): every expert blob is fetched with one pread at
 * offset + e·blob_bytes (O_DIRECT where the file system allows it) and
 * compared byte for byte with the three slices of the original 3-D
 * tensors; every ple.bin row is found by its page and compared with the
 * table row; dense.gguf must hold every other tensor and key unchanged;
 * placement.json must partition each layer's experts, follow the hotlist
 * ranking and stay within the budgets. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "tests/core/model_fixture.h"
#include "tests/core/tmpfiles.h"

TestSuite(prepare, .init = tmp_setup, .fini = tmp_teardown, .timeout = 120);

#define PAGE 4096u

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Runs nebula-prepare; returns its exit status. */
static int prepare_rc(const char *gguf, const char *out, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "build/bin/nebula-prepare %s %s -q %s 2>%s/stderr.txt", gguf, out, args ? args : "", tmp_dir);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc), "%s did not exit", cmd);
    return WEXITSTATUS(rc);
}

static void prepare(const char *gguf, const char *out, const char *args)
{
    int rc = prepare_rc(gguf, out, args);
    size_t n;
    char *msg = rc ? slurp(tmp_path("stderr.txt"), &n) : NULL;
    cr_assert_eq(rc, 0, "nebula-prepare %s %s: exit %d: %s", gguf, args ? args : "", rc, msg ? msg : "");
}

static void sha_hex(const void *data, size_t n, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* The checksum checksums.sha256 lists for `name` ("" if none). */
static const char *listed_sum(const char *dir, const char *name)
{
    static char hex[65];
    char path[512];
    size_t n;
    snprintf(path, sizeof path, "%s/checksums.sha256", dir);
    char *text = slurp(path, &n), *line = text;
    hex[0] = 0;
    for (char *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (strlen(line) > 66 && strcmp(line + 66, name) == 0) snprintf(hex, sizeof hex, "%.64s", line);
    }
    free(text);
    return hex;
}

/* A file opened for reads that bypass the page cache when the FS allows. */
static int open_direct(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0 && errno == EINVAL) fd = open(path, O_RDONLY); /* tmpfs has no O_DIRECT */
    cr_assert(fd >= 0, "open %s", path);
    return fd;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

/* ---------- experts.idx + experts.bin against the 3-D tensors ---------- */

static void check_part(const uint8_t *q, const struct gguf_tensor *t, int64_t rows)
{
    cr_assert_eq(rd32(q + 0), t->type, "%s: type", t->name);
    cr_assert_eq(rd32(q + 4), t->ne[0], "%s: row length", t->name);
    cr_assert_eq(rd32(q + 8), rows, "%s: rows", t->name);
    cr_assert_eq(rd32(q + 12), quant_row_size((enum quant_type)t->type, t->ne[0]), "%s: row bytes", t->name);
}

static void check_experts(const char *src_path, const char *dir)
{
    char err[256], path[512];
    gguf_file *g;
    cr_assert_eq(gguf_open(src_path, &g, err, sizeof err), 0, "%s", err);
    uint32_t E, blocks;
    cr_assert_eq(gguf_get_u32(g, "qwen4exp.expert_count", &E, err, sizeof err), 0);
    cr_assert_eq(gguf_get_u32(g, "qwen4exp.block_count", &blocks, err, sizeof err), 0);
    size_t idx_n;
    snprintf(path, sizeof path, "%s/experts.idx", dir);
    uint8_t *idx = slurp(path, &idx_n);
    cr_assert_eq(memcmp(idx, "NBEXPIDX", 8), 0);
    cr_assert_eq(rd32(idx + 8), 1);
    cr_assert_eq(rd32(idx + 12), 64);
    cr_assert_eq(rd32(idx + 16), 128);
    cr_assert_eq(rd32(idx + 20), blocks, "one record per block with routed experts");
    cr_assert_eq(rd32(idx + 24), PAGE);
    cr_assert_eq(idx_n, 64 + 128 * (size_t)blocks);

    snprintf(path, sizeof path, "%s/experts.bin", dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, rd64(idx + 32), "experts.bin size recorded in the index");
    cr_assert_eq(st.st_size % PAGE, 0);
    int fd = open_direct(path);
    uint8_t *buf;
    cr_assert_eq(posix_memalign((void **)&buf, PAGE, 64u << 20), 0);
    cr_assert_eq(pread(fd, buf, PAGE, 0), PAGE);
    cr_assert_eq(memcmp(buf, "NBEXPERT", 8), 0);
    char idx_sha[65];
    sha_hex(idx, idx_n, idx_sha);
    cr_assert_eq(memcmp(buf + 32, idx_sha, 64), 0, "experts.bin names its index");

    uint64_t expect_off = PAGE;
    for (uint32_t i = 0; i < blocks; i++) {
        const uint8_t *r = idx + 64 + 128 * i;
        cr_assert_eq(rd32(r), i, "records in block order");
        cr_assert_eq(rd32(r + 8), E);
        uint64_t off = rd64(r + 16), blob = rd64(r + 24), payload = rd64(r + 32);
        cr_assert_eq(off, expect_off, "layer %u: blobs of the layers follow each other", i);
        cr_assert(off % PAGE == 0 && blob % PAGE == 0 && payload <= blob && blob - payload < PAGE);
        char name[96];
        const struct gguf_tensor *src[3];
        int64_t stride[3], first_row[3] = {0, 0, 0}, rows[3];
        snprintf(name, sizeof name, "blk.%u.ffn_gate_up_exps.weight", i);
        const struct gguf_tensor *fused = gguf_find_tensor(g, name);
        if (fused) {
            src[0] = src[1] = fused;
            rows[0] = rows[1] = fused->ne[1] / 2;
            first_row[1] = rows[0];
        } else {
            snprintf(name, sizeof name, "blk.%u.ffn_gate_exps.weight", i);
            src[0] = gguf_find_tensor(g, name);
            snprintf(name, sizeof name, "blk.%u.ffn_up_exps.weight", i);
            src[1] = gguf_find_tensor(g, name);
        }
        snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", i);
        src[2] = gguf_find_tensor(g, name);
        cr_assert(src[0] && src[1] && src[2], "block %u: expert tensors", i);
        uint64_t part_off = 0;
        for (int p = 0; p < 3; p++) {
            if (!fused || p == 2) rows[p] = src[p]->ne[1];
            cr_assert_eq(src[p]->ne[2], E);
            check_part(r + 40 + 24 * p, src[p], rows[p]);
            cr_assert_eq(rd64(r + 40 + 24 * p + 16), part_off, "block %u part %d: offset in the blob", i, p);
            stride[p] = (int64_t)(src[p]->nbytes / E);
            part_off += (uint64_t)rows[p] * rd32(r + 40 + 24 * p + 12);
        }
        cr_assert_eq(part_off, payload);
        cr_assert(blob <= (64u << 20));
        for (uint32_t e = 0; e < E; e++) {
            /* One read per expert: the contract of the file. */
            cr_assert_eq(pread(fd, buf, blob, (off_t)(off + e * blob)), (ssize_t)blob, "block %u expert %u", i, e);
            for (int p = 0; p < 3; p++) {
                size_t rb = rd32(r + 40 + 24 * p + 12), n = (size_t)rows[p] * rb;
                const uint8_t *want = (const uint8_t *)src[p]->data + e * stride[p] + first_row[p] * rb;
                cr_assert_eq(memcmp(buf + rd64(r + 40 + 24 * p + 16), want, n), 0, "block %u expert %u part %d differs",
                             i, e, p);
            }
            cr_assert(all_zero(buf + payload, blob - payload), "block %u expert %u: padding", i, e);
        }
        expect_off = off + (uint64_t)E * blob;
    }
    cr_assert_eq(expect_off, (uint64_t)st.st_size, "the file ends after the last blob");
    free(buf);
    close(fd);
    free(idx);
    gguf_close(g);
}

/* ---------- ple.bin against the table ---------- */

static void check_ple(const char *src_path, const char *dir)
{
    char err[256], path[512];
    gguf_file *g;
    cr_assert_eq(gguf_open(src_path, &g, err, sizeof err), 0, "%s", err);
    const struct gguf_tensor *t = gguf_find_tensor(g, "per_layer_token_embd.weight");
    cr_assert(t);
    snprintf(path, sizeof path, "%s/ple.bin", dir);
    int fd = open_direct(path);
    uint8_t *page;
    cr_assert_eq(posix_memalign((void **)&page, PAGE, PAGE), 0);
    cr_assert_eq(pread(fd, page, PAGE, 0), PAGE);
    uint8_t h[80];
    memcpy(h, page, sizeof h);
    cr_assert_eq(memcmp(h, "NBPLETAB", 8), 0);
    size_t rb = quant_row_size((enum quant_type)t->type, t->ne[0]);
    cr_assert_eq(rd32(h + 16), t->type);
    cr_assert_eq(rd32(h + 20), t->ne[0]);
    cr_assert_eq(rd64(h + 24), (uint64_t)t->ne[1]);
    cr_assert_eq(rd64(h + 32), rb);
    uint32_t per_page = rd32(h + 40);
    cr_assert_eq(per_page, PAGE / rb, "rows per page");
    cr_assert_eq(rd32(h + 44), 1);
    uint64_t data_off = rd64(h + 48), pages = rd64(h + 56);
    cr_assert_eq(data_off, PAGE);
    cr_assert_eq(pages, ((uint64_t)t->ne[1] + per_page - 1) / per_page);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, data_off + pages * PAGE);
    cr_assert_eq(rd64(h + 64), (uint64_t)st.st_size);
    for (int64_t r = 0; r < t->ne[1]; r++) {
        uint64_t p = (uint64_t)r / per_page, in = ((uint64_t)r % per_page) * rb;
        cr_assert_eq(pread(fd, page, PAGE, (off_t)(data_off + p * PAGE)), PAGE);
        cr_assert_eq(memcmp(page + in, (const uint8_t *)t->data + r * rb, rb), 0, "table row %lld", (long long)r);
        uint64_t used = ((uint64_t)r + 1 == (uint64_t)t->ne[1] ? (uint64_t)r % per_page + 1 : per_page) * rb;
        if ((uint64_t)r % per_page == per_page - 1 || (uint64_t)r + 1 == (uint64_t)t->ne[1])
            cr_assert(all_zero(page + used, PAGE - used), "page %llu padding", (unsigned long long)p);
    }
    free(page);
    close(fd);
    gguf_close(g);
}

/* ---------- dense.gguf: everything else, unchanged ---------- */

static bool excluded(const char *name)
{
    if (strcmp(name, "per_layer_token_embd.weight") == 0) return true;
    return strncmp(name, "blk.", 4) == 0 && (strstr(name, ".ffn_gate_exps.weight") || strstr(name, ".ffn_up_exps.weight") ||
                                             strstr(name, ".ffn_down_exps.weight") || strstr(name, ".ffn_gate_up_exps.weight"));
}

static void check_dense(const char *src_path, const char *dir)
{
    char err[256], path[512];
    gguf_file *g, *d;
    cr_assert_eq(gguf_open(src_path, &g, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/dense.gguf", dir);
    cr_assert_eq(gguf_open(path, &d, err, sizeof err), 0, "%s", err);
    int64_t kept = 0, dropped = 0;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *s = gguf_tensor_at(g, i), *t = gguf_find_tensor(d, s->name);
        if (excluded(s->name)) {
            cr_assert_null(t, "%s must not be in dense.gguf", s->name);
            dropped++;
            continue;
        }
        cr_assert_not_null(t, "%s missing from dense.gguf", s->name);
        cr_assert_eq(t->type, s->type, "%s", s->name);
        cr_assert_eq(t->n_dims, s->n_dims, "%s", s->name);
        cr_assert_eq(memcmp(t->ne, s->ne, sizeof t->ne), 0, "%s", s->name);
        cr_assert_eq(t->nbytes, s->nbytes);
        cr_assert_eq(memcmp(t->data, s->data, s->nbytes), 0, "%s: data", s->name);
        kept++;
    }
    cr_assert_eq(gguf_tensor_count(d), kept, "no extra tensors");
    uint32_t blocks;
    cr_assert_eq(gguf_get_u32(g, "qwen4exp.block_count", &blocks, err, sizeof err), 0);
    cr_assert(dropped >= 2 * (int64_t)blocks + 1, "expert tensors and the table were dropped");
    for (int64_t i = 0; i < gguf_kv_count(g); i++) {
        const char *key = gguf_kv_key(g, i);
        int64_t j = gguf_find_key(d, key);
        if (strncmp(key, "split.", 6) == 0) {
            cr_assert_eq(j, -1, "%s", key);
            continue;
        }
        cr_assert(j >= 0, "key %s missing", key);
        cr_assert_eq(gguf_kv_type(d, j), gguf_kv_type(g, i), "%s", key);
        cr_assert_eq(gguf_kv_arr_len(d, j), gguf_kv_arr_len(g, i), "%s", key);
        enum gguf_vtype et = gguf_kv_arr_type(g, i);
        if (gguf_kv_type(g, i) == GGUF_VT_ARRAY && et == GGUF_VT_STRING) {
            for (uint64_t k = 0; k < gguf_kv_arr_len(g, i); k++) {
                const char *a, *b;
                cr_assert_eq(gguf_get_arr_str(g, key, k, &a, err, sizeof err), 0);
                cr_assert_eq(gguf_get_arr_str(d, key, k, &b, err, sizeof err), 0);
                cr_assert_str_eq(a, b, "%s[%llu]", key, (unsigned long long)k);
            }
        } else if (gguf_kv_type(g, i) == GGUF_VT_ARRAY) {
            const void *a, *b;
            uint64_t na, nb;
            enum gguf_vtype ta, tb;
            cr_assert_eq(gguf_get_arr_data(g, key, &ta, &a, &na, err, sizeof err), 0);
            cr_assert_eq(gguf_get_arr_data(d, key, &tb, &b, &nb, err, sizeof err), 0);
            cr_assert(ta == tb && na == nb && memcmp(a, b, na * gguf_vtype_size(ta)) == 0, "%s", key);
        } else {
            char a[512], b[512];
            gguf_kv_format(g, i, a, sizeof a);
            gguf_kv_format(d, j, b, sizeof b);
            cr_assert_str_eq(a, b, "%s", key);
        }
    }
    const char *refs[][2] = {{"nebula.prepared.experts_sha256", "experts.bin"},
                             {"nebula.prepared.experts_index_sha256", "experts.idx"},
                             {"nebula.prepared.ple_sha256", "ple.bin"}};
    for (int k = 0; k < 3; k++) {
        const char *v;
        cr_assert_eq(gguf_get_str(d, refs[k][0], &v, err, sizeof err), 0, "%s", err);
        cr_assert_str_eq(v, listed_sum(dir, refs[k][1]), "%s", refs[k][0]);
    }
    gguf_close(d);
    gguf_close(g);
}

/* ---------- placement.json ---------- */

struct plan {
    int n_layers;
    uint32_t E;
    uint64_t dense_bytes, blob[16]; /* dense_bytes: what --vram-budget pays before slots (dense on the device + reserve) */
    uint64_t vram_budget;           /* request.vram_budget (0 for "all") */
    int64_t vram_ctx;
    bool mtp[16];
    int n_tier[16][3];
    uint32_t list[16][3][64]; /* ids per tier, in file order */
    uint64_t tier_bytes[3];
};

static void read_plan(const char *dir, uint32_t E, struct plan *pl)
{
    char path[512];
    size_t n;
    snprintf(path, sizeof path, "%s/placement.json", dir);
    char *text = slurp(path, &n);
    cJSON *root = cJSON_Parse(text);
    cr_assert(root, "placement.json parses");
    memset(pl, 0, sizeof *pl);
    pl->E = E;
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    pl->dense_bytes = (uint64_t)cJSON_GetObjectItem(model, "vram_fixed_bytes")->valuedouble;
    cr_assert_geq(pl->dense_bytes, (uint64_t)cJSON_GetObjectItem(model, "dense_tensor_bytes")->valuedouble);
    const cJSON *req = cJSON_GetObjectItem(root, "request");
    pl->vram_budget = cJSON_IsNumber(cJSON_GetObjectItem(req, "vram_budget"))
                          ? (uint64_t)cJSON_GetObjectItem(req, "vram_budget")->valuedouble : 0;
    pl->vram_ctx = (int64_t)cJSON_GetObjectItem(req, "vram_ctx")->valuedouble;
    cr_assert_str_eq(cJSON_GetObjectItem(model, "dense_sha256")->valuestring, listed_sum(dir, "dense.gguf"),
                     "the placement names the dense file it was made for");
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    pl->n_layers = cJSON_GetArraySize(layers);
    cr_assert(pl->n_layers > 0 && pl->n_layers <= 16);
    static const char *names[3] = {"vram", "ram", "ssd"};
    for (int l = 0; l < pl->n_layers; l++) {
        const cJSON *lo = cJSON_GetArrayItem(layers, l);
        cr_assert_eq(cJSON_GetObjectItem(lo, "layer")->valueint, l);
        pl->blob[l] = (uint64_t)cJSON_GetObjectItem(lo, "blob_bytes")->valuedouble;
        pl->mtp[l] = cJSON_IsTrue(cJSON_GetObjectItem(lo, "mtp"));
        int seen[64] = {0};
        for (int t = 0; t < 3; t++) {
            const cJSON *ids = cJSON_GetObjectItem(lo, names[t]), *id;
            cr_assert(cJSON_IsArray(ids));
            cJSON_ArrayForEach(id, ids) {
                int e = id->valueint;
                cr_assert(e >= 0 && (uint32_t)e < E, "layer %d: expert id %d", l, e);
                cr_assert_eq(seen[e]++, 0, "layer %d: expert %d listed twice", l, e);
                pl->list[l][t][pl->n_tier[l][t]++] = (uint32_t)e;
                pl->tier_bytes[t] += pl->blob[l];
            }
        }
        for (uint32_t e = 0; e < E; e++) cr_assert_eq(seen[e], 1, "layer %d: expert %u has no tier", l, e);
    }
    cJSON_Delete(root);
    free(text);
}

static void check_all(const char *gguf, const char *dir)
{
    check_experts(gguf, dir);
    check_ple(gguf, dir);
    check_dense(gguf, dir);
    struct plan pl;
    read_plan(dir, 8, &pl);
}

Test(prepare, tiny_a_f32) { const char *g = fixture_gguf_typed("tiny-a", "f32"); prepare(g, tmp_path("out"), NULL); check_all(g, tmp_path("out")); }
Test(prepare, tiny_a_q8_0) { const char *g = fixture_gguf_typed("tiny-a", "q8_0"); prepare(g, tmp_path("out"), NULL); check_all(g, tmp_path("out")); }
Test(prepare, tiny_a_mix) { const char *g = fixture_gguf_typed("tiny-a", "mix"); prepare(g, tmp_path("out"), NULL); check_all(g, tmp_path("out")); }

/* The MTP block's experts are a layer of their own, flagged, and by default
 * take VRAM before the trunk's quotas. */
Test(prepare, mtp_block)
{
    const char *g = fixture_gguf_typed("tiny-b-vl", "bf16");
    char args[128];
    gguf_file *f;
    char err[256];
    cr_assert_eq(gguf_open(g, &f, err, sizeof err), 0, "%s", err);
    uint32_t blocks, E;
    gguf_get_u32(f, "qwen4exp.block_count", &blocks, err, sizeof err);
    gguf_get_u32(f, "qwen4exp.expert_count", &E, err, sizeof err);
    gguf_close(f);
    prepare(g, tmp_path("out"), NULL);
    check_experts(g, tmp_path("out"));
    check_dense(g, tmp_path("out"));
    size_t n;
    uint8_t *idx = slurp(tmp_path("out/experts.idx"), &n);
    for (uint32_t i = 0; i < blocks; i++) cr_assert_eq(rd32(idx + 64 + 128 * i + 4), i + 1 == blocks ? 1u : 0u, "MTP flag");
    free(idx);
    struct plan pl;
    read_plan(tmp_path("out"), E, &pl);
    /* dense + all MTP experts + 1 more blob: the MTP block is complete, the trunk gets one. */
    snprintf(args, sizeof args, "--vram-budget %llu",
             (unsigned long long)(pl.dense_bytes + (E + 1) * pl.blob[blocks - 1]));
    prepare(g, tmp_path("out"), args);
    read_plan(tmp_path("out"), E, &pl);
    cr_assert(pl.mtp[blocks - 1]);
    cr_assert_eq(pl.n_tier[blocks - 1][0], (int)E, "MTP experts all in VRAM");
    int trunk = 0;
    for (uint32_t l = 0; l + 1 < blocks; l++) trunk += pl.n_tier[l][0];
    cr_assert_eq(trunk, 1);
    prepare(g, tmp_path("out"), "--mtp-experts shared");
    read_plan(tmp_path("out"), E, &pl);
    cr_assert(pl.n_tier[blocks - 1][0] < (int)E, "shared: the MTP block has a quota like the others");
}

/* A fused gate_up input gives the same experts.bin as the split one. */
static bool fuse_edit(struct fx_tensor *t, const gguf_file *src, void *ctx)
{
    (void)ctx;
    if (strstr(t->name, ".ffn_up_exps.weight")) return false;
    char *gate = strstr(t->name, ".ffn_gate_exps.weight");
    if (!gate) return true;
    char up_name[128];
    snprintf(up_name, sizeof up_name, "%.*s.ffn_up_exps.weight", (int)(gate - t->name), t->name);
    const struct gguf_tensor *up = gguf_find_tensor(src, up_name);
    cr_assert(up);
    size_t one = (size_t)(up->nbytes / up->ne[2]);
    uint8_t *data = malloc(2 * up->nbytes);
    for (int64_t e = 0; e < up->ne[2]; e++) {
        memcpy(data + 2 * e * one, (const uint8_t *)t->data + e * one, one);
        memcpy(data + (2 * e + 1) * one, (const uint8_t *)up->data + e * one, one);
    }
    strcpy(gate, ".ffn_gate_up_exps.weight");
    t->ne[1] *= 2;
    t->data = data;
    t->owned = true;
    return true;
}

Test(prepare, fused_gate_up)
{
    const char *g = fixture_gguf_typed("tiny-a", "q8_0");
    struct fx_edits ed = {.edit_tensor = fuse_edit};
    fx_gguf_copy(g, tmp_path("fused.gguf"), &ed);
    prepare(tmp_path("fused.gguf"), tmp_path("fused"), NULL);
    check_experts(tmp_path("fused.gguf"), tmp_path("fused"));
    check_dense(tmp_path("fused.gguf"), tmp_path("fused"));
    prepare(g, tmp_path("split"), NULL);
    size_t na, nb;
    void *a = slurp(tmp_path("fused/experts.bin"), &na), *b = slurp(tmp_path("split/experts.bin"), &nb);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "same experts, same file");
    free(a);
    free(b);
}

/* ---------- budgets and ranking ---------- */

/* Prepares with printf-formatted placement options and reads the plan. */
__attribute__((format(printf, 3, 4))) static void run_budget(const char *g, struct plan *pl, const char *fmt, ...)
{
    char args[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    prepare(g, tmp_path("out"), args);
    read_plan(tmp_path("out"), 8, pl);
}

Test(prepare, budgets)
{
    const char *g = fixture_gguf_typed("tiny-a", "q8_0");
    struct plan pl;
    prepare(g, tmp_path("out"), NULL);
    read_plan(tmp_path("out"), 8, &pl);
    cr_assert_eq(pl.tier_bytes[2], 32 * pl.blob[0], "no budgets: everything on SSD");
    uint64_t D = pl.dense_bytes, B = pl.blob[0];

    run_budget(g, &pl, "--vram-budget all --ram-budget 0");
    cr_assert_eq(pl.tier_bytes[0], 32 * B, "all in VRAM");
    run_budget(g, &pl, "--vram-budget 0 --ram-budget all");
    cr_assert_eq(pl.tier_bytes[1], 32 * B, "all in RAM");
    /* dense + 10 blobs of VRAM, 12 blobs of RAM: 10 slots across 4 layers (3,3,2,2), 12 in RAM, 10 on SSD (31%). */
    run_budget(g, &pl, "--vram-budget %llu --ram-budget %llu", (unsigned long long)(D + 10 * B + B / 2),
               (unsigned long long)(12 * B + 1));
    cr_assert_eq(pl.tier_bytes[0], 10 * B);
    cr_assert_eq(pl.tier_bytes[1], 12 * B);
    cr_assert_eq(pl.tier_bytes[2], 10 * B);
    for (int l = 0; l < 4; l++) cr_assert(pl.n_tier[l][0] == 2 || pl.n_tier[l][0] == 3, "equal quotas");
    for (int l = 0; l < 4; l++) cr_assert(pl.n_tier[l][1] == 3, "equal RAM shares");
    /* Victim cache comes out of the RAM budget. */
    run_budget(g, &pl, "--ram-budget %llu --victim-cache %llu", (unsigned long long)(12 * B), (unsigned long long)(4 * B));
    cr_assert_eq(pl.tier_bytes[1], 8 * B);
    /* Early layers weighted down: layer 0 gets fewer slots than layer 3. */
    run_budget(g, &pl, "--vram-budget %llu --ram-budget 0 --victim-cache 0 --early-quota 0:2", (unsigned long long)(D + 16 * B));
    cr_assert_eq(pl.tier_bytes[0], 16 * B);
    cr_assert(pl.n_tier[0][0] < pl.n_tier[3][0], "layer 0 %d slots, layer 3 %d", pl.n_tier[0][0], pl.n_tier[3][0]);
    cr_assert_eq(pl.n_tier[0][0], 0, "weight 0 at layer 0");
    /* A re-run without placement options keeps the recorded ones. */
    prepare(g, tmp_path("out"), NULL);
    read_plan(tmp_path("out"), 8, &pl);
    cr_assert_eq(pl.tier_bytes[0], 16 * B);
    cr_assert_eq(pl.n_tier[0][0], 0);
    /* --vram-slots: slots on top of dense + reserve; the budget recorded is the sum. */
    run_budget(g, &pl, "--vram-slots %llu --early-quota 1", (unsigned long long)(10 * B + B / 2));
    cr_assert_eq(pl.tier_bytes[0], 10 * B);
    cr_assert_eq(pl.vram_budget, D + 10 * B + B / 2);
    /* --ctx sizes the reserve (K/V grows with it) and is recorded for the worker. */
    run_budget(g, &pl, "--vram-slots %llu --ctx 64", (unsigned long long)(10 * B));
    cr_assert_eq(pl.vram_ctx, 64);
    const uint64_t D64 = pl.dense_bytes;
    run_budget(g, &pl, "--vram-slots %llu --ctx 8192", (unsigned long long)(10 * B));
    cr_assert_eq(pl.vram_ctx, 8192);
    cr_assert_gt(pl.dense_bytes, D64, "the reserve for 8192 positions is larger than for 64");
    cr_assert_eq(pl.tier_bytes[0], 10 * B);
    cr_assert_eq(prepare_rc(g, tmp_path("out"), "--ctx 0"), 2, "--ctx wants a positive count");
    cr_assert_eq(prepare_rc(g, tmp_path("out"), "--vram-budget 1G --vram-slots 1M"), 2, "one of the two");
    /* Impossible budgets are usage errors. */
    char args[128];
    snprintf(args, sizeof args, "--vram-budget %llu", (unsigned long long)(D - 1));
    cr_assert_eq(prepare_rc(g, tmp_path("out"), args), 2, "VRAM budget below the dense part");
    size_t n;
    char *msg = slurp(tmp_path("stderr.txt"), &n);
    cr_assert(strstr(msg, "dense"), "message names the dense part: %s", msg);
    free(msg);
    cr_assert_eq(prepare_rc(g, tmp_path("out"), "--ram-budget 1M --victim-cache 2M"), 2);
}

Test(prepare, hotlist_ranking)
{
    const char *g = fixture_gguf_typed("tiny-a", "q8_0");
    /* Counts with ties, so weight and then id decide some places. */
    char text[8192];
    size_t len = (size_t)snprintf(text, sizeof text, "# measured\nlayer\texpert\tcount\tmean_weight\n");
    uint64_t count[4][8];
    double weight[4][8];
    srand(7);
    for (int l = 0; l < 4; l++)
        for (int e = 7; e >= 0; e--) { /* rows in any order */
            count[l][e] = (uint64_t)(rand() % 4) * 100;
            weight[l][e] = (rand() % 3) / 4.0;
            len += (size_t)snprintf(text + len, sizeof text - len, "%d\t%d\t%llu\t%g\n", l, e,
                                    (unsigned long long)count[l][e], weight[l][e]);
        }
    spit(tmp_path("hot.tsv"), text, len);
    char args[512];
    struct plan pl;
    prepare(g, tmp_path("out"), NULL);
    read_plan(tmp_path("out"), 8, &pl);
    snprintf(args, sizeof args, "--hotlist %s --vram-budget %llu --ram-budget %llu", tmp_path("hot.tsv"),
             (unsigned long long)(pl.dense_bytes + 8 * pl.blob[0]), (unsigned long long)(8 * pl.blob[0]));
    prepare(g, tmp_path("out"), args);
    read_plan(tmp_path("out"), 8, &pl);
    size_t n;
    char *copy = slurp(tmp_path("out/hotlist.tsv"), &n);
    cr_assert(n == len && memcmp(copy, text, n) == 0, "hotlist.tsv is a copy of --hotlist");
    free(copy);
    for (int l = 0; l < 4; l++) {
        uint32_t ranked[8];
        int k = 0;
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < pl.n_tier[l][t]; i++) ranked[k++] = pl.list[l][t][i];
        for (int i = 0; i + 1 < 8; i++) {
            uint32_t a = ranked[i], b = ranked[i + 1];
            bool ordered = count[l][a] > count[l][b] ||
                           (count[l][a] == count[l][b] && (weight[l][a] > weight[l][b] ||
                                                           (weight[l][a] == weight[l][b] && a < b)));
            cr_assert(ordered, "layer %d: expert %u ranked before %u", l, a, b);
        }
        cr_assert_eq(pl.n_tier[l][0], 2);
        cr_assert_eq(pl.n_tier[l][1], 2);
    }
}

/* A split input (gguf-split naming) prepares to the same files as the whole
 * one; the manifest names every shard and dense.gguf has no split.* keys. */
struct split_ctx {
    int shard;       /* 0 or 1 */
    int64_t half;    /* tensors of shard 0 */
    int64_t seen;
    int64_t total;
};

static bool split_keep_key(const char *key, void *ctx) { return ((struct split_ctx *)ctx)->shard == 0 && key; }

static void split_add_keys(gguf_writer *w, void *ctx)
{
    struct split_ctx *c = ctx;
    cr_assert_eq(gguf_w_set_u16(w, "split.no", (uint16_t)c->shard), 0);
    cr_assert_eq(gguf_w_set_u16(w, "split.count", 2), 0);
    cr_assert_eq(gguf_w_set_i32(w, "split.tensors.count", (int32_t)c->total), 0);
}

static bool split_edit(struct fx_tensor *t, const gguf_file *src, void *ctx)
{
    (void)t, (void)src;
    struct split_ctx *c = ctx;
    bool first = c->seen++ < c->half;
    return c->shard == 0 ? first : !first;
}

Test(prepare, split_input)
{
    const char *g = fixture_gguf_typed("tiny-a", "q8_0");
    gguf_file *f;
    char err[256];
    cr_assert_eq(gguf_open(g, &f, err, sizeof err), 0, "%s", err);
    int64_t total = gguf_tensor_count(f);
    gguf_close(f);
    for (int s = 0; s < 2; s++) {
        struct split_ctx c = {.shard = s, .half = total / 2, .total = total};
        struct fx_edits ed = {.keep_key = split_keep_key, .edit_tensor = split_edit, .add_keys = split_add_keys, .ctx = &c};
        char name[64];
        snprintf(name, sizeof name, "m-%05d-of-00002.gguf", s + 1);
        fx_gguf_copy(g, tmp_path(name), &ed);
    }
    prepare(tmp_path("m-00002-of-00002.gguf"), tmp_path("split"), NULL);
    prepare(g, tmp_path("whole"), NULL);
    check_experts(tmp_path("m-00001-of-00002.gguf"), tmp_path("split"));
    check_dense(tmp_path("m-00001-of-00002.gguf"), tmp_path("split"));
    static const char *same[] = {"experts.bin", "experts.idx", "ple.bin", "dense.gguf", "placement.json"};
    for (int i = 0; i < 5; i++) {
        char a[256], b[256];
        size_t na, nb;
        snprintf(a, sizeof a, "%s/%s", tmp_path("split"), same[i]);
        snprintf(b, sizeof b, "%s/%s", tmp_path("whole"), same[i]);
        void *x = slurp(a, &na), *y = slurp(b, &nb);
        cr_assert(na == nb && memcmp(x, y, na) == 0, "%s differs between the split and the whole input", same[i]);
        free(x);
        free(y);
    }
    size_t n;
    char *manifest = slurp(tmp_path("split/manifest.json"), &n);
    cr_assert(strstr(manifest, "m-00001-of-00002.gguf") && strstr(manifest, "m-00002-of-00002.gguf"),
              "the manifest names both shards");
    free(manifest);
}

/* Key/values of every type reach dense.gguf with their type and exact value
 * (a f64 that no f32 can hold included). */
static void extra_keys(gguf_writer *w, void *ctx)
{
    (void)ctx;
    const double d[2] = {0.1, -1e300};
    const int16_t s[3] = {-3, 0, 7};
    cr_assert_eq(gguf_w_set_f64(w, "test.f64", 0.1), 0);
    cr_assert_eq(gguf_w_set_u8(w, "test.u8", 250), 0);
    cr_assert_eq(gguf_w_set_i8(w, "test.i8", -100), 0);
    cr_assert_eq(gguf_w_set_u16(w, "test.u16", 65000), 0);
    cr_assert_eq(gguf_w_set_i16(w, "test.i16", -32000), 0);
    cr_assert_eq(gguf_w_set_i64(w, "test.i64", -((int64_t)1 << 62)), 0);
    cr_assert_eq(gguf_w_set_u64(w, "test.u64", UINT64_MAX), 0);
    cr_assert_eq(gguf_w_set_arr(w, "test.arr_f64", GGUF_VT_FLOAT64, d, 2), 0);
    cr_assert_eq(gguf_w_set_arr(w, "test.arr_i16", GGUF_VT_INT16, s, 3), 0);
    cr_assert_eq(gguf_w_set_arr(w, "test.arr_empty", GGUF_VT_UINT32, NULL, 0), 0);
    cr_assert_eq(gguf_w_set_u32(w, "general.alignment", 64), 0);
}

Test(prepare, every_key_type)
{
    const char *g = fixture_gguf_typed("tiny-a", "q8_0");
    struct fx_edits ed = {.add_keys = extra_keys};
    fx_gguf_copy(g, tmp_path("keys.gguf"), &ed);
    prepare(tmp_path("keys.gguf"), tmp_path("out"), NULL);
    check_dense(tmp_path("keys.gguf"), tmp_path("out"));
    gguf_file *d;
    char err[256];
    cr_assert_eq(gguf_open(tmp_path("out/dense.gguf"), &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_alignment(d), 64, "the input's alignment is kept");
    char v[64];
    gguf_kv_format(d, gguf_find_key(d, "test.f64"), v, sizeof v);
    cr_assert_str_eq(v, "0.1");
    gguf_close(d);
}
