/* plan.c — from a Hugging Face qwen4_exp checkpoint to the list of GGUF
 * tensors in llama.cpp's `qwen4exp` layout (docs/CONVERSION.md §2–3).
 *
 * Each source tensor is looked up once and its torch shape checked against
 * config.json before anything is written, so a wrong checkpoint fails in
 * seconds with the name of the tensor, not hours later. */
#include "tools/nebula-convert/convert.h"

#include "core/util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctx {
    struct conv_plan *p;
    char *err;
    size_t errlen;
};

/* A made-up source tensor for a synthetic model (owned by the plan). */
static const struct st_tensor *virt(struct conv_plan *p, const char *name, int n_dims, const int64_t *shape)
{
    struct conv_synth *s = &p->synth;
    for (int i = 0; i < s->n_virt; i++)
        if (!strcmp(s->virt[i]->name, name)) return s->virt[i];
    if (s->n_virt == s->cap_virt) {
        int cap = s->cap_virt ? 2 * s->cap_virt : 256;
        struct st_tensor **v = realloc(s->virt, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        s->virt = v;
        s->cap_virt = cap;
    }
    struct st_tensor *t = calloc(1, sizeof *t);
    char *copy = strdup(name);
    if (!t || !copy) {
        free(t);
        free(copy);
        return NULL;
    }
    t->name = copy;
    t->dtype = ST_F32;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++) t->shape[i] = shape[i];
    s->virt[s->n_virt++] = t;
    return t; /* data stays NULL: rows.c draws its values */
}

/* Whether the checkpoint has a tensor; a synthetic model has the released
 * layout's optional parts: fused experts, a head, MTP when configured. */
static bool has(const struct conv_plan *p, const char *name)
{
    if (!p->synth.on) return st_find(p->st, name) != NULL;
    if (strstr(name, "mtp.") == name) return p->cfg.mtp_layers > 0;
    return strstr(name, "experts.gate_up_proj") || !strcmp(name, "lm_head.weight") ||
           !strncmp(name, "model.embed_tokens", 18);
}

/* Finds a source tensor and checks its torch shape (dims outermost first;
 * n_dims 0 means "any shape"). */
static const struct st_tensor *need(struct ctx *c, int n_dims, const int64_t *shape, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const struct st_tensor *t = c->p->synth.on ? virt(c->p, name, n_dims, shape) : st_find(c->p->st, name);
    if (!t) {
        nb_errf(c->err, c->errlen, NB_ENOENT, "checkpoint has no tensor \"%s\"", name);
        return NULL;
    }
    bool ok = t->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < n_dims; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        for (int i = 0; i < t->n_dims; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
        nb_errf(c->err, c->errlen, NB_EFORMAT, "tensor \"%s\": shape [%s], config.json implies [%s]", name, got, want);
        return NULL;
    }
    return t;
}

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static struct conv_tensor *add(struct ctx *c, const char *name, int n_dims, const int64_t *ne, enum conv_role role,
                               int n_src, const struct st_tensor **src)
{
    struct conv_plan *p = c->p;
    for (int i = 0; i < n_src; i++)
        if (!src[i]) return NULL;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        struct conv_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        p->t = t;
        p->cap = cap;
    }
    struct conv_tensor *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    for (int i = 0; i < 4; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    t->role = role;
    t->src = malloc((size_t)n_src * sizeof *t->src);
    if (!t->src) return NULL;
    memcpy(t->src, src, (size_t)n_src * sizeof *src);
    t->n_src = n_src;
    p->n++;
    return t;
}

/* One source, rows copied in order (the common case). */
static struct conv_tensor *add1(struct ctx *c, const char *name, int n_dims, const int64_t *ne, enum conv_role role,
                                const struct st_tensor *src)
{
    return add(c, name, n_dims, ne, role, 1, &src);
}

#define NE(...) SHAPE(__VA_ARGS__)

static struct conv_tensor *tile(struct conv_tensor *t, const struct hf_config *cfg, int64_t from, int64_t unit, bool cols)
{
    if (!t) return NULL;
    t->map = cols ? MAP_DIRECT : MAP_TILE;
    t->tile_cols = cols;
    t->tile_from = from;
    t->tile_unit = unit;
    t->tile_hk = cfg->lin_n_k_heads;
    t->tile_g = cfg->lin_n_v_heads / cfg->lin_n_k_heads;
    return t;
}

