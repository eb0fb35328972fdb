/* test_convert.c — nebula-convert checked against its safetensors sources.
 *
 * Each fixture is converted by the real binary; then every GGUF tensor is
 * recomputed here element by element from the Hugging Face tensors with the
 * documented transforms (docs/CONVERSION.md §3), written independently of the
 * converter's row maps: the value-head tiling from the forward permutation
 * (HF head k·g + j goes to GGUF position j·Hk + k), expert stacks and table
 * shards by plain index arithmetic.  Every HF tensor but the vision tower must
 * be used, and the tensor count must be the layout's.  Checkpoints with GDN
 * key and value heads of different sizes (dk ≠ dv) are written here from
 * tiny-a's and checked the same way, with the ssm.* keys that carry dk and dv. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/gguf/gguf.h"
#include "core/quant/quant.h"
#include "core/safetensors/safetensors.h"
#include "tests/core/tmpfiles.h"

TestSuite(convert, .init = tmp_setup, .fini = tmp_teardown, .timeout = 120);

struct fx {
    const st_set *st;
    const char *pfx; /* HF prefix of the text model */
    int64_t hk, g, dk, dv, C, I, nh_i, di, n_layers;
    uint8_t *used;   /* per HF tensor index */
};

static const char *bin(void)
{
    static char path[256];
    const char *b = getenv("BUILD");
    snprintf(path, sizeof path, "%s/bin/nebula-convert", b && *b ? b : "build");
    return path;
}

static void convert_dir(const char *dir, const char *type, const char *out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s --type %s -q", bin(), dir, out, type);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

static void convert(const char *fixture, const char *type, const char *out)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", fixture);
    convert_dir(dir, type, out);
}

static double hf(struct fx *f, const char *name, int64_t flat)
{
    const struct st_tensor *t = st_find(f->st, name);
    cr_assert(t, "HF tensor %s missing", name);
    cr_assert(flat >= 0 && flat < st_numel(t), "%s: index %lld out of range", name, (long long)flat);
    static const struct st_tensor *last;
    static int64_t last_i;
    if (t != last) { /* st_at's pointers are not one array of st_tensor: search, then cache */
        for (last_i = 0; st_at(f->st, last_i) != t; last_i++) {}
        last = t;
    }
    f->used[last_i] = 1;
    double v;
    char err[128];
    cr_assert_eq(st_read_f64(t, flat, 1, &v, err, sizeof err), 0, "%s", err);
    return v;
}

/* Row index of the HF head that GGUF position `pos` holds, built from the
 * forward direction of the re-ordering. */
static int64_t tiled_source(struct fx *f, int64_t pos)
{
    int64_t hv = f->hk * f->g;
    for (int64_t h = 0; h < hv; h++) {
        int64_t k = h / f->g, j = h % f->g;
        if (j * f->hk + k == pos) return h;
    }
    cr_assert_fail("no source for tiled head %lld", (long long)pos);
    return -1;
}

/* Expected value of element (i0, i1, i2) of GGUF tensor `name` (without the
 * "blk.N." part in `local`, with the HF layer prefix in `L`). */
