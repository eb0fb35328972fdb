/* rows.c — producing one output row of a planned tensor (see convert.h), and
 * choosing output types.
 *
 * Rows are read from the mmap'ed safetensors through st_read_f32, so the
 * source dtype (f32, bf16, f16) is converted exactly once, then re-ordered,
 * then transformed element-wise in float32 (the +1 fold and −exp(A_log) are
 * float32 operations, as llama.cpp's converter does them). */
#include "tools/nebula-convert/convert.h"

#include "core/util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int64_t conv_tile_src_head(int64_t h, int64_t hk, int64_t g)
{
    /* GGUF head h = j·hk + k holds HF head k·g + j (docs/CONVERSION.md §3.3). */
    int64_t j = h / hk, k = h % hk;
    return k * g + j;
}

static int64_t src_cols(const struct st_tensor *t) { return t->n_dims ? t->shape[t->n_dims - 1] : 1; }

/* Source tensor and row for output row r. */
static void locate(const struct conv_tensor *t, int64_t r, const struct st_tensor **src, int64_t *row)
{
    switch (t->map) {
    case MAP_TILE:
        *src = t->src[0];
        if (r < t->tile_from) {
            *row = r;
        } else {
            int64_t v = r - t->tile_from, head = v / t->tile_unit, in = v % t->tile_unit;
            *row = t->tile_from + conv_tile_src_head(head, t->tile_hk, t->tile_g) * t->tile_unit + in;
        }
        return;
    case MAP_LIST:
        *src = t->src[r / t->rows_per];
        *row = r % t->rows_per;
        return;
    case MAP_FUSED_EXPERT:
        *src = t->src[0];
        *row = (r / t->fe_n) * t->rows_per + t->fe_off + r % t->fe_n;
        return;
    default:
        *src = t->src[0];
        *row = r + t->row_off;
        return;
    }
}

uint64_t conv_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t conv_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Approximately standard normal from one 64-bit hash: the sum of four
 * 16-bit uniforms (Irwin–Hall), centred and scaled to unit variance. */
static float normal_of(uint64_t h)
{
    float s = (float)(h & 0xffff) + (float)((h >> 16) & 0xffff) + (float)((h >> 32) & 0xffff) + (float)(h >> 48);
    return (s / 65536.0f - 2.0f) * 1.7320508f;
}

void conv_synth_values(const struct conv_plan *p, const struct st_tensor *t, int64_t first, int64_t n, float *dst)
{
    /* Scales keep a random forward pass well-conditioned: projections
     * N(0, 1/fan_in), norm weights near their folded value 1, decays in the
     * range trained models use; router rows get a per-expert spread so expert
     * popularity is skewed (--router-skew). */
    const char *name = t->name;
    int64_t fan_in = t->n_dims ? t->shape[t->n_dims - 1] : 1;
    uint64_t h0 = conv_mix64(p->synth.seed ^ conv_name_hash(name));
    float scale = 1.0f / sqrtf((float)fan_in), shift = 0.0f;
    bool router = strstr(name, "mlp.gate.weight") != NULL;
    if (strstr(name, "linear_attn.norm.weight")) shift = 1.0f, scale = 0.1f; /* used plain */
    else if (strstr(name, "norm")) scale = 0.1f;                             /* folded: 1 + w */
    else if (strstr(name, "A_log")) shift = 0.5f, scale = 0.3f;
    else if (strstr(name, "dt_bias")) scale = 0.5f;
    else if (strstr(name, "ngram_embedding") || strstr(name, "embed_tokens")) scale = 1.0f;
    const struct conv_synth *sy = &p->synth;
    const bool embed = sy->topics > 0 && strstr(name, "embed_tokens") && !strstr(name, "ngram");
    int layer = -1; /* the router's layer (the MTP block's is n_layers, as in the GGUF) */
    const char *ls = strstr(name, "layers.");
    if (router) layer = strstr(name, "mtp.") ? (int)p->cfg.n_layers : ls ? atoi(ls + 7) : -1;
    uint64_t fav = 0;     /* the topics the current router row's expert favours (bit t) */
    int64_t fav_row = -1; /* the row fav is for */
    for (int64_t i = 0; i < n; i++) {
        int64_t idx = first + i, row = idx / fan_in, col = idx % fan_in;
        float v = shift + scale * normal_of(conv_mix64(h0 + (uint64_t)idx * 0xD1B54A32D192ED03ull));
        if (router && sy->router_skew != 0.0)
            v *= expf((float)sy->router_skew * normal_of(conv_mix64(h0 ^ ((uint64_t)row + 0x5bd1e995ull))));
        if (embed) v += (float)sy->topic_embed * conv_topic_dir(sy, (int)(row % sy->topics), col);
        if (router && sy->topics > 0) {
            if (row != fav_row) {
                fav = 0, fav_row = row;
                for (int tp = 0; tp < sy->topics; tp++) fav |= (uint64_t)conv_topic_favours(sy, layer, (int)row, tp) << tp;
            }
            for (uint64_t f = fav; f; f &= f - 1)
                v += (float)(sy->topic_router / (double)fan_in) * conv_topic_dir(sy, __builtin_ctzll(f), col);
        }
        dst[i] = v;
    }
}