static struct conv_tensor *with_op(struct conv_tensor *t, enum conv_op op)
{
    if (t) t->op = op;
    return t;
}

/* The input mixer + injection of one hyper-connection (trunk layer or MTP). */
static int add_hc(struct ctx *c, const char *out, const char *hc, bool inject)
{
    const struct hf_config *f = &c->p->cfg;
    int64_t nC = f->hc_count * f->hidden_size, r = f->hc_lowrank;
    char name[160];
    snprintf(name, sizeof name, "%s_norm.weight", out);
    if (!with_op(add1(c, name, NE(nC), ROLE_F32, need(c, SHAPE(nC), "%s.hc_norm.weight", hc)), OP_FOLD)) return -1;
    snprintf(name, sizeof name, "%s_down.weight", out);
    if (!add1(c, name, NE(nC, r), ROLE_DENSE, need(c, SHAPE(r, nC), "%s.input_mix_weight_down.weight", hc))) return -1;
    snprintf(name, sizeof name, "%s_up.weight", out);
    if (!add1(c, name, NE(r, nC), ROLE_DENSE, need(c, SHAPE(nC, r), "%s.input_mix_weight_up.weight", hc))) return -1;
    if (!inject) return 0;
    snprintf(name, sizeof name, "%s_inject.weight", out);
    if (!add1(c, name, NE(nC, f->hc_count), ROLE_DENSE,
              need(c, SHAPE(f->hc_count, nC), "%s.block_inject_weight.weight", hc)))
        return -1;
    return 0;
}

static int add_gdn(struct ctx *c, int blk, const char *L)
{
    const struct hf_config *f = &c->p->cfg;
    int64_t C = f->hidden_size, hk = f->lin_n_k_heads, hv = f->lin_n_v_heads, dk = f->lin_k_head_dim,
            dv = f->lin_v_head_dim, qk = 2 * hk * dk, conv_dim = qk + hv * dv, K = f->lin_conv_kernel;
    char n[160];
#define B(suffix) (snprintf(n, sizeof n, "blk.%d.%s", blk, suffix), n)
    if (!tile(add1(c, B("attn_qkv.weight"), NE(C, conv_dim), ROLE_DENSE,
                   need(c, SHAPE(conv_dim, C), "%slinear_attn.in_proj_qkv.weight", L)), f, qk, dv, false) ||
        !tile(add1(c, B("attn_gate.weight"), NE(C, hv * dv), ROLE_DENSE,
                   need(c, SHAPE(hv * dv, C), "%slinear_attn.in_proj_z.weight", L)), f, 0, dv, false) ||
        !tile(add1(c, B("ssm_beta.weight"), NE(C, hv), ROLE_DENSE,
                   need(c, SHAPE(hv, C), "%slinear_attn.in_proj_b.weight", L)), f, 0, 1, false) ||
        !tile(add1(c, B("ssm_alpha.weight"), NE(C, hv), ROLE_DENSE,
                   need(c, SHAPE(hv, C), "%slinear_attn.in_proj_a.weight", L)), f, 0, 1, false) ||
        !tile(add1(c, B("ssm_conv1d.weight"), NE(K, conv_dim), ROLE_F32,
                   need(c, SHAPE(conv_dim, 1, K), "%slinear_attn.conv1d.weight", L)), f, qk, dv, false) ||
        !tile(add1(c, B("ssm_dt.bias"), NE(hv), ROLE_F32, need(c, SHAPE(hv), "%slinear_attn.dt_bias", L)), f, 0, 1, true) ||
        !with_op(tile(add1(c, B("ssm_a"), NE(hv), ROLE_F32, need(c, SHAPE(hv), "%slinear_attn.A_log", L)), f, 0, 1, true),
                 OP_NEG_EXP) ||
        !add1(c, B("ssm_norm.weight"), NE(dv), ROLE_F32, need(c, SHAPE(dv), "%slinear_attn.norm.weight", L)) ||
        !tile(add1(c, B("ssm_out.weight"), NE(hv * dv, C), ROLE_DENSE,
                   need(c, SHAPE(C, hv * dv), "%slinear_attn.out_proj.weight", L)), f, 0, dv, true))
        return -1;
    return 0;
}

