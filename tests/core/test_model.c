/* test_model.c — core/model: hyperparameters and tensor binding of qwen4exp
 * GGUFs.  Good files are the transformers fixtures converted to GGUF; broken
 * ones are copies of them with one thing changed, and each must fail with a
 * message naming what is wrong. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "tests/core/model_fixture.h"
#include "tests/core/tmpfiles.h"

TestSuite(model, .init = tmp_setup, .fini = tmp_teardown);

static struct model *open_ok(const char *path)
{
    char err[256];
    struct model *m = NULL;
    cr_assert_eq(model_open(path, &m, err, sizeof err), 0, "%s: %s", path, err);
    return m;
}

/* Opens an edited copy of the fixture and expects failure with `code` and a
 * message containing `want`. */
static void expect_error(const char *fixture, const struct fx_edits *ed, int code, const char *want)
{
    const char *path = tmp_path("broken.gguf");
    fx_gguf_copy(fixture_gguf(fixture), path, ed);
    char err[256] = "";
    struct model *m = NULL;
    int rc = model_open(path, &m, err, sizeof err);
    cr_assert_eq(rc, code, "rc %d (%s), expected %d", rc, err, code);
    cr_assert_null(m);
    cr_assert(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
}

Test(model, tiny_a_hyperparameters)
{
    struct model *m = open_ok(fixture_gguf("tiny-a"));
    const struct model_hparams *hp = &m->hp;
    cr_expect_eq(hp->n_vocab, 512);
    cr_expect_eq(hp->n_embd, 64);
    cr_expect_eq(hp->n_layer, 4);
    cr_expect_eq(hp->n_nextn, 0);
    cr_expect_eq(hp->hc_count, 4);
    cr_expect_eq(hp->hc_rank, 16);
    cr_expect_eq(hp->n_head, 4);
    cr_expect_eq(hp->n_head_kv, 2);
    cr_expect_eq(hp->head_dim, 32);
    cr_expect_eq(hp->rope_dim, 8);
    cr_expect_float_eq(hp->rope_theta, 1e7f, 1.0f);
    cr_expect_eq(hp->ssm_n_k_heads, 2);
    cr_expect_eq(hp->ssm_n_v_heads, 6);
    cr_expect_eq(hp->ssm_k_head_dim, 16);
    cr_expect_eq(hp->ssm_v_head_dim, 16);
    cr_expect_eq(hp->n_expert, 8);
    cr_expect_eq(hp->n_expert_used, 2);
    cr_expect_eq(hp->idx_n_head, 4);
    cr_expect_eq(hp->idx_head_dim, 16);
    cr_expect_eq(hp->idx_top_k, 16);
    const enum model_layer_kind kinds[] = {MODEL_LAYER_GDN, MODEL_LAYER_GDN, MODEL_LAYER_GDN, MODEL_LAYER_ATTN};
    for (int i = 0; i < 4; i++) cr_expect_eq(m->layers[i].kind, kinds[i], "layer %d", i);
    cr_expect_eq(m->layers[3].compress_ratio, 4);
    /* PLE: the u64 constants exactly (45+ significant bits: never through float) */
    cr_expect_eq(hp->ple_layer, 1);
    cr_expect(m->layers[1].has_ple);
    cr_expect_eq(hp->ple_ngram, 3);
    cr_expect_eq(hp->ple_n_heads, 4);
    cr_expect_eq(hp->ple_row_width, 16);
    cr_expect_eq(hp->ple_embd, 64);
    cr_expect_eq(hp->ple_dilation, 3);
    cr_expect_eq(hp->ple_eos, 500);
    cr_expect_eq(hp->ple_mult[0], 4295158889763781LL);
    cr_expect_eq(hp->ple_mult[1], 17440218147737327LL);
    cr_expect_eq(hp->ple_mult[2], 1270917961434445LL);
    const int64_t off[] = {0, 31, 68, 109}, voc[] = {31, 37, 41, 43};
    for (int h = 0; h < 4; h++) cr_expect(hp->ple_offset[h] == off[h] && hp->ple_vocab[h] == voc[h], "head %d", h);
    cr_expect_eq(m->ple_table.ne[1], 160);
    /* semantic slots hold the right tensors */
    cr_expect_str_eq(m->layers[3].attn.q.name, "blk.3.attn_q.weight");
    cr_expect_eq(m->layers[3].attn.q.ne[1], 2 * 4 * 32);
    cr_expect_str_eq(m->layers[0].gdn.a.name, "blk.0.ssm_a");
    cr_expect_str_eq(m->layers[2].moe.down_exps.name, "blk.2.ffn_down_exps.weight");
    cr_expect_eq(m->layers[2].moe.down_exps.mat_bytes, 64 * 32 * sizeof(float));
    cr_expect_null(m->layers[0].attn.q.data);
    model_close(m);
}

Test(model, tiny_b_mtp_and_ple_width)
{
    struct model *m = open_ok(fixture_gguf("tiny-b"));
    const struct model_hparams *hp = &m->hp;
    cr_expect_eq(hp->n_layer, 5);
    cr_expect_eq(hp->n_nextn, 1);
    cr_expect_float_eq(hp->rms_eps, 1e-5f, 1e-12f);
    cr_expect_eq(hp->hc_count, 3);
    cr_expect_eq(hp->n_ff_exp, 16);
    cr_expect_eq(hp->n_ff_shexp, 24);
    cr_expect_eq(hp->ple_layer, 2);
    cr_expect_eq(hp->ple_embd, 36, "P = NH·W = 6·6, not C");
    cr_expect_eq(hp->ple_conv_kernel, 3);
    cr_expect_eq(hp->ple_eos, 600, "first eos of the config's list");
    cr_expect_eq(m->layers[1].compress_ratio, 3);
    cr_expect_eq(m->layers[4].compress_ratio, 3);
    const struct model_layer *mtp = &m->layers[5];
    cr_expect(mtp->is_nextn);
    cr_expect_eq(mtp->kind, MODEL_LAYER_ATTN);
    cr_expect_eq(mtp->compress_ratio, 0, "the MTP block attends densely");
    cr_expect_not_null(mtp->nextn.eh_proj.data);
    cr_expect_not_null(mtp->nextn.head.down.data);
    cr_expect_str_eq(mtp->nextn.head.norm.name, "blk.5.nextn.hc_head_norm.weight");
    cr_expect_not(m->nextn_uses_trunk_head);
    cr_expect_null(mtp->nextn.embed_tokens.data);
    model_close(m);
}

/* model_keep_layers: the first n layers and the head; the MTP block dropped;
 * the n-gram layer (2 in tiny-b) and its table only when among them. */
Test(model, keep_first_layers)
{
    char err[256];
    struct model *m = open_ok(fixture_gguf("tiny-b"));
    cr_expect_eq(model_keep_layers(m, 0, err, sizeof err), NB_EINVAL);
    cr_expect_eq(model_keep_layers(m, 6, err, sizeof err), NB_EINVAL);
    cr_expect(strstr(err, "the model has 5 layers (give 1 to 5), not 6"), "%s", err);
    cr_expect_eq(m->hp.n_layer, 5, "a refused call changes nothing");
    cr_assert_eq(model_keep_layers(m, 3, err, sizeof err), 0, "%s", err);
    cr_expect_eq(m->hp.n_layer, 3);
    cr_expect_eq(m->hp.n_nextn, 0);
    cr_expect_eq(m->hp.ple_layer, 2, "the n-gram layer is among the first 3");
    cr_expect_not_null(m->ple_table.data);
    cr_expect_not_null(m->output.data, "the head stays");
    cr_assert_eq(model_keep_layers(m, 2, err, sizeof err), 0, "%s", err);
    cr_expect_eq(m->hp.n_layer, 2);
    cr_expect_eq(m->hp.ple_layer, -1, "the n-gram layer is not among the first 2");
    cr_expect_null(m->ple_table.data);
    model_close(m);
}

/* GDN key and value heads of different sizes (synthetic models of tiny-a's
 * shapes): dk from ssm.state_size, dv = ssm.inner_size / ssm.time_step_rank,
 * and every GDN tensor bound at the size its head kind implies. */
static void gdn_dims(int dk, int dv)
{
    struct model *m = open_ok(fixture_gguf_gdn_dims("tiny-a", dk, dv));
    const struct model_hparams *hp = &m->hp;
    char err[256];
    uint32_t state_size, inner;
    cr_assert_eq(gguf_get_u32(m->gguf, "qwen4exp.ssm.state_size", &state_size, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gguf_get_u32(m->gguf, "qwen4exp.ssm.inner_size", &inner, err, sizeof err), 0, "%s", err);
    cr_expect_eq(state_size, (uint32_t)dk, "ssm.state_size carries dk");
    cr_expect_eq(inner, (uint32_t)(6 * dv), "ssm.inner_size carries Hv·dv");
    cr_expect_eq(hp->ssm_n_k_heads, 2);
    cr_expect_eq(hp->ssm_n_v_heads, 6);
    cr_expect_eq(hp->ssm_k_head_dim, dk);
    cr_expect_eq(hp->ssm_v_head_dim, dv);
    const int64_t conv_dim = 2 * 2 * dk + 6 * dv;
    cr_expect_eq(model_gdn_conv_dim(hp), conv_dim);
    cr_expect_eq(model_gdn_ssm_state_floats(hp), 6 * dk * dv);
    const struct model_gdn *w = &m->layers[0].gdn;
    cr_expect_eq(w->qkv.ne[1], conv_dim);
    cr_expect_eq(w->conv.ne[1], conv_dim);
    cr_expect_eq(w->gate.ne[1], 6 * dv);
    cr_expect_eq(w->out.ne[0], 6 * dv);
    cr_expect_eq(w->norm.ne[0], dv, "the gated norm is over a value head");
    model_close(m);
}

Test(model, gdn_value_heads_wider_than_key_heads) { gdn_dims(16, 24); }
Test(model, gdn_value_heads_narrower_than_key_heads) { gdn_dims(24, 16); }

static bool keep_all_but_inner(const char *key, void *ctx) { return strcmp(key, "qwen4exp.ssm.inner_size") != 0; }
static void odd_inner(gguf_writer *w, void *ctx) { gguf_w_set_u32(w, "qwen4exp.ssm.inner_size", 6 * 24 + 1); }

Test(model, gdn_inner_size_must_split_into_value_heads)
{
    const char *path = tmp_path("odd-inner.gguf");
    struct fx_edits ed = {.keep_key = keep_all_but_inner, .add_keys = odd_inner};
    fx_gguf_copy(fixture_gguf_gdn_dims("tiny-a", 16, 24), path, &ed);
    char err[256] = "";
    struct model *m = NULL;
    cr_assert_eq(model_open(path, &m, err, sizeof err), NB_EFORMAT, "%s", err);
    cr_assert(strstr(err, "qwen4exp.ssm.inner_size 145 is not a multiple of qwen4exp.ssm.time_step_rank 6"), "%s", err);
}

/* A norm of key-head size where the value head size is due (dk = 16, dv = 24). */
static bool key_sized_norm(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (strcmp(t->name, "blk.2.ssm_norm.weight") == 0) t->ne[0] = 16; /* data: the first 16 values */
    return true;
}

Test(model, gdn_norm_of_the_key_head_size_is_named)
{
    const char *path = tmp_path("key-norm.gguf");
    struct fx_edits ed = {.edit_tensor = key_sized_norm};
    fx_gguf_copy(fixture_gguf_gdn_dims("tiny-a", 16, 24), path, &ed);
    char err[256] = "";
    struct model *m = NULL;
    cr_assert_eq(model_open(path, &m, err, sizeof err), NB_EFORMAT, "%s", err);
    cr_assert(strstr(err, "blk.2.ssm_norm.weight: expected 24, got 16"), "%s", err);
}

/* ---------- broken copies ---------- */

struct drop {
    const char *key, *tensor_prefix;
};
static bool drop_key(const char *key, void *ctx) { return strcmp(key, ((struct drop *)ctx)->key) != 0; }
static bool drop_tensor(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    const char *p = ((struct drop *)ctx)->tensor_prefix;
    return strncmp(t->name, p, strlen(p)) != 0;
}

Test(model, missing_key_is_named)
{
    struct drop d = {"qwen4exp.attention.head_count", NULL};
    struct fx_edits ed = {.keep_key = drop_key, .ctx = &d};
    expect_error("tiny-a", &ed, NB_ENOENT, "qwen4exp.attention.head_count: required key missing");
}

Test(model, missing_ple_key_is_named)
{
    struct drop d = {"qwen4exp.ple.layer_multipliers", NULL};
    struct fx_edits ed = {.keep_key = drop_key, .ctx = &d};
    expect_error("tiny-a", &ed, NB_ENOENT, "qwen4exp.ple.layer_multipliers");
}

Test(model, missing_tensor_is_named)
{
    struct drop d = {NULL, "blk.2.ssm_out.weight"};
    struct fx_edits ed = {.edit_tensor = drop_tensor, .ctx = &d};
    expect_error("tiny-a", &ed, NB_ENOENT, "blk.2.ssm_out.weight: required tensor missing");
}

static bool halve_attn_q(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (strcmp(t->name, "blk.3.attn_q.weight") == 0) t->ne[1] /= 2; /* data: the first half of the original */
    return true;
}

Test(model, wrong_shape_is_named_with_both_shapes)
{
    struct fx_edits ed = {.edit_tensor = halve_attn_q};
    expect_error("tiny-a", &ed, NB_EFORMAT, "blk.3.attn_q.weight: expected 64×256, got 64×128");
}

static bool i32_router(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (strcmp(t->name, "blk.1.ffn_gate_inp.weight") == 0) t->type = QT_I32; /* same bytes per value as f32 */
    return true;
}

Test(model, type_without_decoder_is_named)
{
    struct fx_edits ed = {.edit_tensor = i32_router};
    expect_error("tiny-a", &ed, NB_ENOTSUP, "blk.1.ffn_gate_inp.weight: type i32");
}

static bool keep_all_but_arch(const char *key, void *ctx) { return strcmp(key, "general.architecture") != 0; }
static void arch_llama(gguf_writer *w, void *ctx) { gguf_w_set_str(w, "general.architecture", "llama"); }

Test(model, other_architecture_refused)
{
    struct fx_edits ed = {.keep_key = keep_all_but_arch, .add_keys = arch_llama};
    expect_error("tiny-a", &ed, NB_ENOTSUP, "\"llama\"");
}

/* compress_ratios claims layer 2 is QSA while recurrent_layers says GDN. */
static bool keep_all_but_cr(const char *key, void *ctx) { return strcmp(key, "qwen4exp.attention.compress_ratios") != 0; }
static void bad_ratios(gguf_writer *w, void *ctx)
{
    const int32_t cr[] = {0, 0, 4, 4};
    gguf_w_set_arr(w, "qwen4exp.attention.compress_ratios", GGUF_VT_INT32, cr, 4);
}

Test(model, layer_kind_sources_must_agree)
{
    struct fx_edits ed = {.keep_key = keep_all_but_cr, .add_keys = bad_ratios};
    expect_error("tiny-a", &ed, NB_EFORMAT, "layer 2");
}

/* Without recurrent_layers the kinds come from compress_ratios. */
static bool keep_all_but_rec(const char *key, void *ctx) { return strcmp(key, "qwen4exp.attention.recurrent_layers") != 0; }

Test(model, kinds_from_compress_ratios)
{
    const char *path = tmp_path("norec.gguf");
    struct fx_edits ed = {.keep_key = keep_all_but_rec};
    fx_gguf_copy(fixture_gguf("tiny-b"), path, &ed);
    struct model *m = open_ok(path);
    const enum model_layer_kind kinds[] = {MODEL_LAYER_GDN, MODEL_LAYER_ATTN, MODEL_LAYER_GDN, MODEL_LAYER_GDN,
                                           MODEL_LAYER_ATTN, MODEL_LAYER_ATTN};
    for (int i = 0; i < 6; i++) cr_expect_eq(m->layers[i].kind, kinds[i], "layer %d", i);
    model_close(m);
}

static bool short_ple_table(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (strcmp(t->name, "per_layer_token_embd.weight") == 0) t->ne[1] = 100; /* heads reach row 152 */
    return true;
}

Test(model, ple_table_must_cover_every_head)
{
    struct fx_edits ed = {.edit_tensor = short_ple_table};
    expect_error("tiny-a", &ed, NB_EFORMAT, "per_layer_token_embd.weight: expected 16×152, got 16×100");
}

/* ffn_gate_exps + ffn_up_exps → one ffn_gate_up_exps [C, 2I, E], gate rows first per expert. */
static bool fuse_gate_up(struct fx_tensor *t, const gguf_file *g, void *ctx)
{
    if (strstr(t->name, ".ffn_up_exps.")) return false;
    char *at = strstr(t->name, ".ffn_gate_exps.");
    if (!at) return true;
    char up_name[128];
    snprintf(up_name, sizeof up_name, "%.*s.ffn_up_exps.weight", (int)(at - t->name), t->name);
    const struct gguf_tensor *up = gguf_find_tensor(g, up_name);
    cr_assert(up && t->type == QT_F32);
    size_t mat = (size_t)(t->ne[0] * t->ne[1]) * sizeof(float);
    uint8_t *fused = malloc(2 * mat * (size_t)t->ne[2]);
    for (int64_t e = 0; e < t->ne[2]; e++) {
        memcpy(fused + 2 * mat * e, (const uint8_t *)t->data + mat * e, mat);
        memcpy(fused + 2 * mat * e + mat, (const uint8_t *)up->data + mat * e, mat);
    }
    snprintf(at, sizeof t->name - (size_t)(at - t->name), ".ffn_gate_up_exps.weight");
    t->ne[1] *= 2;
    t->data = fused;
    t->owned = true;
    return true;
}

Test(model, fused_gate_up_experts_become_views)
{
    const char *path = tmp_path("fused.gguf");
    struct fx_edits ed = {.edit_tensor = fuse_gate_up};
    fx_gguf_copy(fixture_gguf("tiny-a"), path, &ed);
    struct model *fused = open_ok(path), *plain = open_ok(fixture_gguf("tiny-a"));
    const struct model_moe *f = &fused->layers[2].moe, *p = &plain->layers[2].moe;
    cr_assert(f->fused_gate_up);
    cr_assert_not(p->fused_gate_up);
    cr_assert_eq(f->gate_exps.ne[1], p->gate_exps.ne[1]);
    for (int e = 0; e < 8; e++) {
        size_t n = (size_t)p->gate_exps.ne[1] * p->gate_exps.row_bytes;
        cr_assert_eq(memcmp(f->gate_exps.data + e * f->gate_exps.mat_bytes, p->gate_exps.data + e * p->gate_exps.mat_bytes, n), 0);
        cr_assert_eq(memcmp(f->up_exps.data + e * f->up_exps.mat_bytes, p->up_exps.data + e * p->up_exps.mat_bytes, n), 0);
    }
    model_close(fused);
    model_close(plain);
}

Test(model, fused_and_plain_experts_both_missing)
{
    struct drop d = {NULL, "blk.0.ffn_gate_exps"};
    struct fx_edits ed = {.edit_tensor = drop_tensor, .ctx = &d};
    expect_error("tiny-a", &ed, NB_ENOENT, "blk.0.ffn_gate_exps.weight: required tensor missing");
}

Test(model, mtp_without_own_head_mixer_uses_the_trunks)
{
    const char *path = tmp_path("nohead.gguf");
    struct drop d = {NULL, "blk.5.nextn.hc_head_"};
    struct fx_edits ed = {.edit_tensor = drop_tensor, .ctx = &d};
    fx_gguf_copy(fixture_gguf("tiny-b"), path, &ed);
    struct model *m = open_ok(path);
    cr_expect(m->nextn_uses_trunk_head);
    cr_expect_eq(m->layers[5].nextn.head.norm.data, m->output_hc.norm.data);
    cr_expect_eq(m->layers[5].nextn.head.up.data, m->output_hc.up.data);
    model_close(m);
}

Test(model, missing_file)
{
    char err[256];
    struct model *m = NULL;
    cr_assert_lt(model_open(tmp_path("nope.gguf"), &m, err, sizeof err), 0);
    cr_assert_null(m);
    cr_assert(strstr(err, "nope.gguf"), "%s", err);
}