float conv_topic_dir(const struct conv_synth *sy, int topic, int64_t col)
{
    return normal_of(conv_mix64((sy->seed ^ 0x70b1c5ull) + (uint64_t)topic * 0x9E3779B97F4A7C15ull + (uint64_t)col * 0xD1B54A32D192ED03ull));
}

bool conv_topic_favours(const struct conv_synth *sy, int layer, int expert, int topic)
{
    const uint64_t h = conv_mix64((sy->seed ^ 0xfa7011ull) + (uint64_t)layer * 0x9E3779B97F4A7C15ull +
                                  (uint64_t)expert * 0xBF58476D1CE4E5B9ull + (uint64_t)topic * 0x94D049BB133111EBull);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < sy->topic_share;
}

/* n source values from element `first`: from the checkpoint, or made up. */
static int read_src(const struct conv_plan *p, const struct st_tensor *s, int64_t first, int64_t n, float *dst, char *err,
                    size_t errlen)
{
    if (s->data) return st_read_f32(s, first, n, dst, err, errlen);
    conv_synth_values(p, s, first, n, dst);
    return 0;
}

int conv_row(const struct conv_plan *p, const struct conv_tensor *t, int64_t r, float *out, float *scratch, char *err,
             size_t errlen)
{
    int64_t n = t->ne[0];
    int rc;
    if (t->map == MAP_CONCAT_COLS) {
        int64_t n0 = src_cols(t->src[0]);
        if ((rc = read_src(p, t->src[0], r * n0, n0, out, err, errlen))) return rc;
        if ((rc = read_src(p, t->src[1], r * (n - n0), n - n0, out + n0, err, errlen))) return rc;
    } else {
        const struct st_tensor *s;
        int64_t row;
        locate(t, r, &s, &row);
        float *dst = t->tile_cols ? scratch : out;
        if ((rc = read_src(p, s, row * n, n, dst, err, errlen))) return rc;
        if (t->tile_cols) {
            for (int64_t c = 0; c < n; c++) {
                int64_t head = c / t->tile_unit, in = c % t->tile_unit;
                out[c] = dst[conv_tile_src_head(head, t->tile_hk, t->tile_g) * t->tile_unit + in];
            }
        }
    }
    if (t->op == OP_FOLD)
        for (int64_t i = 0; i < n; i++) out[i] = 1.0f + out[i];
    else if (t->op == OP_NEG_EXP)
        for (int64_t i = 0; i < n; i++) out[i] = -expf(out[i]);
    return 0;
}

/* A block-quantized type for a row of n values, or its nearest fallback:
 * K-quants and the IQ and TQ formats need rows of 256, Q1_0 of 128, NVFP4
 * and Q2_0 of 64, the 32-blocks rows of 32; BF16 always fits. */
static enum quant_type fit(enum quant_type want, int64_t n)
{
    for (;;) {
        const struct quant_traits *tr = quant_traits_of(want);
        if (tr && n % tr->blck_size == 0) return want;
        switch (want) {
        case QT_Q4_K: want = QT_Q5_0; break;
        case QT_Q5_K: want = QT_Q5_1; break;
        case QT_Q6_K: want = QT_Q8_0; break;
        case QT_IQ4_XS: want = QT_IQ4_NL; break;
        case QT_Q2_K: case QT_Q3_K: case QT_TQ1_0: case QT_TQ2_0: case QT_Q1_0: case QT_Q2_0: want = QT_Q4_0; break;
        case QT_IQ2_XXS: case QT_IQ2_XS: case QT_IQ2_S: case QT_IQ3_XXS: case QT_IQ3_S: case QT_IQ1_S: case QT_IQ1_M:
            want = QT_IQ4_NL;
            break;
        case QT_NVFP4: want = QT_MXFP4; break;
        default: return QT_BF16;
        }
    }
}