static int add_qsa(struct ctx *c, int blk, const char *L)
{
    const struct hf_config *f = &c->p->cfg;
    int64_t C = f->hidden_size, hq = f->n_head, hkv = f->n_head_kv, D = f->head_dim, hi = f->idx_heads,
            di = f->idx_head_dim;
    char n[160];
    if (!add1(c, B("attn_q.weight"), NE(C, 2 * hq * D), ROLE_DENSE, need(c, SHAPE(2 * hq * D, C), "%sself_attn.q_proj.weight", L)) ||
        !add1(c, B("attn_k.weight"), NE(C, hkv * D), ROLE_DENSE, need(c, SHAPE(hkv * D, C), "%sself_attn.k_proj.weight", L)) ||
        !add1(c, B("attn_v.weight"), NE(C, hkv * D), ROLE_DENSE, need(c, SHAPE(hkv * D, C), "%sself_attn.v_proj.weight", L)) ||
        !add1(c, B("attn_output.weight"), NE(hq * D, C), ROLE_DENSE, need(c, SHAPE(C, hq * D), "%sself_attn.o_proj.weight", L)) ||
        !with_op(add1(c, B("attn_q_norm.weight"), NE(D), ROLE_F32, need(c, SHAPE(D), "%sself_attn.q_norm.weight", L)), OP_FOLD) ||
        !with_op(add1(c, B("attn_k_norm.weight"), NE(D), ROLE_F32, need(c, SHAPE(D), "%sself_attn.k_norm.weight", L)), OP_FOLD))
        return -1;
    if (!f->has_indexer) return 0;
    const struct st_tensor *qk = need(c, SHAPE((hi + 1) * di, C), "%sself_attn.indexer.index_qk_proj.weight", L);
    struct conv_tensor *kt;
    if (!add1(c, B("indexer.q_proj.weight"), NE(C, hi * di), ROLE_INDEXER, qk) ||
        !(kt = add1(c, B("indexer.k_proj.weight"), NE(C, di), ROLE_INDEXER, qk)) ||
        !with_op(add1(c, B("indexer.q_norm.weight"), NE(di), ROLE_F32, need(c, SHAPE(di), "%sself_attn.indexer.q_layernorm.weight", L)), OP_FOLD) ||
        !with_op(add1(c, B("indexer.k_norm.weight"), NE(di), ROLE_F32, need(c, SHAPE(di), "%sself_attn.indexer.k_layernorm.weight", L)), OP_FOLD))
        return -1;
    kt->row_off = hi * di; /* the single raw key follows the query heads */
    return 0;
}