static double expect(struct fx *f, const char *local, const char *L, const int64_t *ne, int64_t i0, int64_t i1, int64_t i2,
                     bool *fold, bool *negexp)
{
    char n[256];
    int64_t flat = (i2 * ne[1] + i1) * ne[0] + i0;
    *fold = *negexp = false;
#define IS(x) (strcmp(local, x) == 0)
#define H(fmt, ...) (snprintf(n, sizeof n, fmt, __VA_ARGS__), n)
    static const char *hcs[2][2] = {{"hc_attn_", "attn_hyper_connection"}, {"hc_ffn_", "mlp_hyper_connection"}};
    for (int k = 0; k < 2; k++) {
        size_t l = strlen(hcs[k][0]);
        if (strncmp(local, hcs[k][0], l)) continue;
        const char *w = local + l;
        if (!strcmp(w, "norm.weight")) return *fold = true, hf(f, H("%s%s.hc_norm.weight", L, hcs[k][1]), flat);
        if (!strcmp(w, "down.weight")) return hf(f, H("%s%s.input_mix_weight_down.weight", L, hcs[k][1]), flat);
        if (!strcmp(w, "up.weight")) return hf(f, H("%s%s.input_mix_weight_up.weight", L, hcs[k][1]), flat);
        if (!strcmp(w, "inject.weight")) return hf(f, H("%s%s.block_inject_weight.weight", L, hcs[k][1]), flat);
    }
    int64_t qk = 2 * f->hk * f->dk;
    if (IS("attn_qkv.weight")) {
        int64_t row = i1 < qk ? i1 : qk + tiled_source(f, (i1 - qk) / f->dv) * f->dv + (i1 - qk) % f->dv;
        return hf(f, H("%slinear_attn.in_proj_qkv.weight", L), row * ne[0] + i0);
    }
    if (IS("ssm_conv1d.weight")) {
        int64_t ch = i1 < qk ? i1 : qk + tiled_source(f, (i1 - qk) / f->dv) * f->dv + (i1 - qk) % f->dv;
        return hf(f, H("%slinear_attn.conv1d.weight", L), ch * ne[0] + i0);
    }
    if (IS("attn_gate.weight"))
        return hf(f, H("%slinear_attn.in_proj_z.weight", L), (tiled_source(f, i1 / f->dv) * f->dv + i1 % f->dv) * ne[0] + i0);
    if (IS("ssm_beta.weight")) return hf(f, H("%slinear_attn.in_proj_b.weight", L), tiled_source(f, i1) * ne[0] + i0);
    if (IS("ssm_alpha.weight")) return hf(f, H("%slinear_attn.in_proj_a.weight", L), tiled_source(f, i1) * ne[0] + i0);
    if (IS("ssm_dt.bias")) return hf(f, H("%slinear_attn.dt_bias", L), tiled_source(f, i0));
    if (IS("ssm_a")) return *negexp = true, hf(f, H("%slinear_attn.A_log", L), tiled_source(f, i0));
    if (IS("ssm_norm.weight")) return hf(f, H("%slinear_attn.norm.weight", L), i0);
    if (IS("ssm_out.weight"))
        return hf(f, H("%slinear_attn.out_proj.weight", L), i1 * ne[0] + tiled_source(f, i0 / f->dv) * f->dv + i0 % f->dv);
    static const char *plain[][2] = {{"attn_q.weight", "self_attn.q_proj.weight"},
                                     {"attn_k.weight", "self_attn.k_proj.weight"},
                                     {"attn_v.weight", "self_attn.v_proj.weight"},
                                     {"attn_output.weight", "self_attn.o_proj.weight"},
                                     {"ffn_gate_inp.weight", "mlp.gate.weight"},
                                     {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
                                     {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
                                     {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
                                     {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
                                     {"ple_key.weight", "ple.key_proj.weight"},
                                     {"ple_value.weight", "ple.value_proj.weight"},
                                     {"ple_conv1d.weight", "ple.conv1d.weight"}};
    for (size_t k = 0; k < sizeof plain / sizeof *plain; k++)
        if (IS(plain[k][0])) return hf(f, H("%s%s", L, plain[k][1]), flat);
    static const char *folded[][2] = {{"attn_q_norm.weight", "self_attn.q_norm.weight"},
                                      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
                                      {"indexer.q_norm.weight", "self_attn.indexer.q_layernorm.weight"},
                                      {"indexer.k_norm.weight", "self_attn.indexer.k_layernorm.weight"},
                                      {"ple_norm_key.weight", "ple.norm_key.weight"},
                                      {"ple_norm_query.weight", "ple.norm_query.weight"},
                                      {"ple_norm_conv.weight", "ple.norm_conv.weight"}};
    for (size_t k = 0; k < sizeof folded / sizeof *folded; k++)
        if (IS(folded[k][0])) return *fold = true, hf(f, H("%s%s", L, folded[k][1]), flat);
    if (IS("indexer.q_proj.weight")) return hf(f, H("%sself_attn.indexer.index_qk_proj.weight", L), flat);
    if (IS("indexer.k_proj.weight"))
        return hf(f, H("%sself_attn.indexer.index_qk_proj.weight", L), (f->nh_i * f->di + i1) * ne[0] + i0);
    bool fused = st_find(f->st, H("%smlp.experts.gate_up_proj", L)) != NULL;
    if (IS("ffn_gate_exps.weight") || IS("ffn_up_exps.weight")) {
        bool up = IS("ffn_up_exps.weight");
        if (fused) return hf(f, H("%smlp.experts.gate_up_proj", L), ((i2 * 2 * f->I) + (up ? f->I : 0) + i1) * f->C + i0);
        return hf(f, H("%smlp.experts.%lld.%s.weight", L, (long long)i2, up ? "up_proj" : "gate_proj"), i1 * f->C + i0);
    }
    if (IS("ffn_down_exps.weight")) {
        if (fused) return hf(f, H("%smlp.experts.down_proj", L), flat);
        return hf(f, H("%smlp.experts.%lld.down_proj.weight", L, (long long)i2), i1 * f->I + i0);
    }
    if (IS("nextn.eh_proj.weight"))
        return i0 < f->C ? hf(f, "mtp.fc_embedding.weight", i1 * f->C + i0) : hf(f, "mtp.fc_hidden.weight", i1 * f->C + i0 - f->C);
    if (IS("nextn.enorm.weight")) return *fold = true, hf(f, "mtp.pre_fc_norm_embedding.weight", flat);
    if (IS("nextn.hnorm.weight")) return *fold = true, hf(f, "mtp.pre_fc_norm_hidden.weight", flat);
    if (IS("nextn.hc_head_norm.weight")) return *fold = true, hf(f, "mtp.hyper_connection_mixer.hc_norm.weight", flat);
    if (IS("nextn.hc_head_down.weight")) return hf(f, "mtp.hyper_connection_mixer.input_mix_weight_down.weight", flat);
    if (IS("nextn.hc_head_up.weight")) return hf(f, "mtp.hyper_connection_mixer.input_mix_weight_up.weight", flat);
    cr_assert_fail("unexpected GGUF tensor %s", local);
    return 0;
#undef IS
#undef H
}

static double expect_global(struct fx *f, const struct gguf_tensor *t, int64_t i0, int64_t i1, bool *fold)
{
    char n[256];
    int64_t flat = i1 * t->ne[0] + i0;
    *fold = false;
    if (!strcmp(t->name, "token_embd.weight")) return hf(f, (snprintf(n, sizeof n, "%sembed_tokens.weight", f->pfx), n), flat);
    if (!strcmp(t->name, "output.weight")) return hf(f, "lm_head.weight", flat);
    if (!strcmp(t->name, "output_hc_norm.weight"))
        return *fold = true, hf(f, (snprintf(n, sizeof n, "%shyper_connection_mixer.hc_norm.weight", f->pfx), n), flat);
    if (!strcmp(t->name, "output_hc_down.weight"))
        return hf(f, (snprintf(n, sizeof n, "%shyper_connection_mixer.input_mix_weight_down.weight", f->pfx), n), flat);
    if (!strcmp(t->name, "output_hc_up.weight"))
        return hf(f, (snprintf(n, sizeof n, "%shyper_connection_mixer.input_mix_weight_up.weight", f->pfx), n), flat);
    cr_assert(!strcmp(t->name, "per_layer_token_embd.weight"), "unexpected GGUF tensor %s", t->name);
    /* The table: shard s holds rows [s·per, (s+1)·per); find the PLE layer's prefix. */
    for (int64_t l = 0; l < f->n_layers; l++) {
        snprintf(n, sizeof n, "%slayers.%lld.ple.ple_embedding.ngram_embedding.shard_0.weight", f->pfx, (long long)l);
        const struct st_tensor *s0 = st_find(f->st, n);
        if (!s0) continue;
        int64_t per = s0->shape[0];
        snprintf(n, sizeof n, "%slayers.%lld.ple.ple_embedding.ngram_embedding.shard_%lld.weight", f->pfx, (long long)l,
                 (long long)(i1 / per));
        return hf(f, n, (i1 % per) * t->ne[0] + i0);
    }
    cr_assert_fail("no PLE table shards in the checkpoint");
    return 0;
}

/* Converts a checkpoint folder to f32 and checks every element of every
 * tensor, and the GDN head sizes' keys (ssm.state_size = dk, ssm.inner_size
 * = Hv·dv). */
static void check_checkpoint_f32(const char *dir, const char *pfx, int64_t hk, int64_t g, int64_t dk, int64_t dv,
                                 int64_t C, int64_t I, int64_t nh_i, int64_t di, int64_t n_layers, int64_t expect_tensors)
{
    const char *out = tmp_path("f32.gguf");
    convert_dir(dir, "f32", out);
    char err[512];
    gguf_file *g_ = NULL;
    st_set *st = NULL;
    cr_assert_eq(gguf_open(out, &g_, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_open(dir, &st, err, sizeof err), 0, "%s", err);
    uint32_t state_size = 0, inner = 0, rank = 0;
    cr_assert_eq(gguf_get_u32(g_, "qwen4exp.ssm.state_size", &state_size, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_get_u32(g_, "qwen4exp.ssm.inner_size", &inner, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_get_u32(g_, "qwen4exp.ssm.time_step_rank", &rank, err, sizeof err), 0, "%s", err);
    cr_assert_eq(state_size, dk, "ssm.state_size %u, dk is %lld", state_size, (long long)dk);
    cr_assert_eq(rank, hk * g, "ssm.time_step_rank %u, Hv is %lld", rank, (long long)(hk * g));
    cr_assert_eq(inner, hk * g * dv, "ssm.inner_size %u, Hv·dv is %lld", inner, (long long)(hk * g * dv));
    struct fx f = {st, pfx, hk, g, dk, dv, C, I, nh_i, di, n_layers, calloc((size_t)st_count(st), 1)};
    cr_assert_eq(gguf_tensor_count(g_), expect_tensors, "%lld tensors, the layout has %lld", (long long)gguf_tensor_count(g_),
                 (long long)expect_tensors);
    int64_t checked = 0;
    for (int64_t ti = 0; ti < gguf_tensor_count(g_); ti++) {
        const struct gguf_tensor *t = gguf_tensor_at(g_, ti);
        cr_assert_eq(t->type, QT_F32, "%s is %s in an f32 conversion", t->name, quant_type_name(t->type));
        const float *v = t->data;
        int blk = -1, off = 0;
        char L[128];
        if (sscanf(t->name, "blk.%d.%n", &blk, &off) == 1 && off > 0) {
            if (blk < n_layers) snprintf(L, sizeof L, "%slayers.%d.", pfx, blk);
            else snprintf(L, sizeof L, "mtp.layers.0.");
        }
        for (int64_t i2 = 0; i2 < t->ne[2] * t->ne[3]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    bool fold = false, negexp = false;
                    double e = blk >= 0 ? expect(&f, t->name + off, L, t->ne, i0, i1, i2, &fold, &negexp)
                                        : expect_global(&f, t, i0, i1 + i2 * t->ne[1], &fold);
                    float want = fold ? 1.0f + (float)e : negexp ? -expf((float)e) : (float)e;
                    float got = v[(i2 * t->ne[1] + i1) * t->ne[0] + i0];
                    if (negexp) cr_assert(fabsf(got - want) <= 1e-6f * fabsf(want), "%s[%lld]: %g vs %g", t->name, (long long)i0, got, want);
                    else cr_assert(got == want, "%s[%lld,%lld,%lld]: %.9g, expected %.9g", t->name, (long long)i0,
                                   (long long)i1, (long long)i2, got, want);
                    checked++;
                }
    }
    for (int64_t i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_at(st, i);
        bool skip = strstr(t->name, "model.visual.") == t->name || t->dtype == ST_I64; /* vision; PLE constants are keys */
        cr_assert(skip || f.used[i], "HF tensor %s was not converted", t->name);
    }
    cr_log_info("%s: %lld values checked", dir, (long long)checked);
    free(f.used);
    st_close(st);
    gguf_close(g_);
}

static void check_fixture_f32(const char *fixture, const char *pfx, int64_t hk, int64_t g, int64_t dv, int64_t C,
                              int64_t I, int64_t nh_i, int64_t di, int64_t n_layers, int64_t expect_tensors)
{
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", fixture);
    check_checkpoint_f32(dir, pfx, hk, g, dv, dv, C, I, nh_i, di, n_layers, expect_tensors);
}

/* Tensor count of the layout (docs/CONVERSION.md §3.7): 8 HC + 8 MoE per block,
 * 9 GDN or 10 QSA (with indexer), 6 PLE, 6 global, MTP 6 + a QSA block. */
static int64_t layout_count(int gdn, int qsa, bool mtp) { return gdn * 25 + qsa * 26 + 6 + 6 + (mtp ? 6 + 26 : 0); }

Test(convert, tiny_a_every_value)
{
    check_fixture_f32("tiny-a", "model.", 2, 3, 16, 64, 32, 4, 16, 4, layout_count(3, 1, false));
}

Test(convert, tiny_b_fused_experts_sharded_mtp)
{
    check_fixture_f32("tiny-b", "model.", 2, 2, 8, 48, 16, 3, 12, 5, layout_count(3, 2, true));
}

Test(convert, tiny_b_vl_released_layout)
{
    check_fixture_f32("tiny-b-vl", "model.language_model.", 2, 2, 8, 48, 16, 3, 12, 5, layout_count(3, 2, true));
}

/* ---------- dk ≠ dv: a real checkpoint made here ---------- */

/* tiny-a's checkpoint with GDN key head size dk and value head size dv:
 * config.json edited, the five GDN tensors whose shapes depend on them
 * (in_proj_qkv, conv1d, in_proj_z, norm, out_proj) written at the new shapes
 * with seeded values, every other tensor copied byte for byte — a
 * safetensors checkpoint as save_pretrained would write one (no fixture with
 * dk ≠ dv exists yet).  Returns the folder. */
static const char *write_gdn_dims_checkpoint(int64_t dk, int64_t dv)
{
    char name[64], path[512], err[256];
    snprintf(name, sizeof name, "ckpt-dk%lld-dv%lld", (long long)dk, (long long)dv);
    static char dir[256];
    snprintf(dir, sizeof dir, "%s", tmp_path(name));
    cr_assert(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    /* config.json */
    size_t len;
    char *text = slurp("tests/fixtures/tiny-a/config.json", &len);
    text = realloc(text, len + 1);
    text[len] = 0;
    cJSON *cfg = cJSON_Parse(text);
    cr_assert(cfg);
    const int64_t hk = (int64_t)cJSON_GetObjectItem(cfg, "linear_num_key_heads")->valuedouble,
                  hv = (int64_t)cJSON_GetObjectItem(cfg, "linear_num_value_heads")->valuedouble,
                  C = (int64_t)cJSON_GetObjectItem(cfg, "hidden_size")->valuedouble,
                  K = (int64_t)cJSON_GetObjectItem(cfg, "linear_conv_kernel_dim")->valuedouble;
    cJSON_ReplaceItemInObject(cfg, "linear_key_head_dim", cJSON_CreateNumber((double)dk));
    cJSON_ReplaceItemInObject(cfg, "linear_value_head_dim", cJSON_CreateNumber((double)dv));
    char *out = cJSON_Print(cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    spit(path, out, strlen(out));
    free(out), free(text);
    cJSON_Delete(cfg);
    /* model.safetensors: header entries and the data, tensor by tensor */
    st_set *st;
    cr_assert_eq(st_open("tests/fixtures/tiny-a", &st, err, sizeof err), 0, "%s", err);
    const int64_t conv_dim = 2 * hk * dk + hv * dv;
    cJSON *hdr = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t cap = 1 << 20, used = 0;
    uint8_t *data = malloc(cap);
    uint64_t seed = 0x243F6A8885A308D3ull;
    for (int64_t i = 0; i < st_count(st); i++) {
        const struct st_tensor *t = st_at(st, i);
        const char *la = strstr(t->name, ".linear_attn.");
        const char *w = la ? la + strlen(".linear_attn.") : "";
        int64_t shape[3] = {0};
        int nd = 0;
        if (!strcmp(w, "in_proj_qkv.weight")) nd = 2, shape[0] = conv_dim, shape[1] = C;
        else if (!strcmp(w, "conv1d.weight")) nd = 3, shape[0] = conv_dim, shape[1] = 1, shape[2] = K;
        else if (!strcmp(w, "in_proj_z.weight")) nd = 2, shape[0] = hv * dv, shape[1] = C;
        else if (!strcmp(w, "norm.weight")) nd = 1, shape[0] = dv;
        else if (!strcmp(w, "out_proj.weight")) nd = 2, shape[0] = C, shape[1] = hv * dv;
        size_t bytes = nd ? 4 : (size_t)t->nbytes;
        for (int d = 0; d < nd; d++) bytes *= (size_t)shape[d];
        while (used + bytes > cap) data = realloc(data, cap *= 2);
        if (nd) {
            const bool norm = !strcmp(w, "norm.weight"); /* used plain: values near 1 */
            float *v = (float *)(data + used);
            for (size_t k = 0; k < bytes / 4; k++) { /* xorshift: distinct values, so a misplaced row shows */
                seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                double u = (double)(seed >> 11) / 9007199254740992.0 - 0.5;
                v[k] = norm ? (float)(1 + 0.2 * u) : (float)(0.5 * u);
            }
        } else {
            memcpy(data + used, t->data, bytes);
        }
        cJSON *e = cJSON_AddObjectToObject(hdr, t->name);
        cJSON_AddStringToObject(e, "dtype", nd ? "F32" : st_dtype_name(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < (nd ? nd : t->n_dims); d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)(nd ? shape[d] : t->shape[d])));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)used));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(used + bytes)));
        used += bytes;
    }
    st_close(st);
    char *h = cJSON_PrintUnformatted(hdr);
    cJSON_Delete(hdr);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "create %s", path);
    uint64_t n8 = padded;
    uint8_t le[8];
    for (int b = 0; b < 8; b++) le[b] = (uint8_t)(n8 >> (8 * b));
    cr_assert(fwrite(le, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl);
    for (size_t k = hl; k < padded; k++) fputc(' ', f);
    cr_assert(fwrite(data, 1, used, f) == used);
    cr_assert(fclose(f) == 0);
    free(h), free(data);
    return dir;
}

/* Every value of a dk ≠ dv conversion, both ways round and with neither size
 * dividing the other: q/k rows dk wide, v rows (tiled by value head) dv wide. */
Test(convert, gdn_values_wider_than_keys)
{
    check_checkpoint_f32(write_gdn_dims_checkpoint(16, 24), "model.", 2, 3, 16, 24, 64, 32, 4, 16, 4, layout_count(3, 1, false));
}

Test(convert, gdn_values_narrower_than_keys)
{
    check_checkpoint_f32(write_gdn_dims_checkpoint(24, 16), "model.", 2, 3, 24, 16, 64, 32, 4, 16, 4, layout_count(3, 1, false));
}

Test(convert, gdn_values_narrower_and_not_dividing)
{
    check_checkpoint_f32(write_gdn_dims_checkpoint(16, 12), "model.", 2, 3, 16, 12, 64, 32, 4, 16, 4, layout_count(3, 1, false));
}

/* The released layout holds tiny-b's weights: the two conversions must carry
 * byte-identical tensors. */
Test(convert, released_layout_equals_text_layout)
{
    const char *a = tmp_path("b.gguf"), *b = tmp_path("bvl.gguf");
    convert("tiny-b", "bf16", a);
    convert("tiny-b-vl", "bf16", b);
    char err[256];
    gguf_file *ga, *gb;
    cr_assert_eq(gguf_open(a, &ga, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_open(b, &gb, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_tensor_count(ga), gguf_tensor_count(gb));
    for (int64_t i = 0; i < gguf_tensor_count(ga); i++) {
        const struct gguf_tensor *x = gguf_tensor_at(ga, i), *y = gguf_find_tensor(gb, x->name);
        cr_assert(y, "%s missing from the released-layout conversion", x->name);
        cr_assert(x->type == y->type && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes), "%s differs", x->name);
    }
    gguf_close(ga);
    gguf_close(gb);
}

/* Quantized conversions: the mix puts each role in its type (with block-size
 * fallbacks) and every tensor decodes close to the f32 conversion. */
static void check_quantized(const char *fixture, const char *type)
{
    const char *ref = tmp_path("ref.gguf"), *q = tmp_path("q.gguf");
    convert(fixture, "f32", ref);
    convert(fixture, type, q);
    char err[256];
    gguf_file *gr, *gq;
    cr_assert_eq(gguf_open(ref, &gr, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_open(q, &gq, err, sizeof err), 0, "%s", err);
    for (int64_t i = 0; i < gguf_tensor_count(gq); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(gq, i), *r = gguf_find_tensor(gr, t->name);
        const struct quant_traits *tr = quant_traits_of(t->type);
        cr_assert(r && tr && tr->to_float, "%s", t->name);
        bool f32_role = t->n_dims == 1 || strstr(t->name, "_norm") || strstr(t->name, "ffn_gate_inp") || strstr(t->name, "conv1d");
        if (f32_role) cr_assert_eq(t->type, QT_F32, "%s must stay f32, is %s", t->name, quant_type_name(t->type));
        int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        float *row = malloc((size_t)n * sizeof *row);
        size_t rb = quant_row_size(t->type, n);
        /* Allowed error per row, from the number of levels of the format. */
        double frac = t->type == QT_F32 ? 0 : t->type == QT_BF16 ? 1.0 / 128 : t->type == QT_Q8_0 ? 1.0 / 100 : 1.0 / 6;
        for (int64_t k = 0; k < rows; k++) {
            const float *want = (const float *)r->data + k * n;
            tr->to_float((const char *)t->data + (size_t)k * rb, row, n);
            double amax = 0;
            for (int64_t j = 0; j < n; j++) amax = fmax(amax, fabs(want[j]));
            for (int64_t j = 0; j < n; j++)
                cr_assert(fabs(row[j] - want[j]) <= frac * amax + 1e-30, "%s row %lld [%lld]: %g vs %g (%s)", t->name,
                          (long long)k, (long long)j, row[j], want[j], quant_type_name(t->type));
        }
        free(row);
    }
    gguf_close(gr);
    gguf_close(gq);
}

Test(convert, q8_0_decodes_close) { check_quantized("tiny-a", "q8_0"); }

Test(convert, mix_types_by_role)
{
    check_quantized("tiny-a", "mix");
    const char *q = tmp_path("mix.gguf");
    convert("tiny-a", "mix", q);
    char err[256];
    gguf_file *g;
    cr_assert_eq(gguf_open(q, &g, err, sizeof err), 0, "%s", err);
    /* tiny-a rows are 64 wide: q4_K (256) falls back to q5_0; the table's 16 to bf16. */
    cr_assert_eq(gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight")->type, QT_Q5_0);
    cr_assert_eq(gguf_find_tensor(g, "blk.0.ffn_down_exps.weight")->type, QT_Q5_1); /* rows of 32: q5_1 fits */
    cr_assert_eq(gguf_find_tensor(g, "blk.3.attn_q.weight")->type, QT_Q8_0);
    cr_assert_eq(gguf_find_tensor(g, "blk.3.indexer.q_proj.weight")->type, QT_BF16);
    cr_assert_eq(gguf_find_tensor(g, "per_layer_token_embd.weight")->type, QT_BF16);
    uint32_t ft;
    cr_assert_eq(gguf_get_u32(g, "general.file_type", &ft, err, sizeof err), 0);
    cr_assert_eq(ft, 15);
    gguf_close(g);
}