#define MIX(f32, dense, gate_up, down, indexer, ple)                                                            \
    {[ROLE_F32] = QT_##f32, [ROLE_DENSE] = QT_##dense, [ROLE_EXPERT_GATEUP] = QT_##gate_up,                        \
     [ROLE_EXPERT_DOWN] = QT_##down, [ROLE_INDEXER] = QT_##indexer, [ROLE_PLE_TABLE] = QT_##ple}

#define O(m, T) {m, QT_##T}
/* what the published low-bit files share: f32 hyper-connections, a q8_0 shared expert, a q6_K head */
#define LOWBIT_OVERRIDES {O("hc_", F32), O("_shexp.", Q8_0), O("^output.weight", Q6_K)}

/* The published-like mixes follow MODEL.md "Quant types in published files"
 * and the published files issue 13 lists (docs/CONVERSION.md §3.8 gives the
 * table); llama_ftype numbers as llama.cpp names its files. */
const struct conv_mix conv_mixes[] = {
    {"f32", MIX(F32, F32, F32, F32, F32, F32), 0, "everything f32", {{0}}},
    {"f16", MIX(F32, F16, F16, F16, F16, F16), 1, "f16 (norms, routers, conv f32)", {{0}}},
    {"bf16", MIX(F32, BF16, BF16, BF16, BF16, BF16), 32, "bf16 (norms, routers, conv f32)", {{0}}},
    {"q8_0", MIX(F32, Q8_0, Q8_0, Q8_0, Q8_0, Q8_0), 7, "q8_0 (norms, routers, conv f32)", {{0}}},
    {"mix", MIX(F32, Q8_0, Q4_K, Q5_1, BF16, IQ4_NL), 15,
     "experts gate/up q4_K, down q5_1; dense q8_0; indexer bf16; n-gram table iq4_nl", {{0}}},
    {"q4_k_m", MIX(F32, Q6_K, Q4_K, Q5_1, BF16, IQ4_NL), 15,
     "experts gate/up q4_K, down q5_1; dense q6_K; indexer bf16; n-gram table iq4_nl", {{0}}},
    {"q5_k_m", MIX(F32, Q8_0, Q5_K, Q8_0, BF16, Q5_1), 17,
     "experts gate/up q5_K, down q8_0; dense q8_0; indexer bf16; n-gram table q5_1", {{0}}},
    {"iq4_nl", MIX(F32, Q8_0, IQ4_NL, IQ4_NL, BF16, Q4_0), 25,
     "experts gate/up/down iq4_nl; dense q8_0; indexer bf16; n-gram table q4_0", {{0}}},
    {"q4_k_bf16", MIX(F32, BF16, Q4_K, Q5_1, BF16, Q8_0), 15,
     "experts gate/up q4_K, down q5_1; dense and indexer bf16; n-gram table q8_0", {{0}}},
    /* Mirrors of the published low-bit files (expert down rows of 640 take a 32-wide block type). */
    {"ud-iq1_s", MIX(F32, Q4_K, IQ1_S, IQ4_NL, BF16, IQ4_NL), 24,
     "Unsloth UD-IQ1_S: experts gate/up iq1_s (iq2_xxs in the first layer), down iq4_nl; MTP eh_proj q8_0; attention/GDN "
     "q4_K, their outputs q5_K; shared expert q8_0; head q6_K; embedding q4_K; indexer bf16; hyper-connections f32; "
     "n-gram table iq4_nl",
     {O("blk.0.ffn_gate_exps", IQ2_XXS), O("blk.0.ffn_up_exps", IQ2_XXS), O("hc_", F32), O("nextn", Q8_0),
      O("_shexp.", Q8_0), O("attn_output", Q5_K), O("ssm_out", Q5_K), O("^output.weight", Q6_K),
      O("^token_embd.weight", Q4_K)}},
    {"iq2_xxs", MIX(F32, Q4_K, IQ2_XXS, IQ4_NL, BF16, IQ4_NL), 19,
     "AtomicChat IQ2_XXS: experts gate/up iq2_xxs, down iq4_nl; dense q4_K; shared expert q8_0; head q6_K; "
     "indexer bf16; n-gram table iq4_nl",
     LOWBIT_OVERRIDES},
    {"iq2_xs", MIX(F32, Q4_K, IQ2_XS, Q2_0, BF16, IQ4_NL), 20,
     "ISTA-DASLab GSQ IQ2_XS: experts gate/up iq2_xs, down q2_0; dense q4_K; shared expert q8_0; head q6_K; "
     "indexer bf16; n-gram table iq4_nl",
     LOWBIT_OVERRIDES},
    {"q2_0", MIX(F32, Q4_K, Q2_0, Q2_0, BF16, IQ4_NL), 41,
     "ISTA-DASLab GSQ Q2_0: experts gate/up/down q2_0; dense q4_K; shared expert q8_0; head q6_K; indexer bf16; "
     "n-gram table iq4_nl",
     LOWBIT_OVERRIDES},
    {"iq3_s", MIX(F32, Q5_K, IQ3_S, IQ4_NL, BF16, IQ4_NL), 26,
     "ISTA-DASLab GSQ IQ3_S: experts gate/up iq3_s, down iq4_nl; dense q5_K; shared expert q8_0; head q6_K; "
     "indexer bf16; n-gram table iq4_nl",
     LOWBIT_OVERRIDES},
    {"ds4-iq2_xxs", MIX(F32, Q8_0, IQ2_XXS, MXFP4, BF16, Q4_1), 19,
     "ds4's recipe: experts gate/up iq2_xxs, down mxfp4; dense q8_0; hyper-connections f16; indexer bf16; "
     "n-gram table q4_1",
     {O("hc_", F16)}},
    {"ud-q4_k_xl", MIX(F32, Q6_K, Q4_K, Q5_0, BF16, IQ4_NL), 15,
     "Unsloth UD-Q4_K_XL: experts gate/up q4_K (q5_K in the first layer), down q5_0 (q8_0 there); MTP eh_proj q8_0; "
     "attention/GDN q6_K, their outputs q8_0; shared expert q8_0; head q6_K; embedding q4_K; indexer bf16; "
     "hyper-connections f32; n-gram table iq4_nl",
     {O("hc_", F32), O("blk.0.ffn_down_exps", Q8_0), O("nextn", Q8_0), O("blk.0.ffn_", Q5_K), O("_shexp.", Q8_0),
      O("attn_output", Q8_0), O("ssm_out", Q8_0), O("^output.weight", Q6_K), O("^token_embd.weight", Q4_K)}},
    /* one type for every matrix (as q8_0 above), for each of the other ggml formats */
#define ONE(name, T, ftype) {name, MIX(F32, T, T, T, T, T), ftype, name " everywhere (norms, routers, conv f32)", {{0}}}
#define ALL(tname, T, ftype) {tname "-all", MIX(F32, T, T, T, T, T), ftype, tname " everywhere (norms, routers, conv f32)", {{0}}}
    /* (iq2_xxs, iq2_xs, iq3_s and q2_0 name the published mixes above; their one-type rows are "-all") */
    ONE("q4_1", Q4_1, 3),       ONE("q2_K", Q2_K, 10),      ONE("q3_K", Q3_K, 12),     ALL("iq2_xxs", IQ2_XXS, 19),
    ALL("iq2_xs", IQ2_XS, 20), ONE("iq3_xxs", IQ3_XXS, 23), ONE("iq1_s", IQ1_S, 24), ALL("iq3_s", IQ3_S, 26),
    ONE("iq2_s", IQ2_S, 28),    ONE("iq1_m", IQ1_M, 31),    ONE("tq1_0", TQ1_0, 36),   ONE("tq2_0", TQ2_0, 37),
    ONE("mxfp4", MXFP4, 38),    ONE("nvfp4", NVFP4, 39),    ONE("q1_0", Q1_0, 40),     ALL("q2_0", Q2_0, 41),
    ONE("iq4_xs", IQ4_XS, 30),
#undef ONE
#undef ALL
};
#undef MIX
#undef LOWBIT_OVERRIDES
#undef O
const int conv_n_mixes = (int)(sizeof conv_mixes / sizeof *conv_mixes);

const struct conv_mix *conv_mix_find(const char *name)
{
    for (int i = 0; i < conv_n_mixes; i++)
        if (!strcasecmp(conv_mixes[i].name, name)) return &conv_mixes[i];
    return NULL;
}

const struct conv_mix *conv_mix_parse(const char *prog, const char *option, const char *name)
{
    const struct conv_mix *m = conv_mix_find(name);
    if (m) return m;
    fprintf(stderr, "%s: unknown %s '%s' (", prog, option, name);
    for (int i = 0; i < conv_n_mixes; i++) fprintf(stderr, "%s%s", i ? ", " : "", conv_mixes[i].name);
    fprintf(stderr, ")\n");
    return NULL;
}

/* "^x" matches names that start with x; other matches anywhere in the name. */
static bool override_matches(const char *match, const char *name)
{
    if (match[0] == '^') return strncmp(name, match + 1, strlen(match + 1)) == 0;
    return strstr(name, match) != NULL;
}

void conv_choose_types(struct conv_plan *p, const struct conv_mix *mix)
{
    for (int i = 0; i < p->n; i++) {
        struct conv_tensor *t = &p->t[i];
        enum quant_type want = t->n_dims == 1 ? QT_F32 : mix->type[t->role];
        for (int k = 0; t->n_dims > 1 && t->role != ROLE_F32 && k < CONV_MAX_OVERRIDES && mix->over[k].match; k++)
            if (override_matches(mix->over[k].match, t->name)) {
                want = mix->over[k].type;
                break;
            }
        t->type = fit(want, t->ne[0]);
    }
}