static int add_moe(struct ctx *c, int blk, const char *L)
{
    const struct hf_config *f = &c->p->cfg;
    int64_t C = f->hidden_size, E = f->n_experts, I = f->expert_ff, Is = f->shared_ff;
    char n[160], src[200];
    if (!add1(c, B("ffn_gate_inp.weight"), NE(C, E), ROLE_F32, need(c, SHAPE(E, C), "%smlp.gate.weight", L))) return -1;
    snprintf(src, sizeof src, "%smlp.experts.gate_up_proj", L);
    if (has(c->p, src)) { /* fused layout of the released checkpoint */
        const struct st_tensor *gu = need(c, SHAPE(E, 2 * I, C), "%s", src);
        const struct st_tensor *dn = need(c, SHAPE(E, C, I), "%smlp.experts.down_proj", L);
        struct conv_tensor *g = add1(c, B("ffn_gate_exps.weight"), NE(C, I, E), ROLE_EXPERT_GATEUP, gu);
        struct conv_tensor *u = add1(c, B("ffn_up_exps.weight"), NE(C, I, E), ROLE_EXPERT_GATEUP, gu);
        if (!g || !u || !add1(c, B("ffn_down_exps.weight"), NE(I, C, E), ROLE_EXPERT_DOWN, dn)) return -1;
        g->map = u->map = MAP_FUSED_EXPERT;
        g->rows_per = u->rows_per = 2 * I;
        g->fe_n = u->fe_n = I;
        u->fe_off = I;
    } else { /* per expert, as transformers' save_pretrained writes it */
        const struct st_tensor **lists[3];
        static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
        static const char *out[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
        for (int k = 0; k < 3; k++) {
            lists[k] = malloc((size_t)E * sizeof **lists);
            if (!lists[k]) return nb_errf(c->err, c->errlen, NB_ENOMEM, "out of memory");
            for (int64_t e = 0; e < E; e++) {
                lists[k][e] = k < 2 ? need(c, SHAPE(I, C), "%smlp.experts.%lld.%s.weight", L, (long long)e, proj[k])
                                    : need(c, SHAPE(C, I), "%smlp.experts.%lld.%s.weight", L, (long long)e, proj[k]);
                if (!lists[k][e]) break;
            }
            struct conv_tensor *t = k < 2 ? add(c, B(out[k]), NE(C, I, E), ROLE_EXPERT_GATEUP, (int)E, lists[k])
                                          : add(c, B(out[k]), NE(I, C, E), ROLE_EXPERT_DOWN, (int)E, lists[k]);
            free(lists[k]);
            if (!t) return -1;
            t->map = MAP_LIST;
            t->rows_per = k < 2 ? I : C;
        }
    }
    if (!add1(c, B("ffn_gate_inp_shexp.weight"), NE(C), ROLE_F32, need(c, SHAPE(1, C), "%smlp.shared_expert_gate.weight", L)) ||
        !add1(c, B("ffn_gate_shexp.weight"), NE(C, Is), ROLE_DENSE, need(c, SHAPE(Is, C), "%smlp.shared_expert.gate_proj.weight", L)) ||
        !add1(c, B("ffn_up_shexp.weight"), NE(C, Is), ROLE_DENSE, need(c, SHAPE(Is, C), "%smlp.shared_expert.up_proj.weight", L)) ||
        !add1(c, B("ffn_down_shexp.weight"), NE(Is, C), ROLE_DENSE, need(c, SHAPE(C, Is), "%smlp.shared_expert.down_proj.weight", L)))
        return -1;
    return 0;
}

/* Hyper-connections, mixer and MoE of one block; `hfp` is the HF layer prefix. */
static int add_block(struct ctx *c, int blk, const char *hfp, bool linear)
{
    char out[64], hc[200];
    snprintf(out, sizeof out, "blk.%d.hc_attn", blk);
    snprintf(hc, sizeof hc, "%sattn_hyper_connection", hfp);
    if (add_hc(c, out, hc, true)) return -1;
    snprintf(out, sizeof out, "blk.%d.hc_ffn", blk);
    snprintf(hc, sizeof hc, "%smlp_hyper_connection", hfp);
    if (add_hc(c, out, hc, true)) return -1;
    if ((linear ? add_gdn(c, blk, hfp) : add_qsa(c, blk, hfp))) return -1;
    return add_moe(c, blk, hfp);
}

/* The PLE hash constants as transformers derives them (docs/CONVERSION.md
 * §1.4); used when a checkpoint lacks the int64 buffers, and to check them. */
static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static bool is_prime(uint64_t n)
{
    if (n < 2) return false;
    for (uint64_t d = 2; d * d <= n; d++)
        if (n % d == 0) return false;
    return true;
}

static void ple_derive(const struct hf_config *f, int j, uint64_t *mult, uint64_t *sizes, uint64_t *offsets)
{
    uint64_t half = ((uint64_t)INT64_MAX / (uint64_t)f->vocab_size) / 2;
    if (half < 1) half = 1;
    for (int64_t s = 0; s < f->ngram_size; s++) {
        uint64_t x = (uint64_t)f->ngram_seed + 10007ull * (uint64_t)j + 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
        mult[s] = 2 * (splitmix64(x) % half) + 1;
    }
    int64_t nh = (f->ngram_size - 1) * f->heads_per_ngram, skip = (int64_t)j * nh;
    uint64_t cand = (uint64_t)f->ngram_vocab_base, off = 0;
    for (int64_t h = -skip; h < nh; cand++) {
        if (!is_prime(cand)) continue;
        if (h >= 0) {
            sizes[h] = cand;
            offsets[h] = off;
            off += cand;
        }
        h++;
    }
}

/* Reads an int64 buffer tensor into u64 (never through float). */
static int read_i64(struct ctx *c, const char *name, int64_t n, uint64_t *out)
{
    const struct st_tensor *t = c->p->synth.on ? NULL : st_find(c->p->st, name);
    if (!t) return 1; /* absent: caller derives */
    if (t->dtype != ST_I64 || st_numel(t) != n)
        return nb_errf(c->err, c->errlen, NB_EFORMAT, "tensor \"%s\": expected %lld int64 values", name, (long long)n);
    const unsigned char *b = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int k = 7; k >= 0; k--) v = (v << 8) | b[i * 8 + k]; /* little-endian */
        out[i] = v;
    }
    return 0;
}

static int add_ple(struct ctx *c, int blk, const char *L)
{
    struct conv_plan *p = c->p;
    const struct hf_config *f = &p->cfg;
    int64_t C = f->hidden_size, nC = f->hc_count * C, P = f->ple_embed_dim, nh = (f->ngram_size - 1) * f->heads_per_ngram;
    char n[160], name[256];
    if (nh <= 0 || nh > 64 || f->ngram_size > 16 || P % nh)
        return nb_errf(c->err, c->errlen, NB_EFORMAT, "config.json: ple_embed_dim %lld is not divisible by %lld n-gram heads",
                       (long long)P, (long long)nh);
    p->ple_row_width = P / nh;
    p->n_ple_mult = (int)f->ngram_size;
    p->n_ple_heads = (int)nh;
    if (!add1(c, B("ple_key.weight"), NE(P, nC), ROLE_DENSE, need(c, SHAPE(nC, P), "%sple.key_proj.weight", L)) ||
        !add1(c, B("ple_value.weight"), NE(P, C), ROLE_DENSE, need(c, SHAPE(C, P), "%sple.value_proj.weight", L)) ||
        !with_op(add1(c, B("ple_norm_key.weight"), NE(nC), ROLE_F32, need(c, SHAPE(nC), "%sple.norm_key.weight", L)), OP_FOLD) ||
        !with_op(add1(c, B("ple_norm_query.weight"), NE(nC), ROLE_F32, need(c, SHAPE(nC), "%sple.norm_query.weight", L)), OP_FOLD) ||
        !with_op(add1(c, B("ple_norm_conv.weight"), NE(nC), ROLE_F32, need(c, SHAPE(nC), "%sple.norm_conv.weight", L)), OP_FOLD) ||
        !add1(c, B("ple_conv1d.weight"), NE(f->ple_conv_kernel, nC), ROLE_F32,
              need(c, SHAPE(nC, 1, f->ple_conv_kernel), "%sple.conv1d.weight", L)))
        return -1;

    /* Hash constants: the checkpoint's buffers win; the derivation checks them. */
    uint64_t dm[16], ds[64], doff[64];
    ple_derive(f, 0, dm, ds, doff);
    int rc;
    snprintf(name, sizeof name, "%sple.ple_embedding.layer_multipliers", L);
    if ((rc = read_i64(c, name, f->ngram_size, p->ple_mult)) < 0) return rc;
    if (rc) memcpy(p->ple_mult, dm, sizeof dm);
    snprintf(name, sizeof name, "%sple.ple_embedding.ngram_heads_offsets", L);
    if ((rc = read_i64(c, name, nh, p->ple_offsets)) < 0) return rc;
    if (rc) memcpy(p->ple_offsets, doff, sizeof doff);
    snprintf(name, sizeof name, "%sple.ple_embedding.ngram_heads_vocab_sizes", L);
    if ((rc = read_i64(c, name, nh, p->ple_sizes)) < 0) return rc;
    if (rc) memcpy(p->ple_sizes, ds, sizeof ds);
    if (memcmp(p->ple_mult, dm, (size_t)f->ngram_size * 8) || memcmp(p->ple_sizes, ds, (size_t)nh * 8) ||
        memcmp(p->ple_offsets, doff, (size_t)nh * 8))
        fprintf(stderr, "nebula-convert: note: the checkpoint's PLE hash constants differ from the config-derived ones; "
                        "using the checkpoint's\n");

    /* The table: one tensor, or split_ngram_parts row shards in numeric order. */
    int64_t W = p->ple_row_width, S = 0, rows = 0;
    const struct st_tensor **shards = NULL;
    snprintf(name, sizeof name, "%sple.ple_embedding.ngram_embedding.weight", L);
    const struct st_tensor *whole = p->synth.on ? NULL : st_find(p->st, name);
    if (p->synth.on) { /* shards of the size the hash needs, padded as transformers pads */
        int64_t total = (int64_t)(p->ple_offsets[nh - 1] + p->ple_sizes[nh - 1]), div = f->ngram_divisor > 0 ? f->ngram_divisor : 1;
        S = f->split_ngram_parts > 0 ? f->split_ngram_parts : 1;
        int64_t rows_all = (total + div - 1) / div * div, per = (rows_all + S - 1) / S;
        shards = malloc((size_t)S * sizeof *shards);
        for (int64_t s = 0; shards && s < S; s++) {
            snprintf(name, sizeof name, "%sple.ple_embedding.ngram_embedding.shard_%lld.weight", L, (long long)s);
            if (!(shards[s] = virt(p, name, 2, (int64_t[]){per, W}))) {
                free(shards);
                shards = NULL;
            }
        }
    } else if (whole) {
        S = 1;
        shards = malloc(sizeof *shards);
        if (shards) shards[0] = whole;
    } else {
        for (;; S++) {
            snprintf(name, sizeof name, "%sple.ple_embedding.ngram_embedding.shard_%lld.weight", L, (long long)S);
            if (!st_find(p->st, name)) break;
        }
        if (S == 0) return nb_errf(c->err, c->errlen, NB_ENOENT, "checkpoint has no PLE n-gram table under %sple.ple_embedding", L);
        if (S != f->split_ngram_parts)
            return nb_errf(c->err, c->errlen, NB_EFORMAT, "PLE table has %lld shards, config.json split_ngram_parts says %lld",
                           (long long)S, (long long)f->split_ngram_parts);
        shards = malloc((size_t)S * sizeof *shards);
        for (int64_t s = 0; shards && s < S; s++) {
            snprintf(name, sizeof name, "%sple.ple_embedding.ngram_embedding.shard_%lld.weight", L, (long long)s);
            shards[s] = st_find(p->st, name);
        }
    }
    if (!shards) return nb_errf(c->err, c->errlen, NB_ENOMEM, "out of memory");
    int64_t per = shards[0]->n_dims == 2 ? shards[0]->shape[0] : 0;
    for (int64_t s = 0; s < S; s++) {
        if (shards[s]->n_dims != 2 || shards[s]->shape[1] != W || shards[s]->shape[0] != per) {
            int rc = nb_errf(c->err, c->errlen, NB_EFORMAT, "PLE table shard %s: expected [%lld, %lld] like shard 0",
                             shards[s]->name, (long long)per, (long long)W); /* the name is read before the free */
            free(shards);
            return rc;
        }
        rows += per;
    }
    uint64_t need_rows = p->ple_offsets[nh - 1] + p->ple_sizes[nh - 1];
    if ((uint64_t)rows < need_rows) {
        free(shards);
        return nb_errf(c->err, c->errlen, NB_EFORMAT, "PLE table has %lld rows, the hash needs %llu", (long long)rows,
                       (unsigned long long)need_rows);
    }
    struct conv_tensor *t = add(c, "per_layer_token_embd.weight", NE(W, rows), ROLE_PLE_TABLE, (int)S, shards);
    free(shards);
    if (!t) return -1;
    t->map = MAP_LIST;
    t->rows_per = per;
    return 0;
}

static int add_mtp(struct ctx *c)
{
    const struct hf_config *f = &c->p->cfg;
    int64_t C = f->hidden_size, nC = f->hc_count * C;
    int blk = (int)f->n_layers;
    char n[160], out[64];
    const struct st_tensor *eh[2] = {need(c, SHAPE(C, C), "mtp.fc_embedding.weight"), need(c, SHAPE(C, C), "mtp.fc_hidden.weight")};
    struct conv_tensor *t = add(c, B("nextn.eh_proj.weight"), NE(2 * C, C), ROLE_DENSE, 2, eh);
    if (!t) return -1;
    t->map = MAP_CONCAT_COLS; /* embedding half first */
    if (!with_op(add1(c, B("nextn.enorm.weight"), NE(C), ROLE_F32, need(c, SHAPE(C), "mtp.pre_fc_norm_embedding.weight")), OP_FOLD) ||
        !with_op(add1(c, B("nextn.hnorm.weight"), NE(nC), ROLE_F32, need(c, SHAPE(nC), "mtp.pre_fc_norm_hidden.weight")), OP_FOLD))
        return -1;
    snprintf(out, sizeof out, "blk.%d.nextn.hc_head", blk);
    if (add_hc(c, out, "mtp.hyper_connection_mixer", false)) return -1;
    return add_block(c, blk, "mtp.layers.0.", false);
}
#undef B

int conv_plan_build(struct conv_plan *p, const st_set *st, const struct conv_synth *synth, const struct hf_config *cfg,
                    bool want_mtp, char *err, size_t errlen)
{
    struct ctx c = {p, err, errlen};
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->st = st;
    if (synth) p->synth = *synth;
    const struct hf_config *f = &p->cfg;
    int64_t C = f->hidden_size, V = f->vocab_size;

    /* dk and dv may differ: ssm.state_size carries dk, ssm.inner_size Hv·dv (write.c). */
    if (f->lin_k_head_dim <= 0 || f->lin_v_head_dim <= 0)
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: linear_key_head_dim %lld and linear_value_head_dim %lld "
                       "must be positive", (long long)f->lin_k_head_dim, (long long)f->lin_v_head_dim);
    if (f->lin_n_k_heads <= 0 || f->lin_n_v_heads % f->lin_n_k_heads)
        return nb_errf(err, errlen, NB_EFORMAT, "config.json: linear_num_value_heads must be a multiple of linear_num_key_heads");
    if (f->n_ple > 1)
        return nb_errf(err, errlen, NB_ENOTSUP, "%d PLE layers: the qwen4exp GGUF layout has one n-gram table", f->n_ple);
    snprintf(p->prefix, sizeof p->prefix, "model.language_model.");
    char probe[128];
    snprintf(probe, sizeof probe, "%sembed_tokens.weight", p->prefix);
    if (!has(p, probe)) snprintf(p->prefix, sizeof p->prefix, "model.");
    p->mtp = want_mtp && has(p, "mtp.fc_embedding.weight");

    const char *pf = p->prefix;
    if (!add1(&c, "token_embd.weight", NE(C, V), ROLE_DENSE, need(&c, SHAPE(V, C), "%sembed_tokens.weight", pf))) goto fail;
    if (has(p, "lm_head.weight")) {
        if (!add1(&c, "output.weight", NE(C, V), ROLE_DENSE, need(&c, SHAPE(V, C), "lm_head.weight"))) goto fail;
    } else if (!f->tie_embeddings) {
        nb_errf(err, errlen, NB_ENOENT, "checkpoint has no lm_head.weight and tie_word_embeddings is false");
        goto fail;
    }
    char hc[128];
    snprintf(hc, sizeof hc, "%shyper_connection_mixer", pf);
    if (add_hc(&c, "output_hc", hc, false)) goto fail;
    for (int64_t i = 0; i < f->n_layers; i++) {
        char L[96];
        snprintf(L, sizeof L, "%slayers.%lld.", pf, (long long)i);
        for (int k = 0; k < f->n_ple; k++)
            if (f->ple_layers[k] == i && add_ple(&c, (int)i, L)) goto fail;
        if (add_block(&c, (int)i, L, f->is_linear[i])) goto fail;
    }
    if (p->mtp && add_mtp(&c)) goto fail;
    return 0;
fail:
    conv_plan_free(p);
    return err && err[0] ? NB_EFORMAT : NB_ENOMEM;
}

int conv_synth_plan(struct conv_plan *p, const char *config_path, int64_t layers, int64_t ngram_base,
                    const struct conv_synth *synth, bool want_mtp, char *err, size_t errlen)
{
    struct hf_config cfg;
    int rc = hf_config_load_file(config_path, &cfg, err, errlen);
    if (!rc && layers) rc = hf_config_truncate(&cfg, layers, err, errlen);
    if (rc) return rc;
    if (ngram_base < 0) return nb_errf(err, errlen, NB_EINVAL, "n-gram base %lld is negative", (long long)ngram_base);
    if (ngram_base > 0) cfg.ngram_vocab_base = ngram_base;
    return conv_plan_build(p, NULL, synth, &cfg, want_mtp, err, errlen);
}

void conv_plan_free(struct conv_plan *p)
{
    for (int i = 0; i < p->synth.n_virt; i++) {
        free((char *)p->synth.virt[i]->name);
        free(p->synth.virt[i]);
    }
    free(p->synth.virt);
    p->synth.virt = NULL;
    p->synth.n_virt = 0;
    for (int i = 0; i < p->n; i++) free(p->t[i].src);
    free(p->t);
    p->t = NULL;
    p->n = p->cap = 0;
}
