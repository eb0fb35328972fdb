/* test_vram.c — the VRAM budget's host arithmetic (engine/vram.c): the
 * plan's parts for a model and a placement, the check and its message, the
 * byte-count parser of --vram-budget and how the gpu-worker picks its
 * budget.  No device needed; the CUDA backend's own use of it (creation
 * refused over budget) is checked in test_cuda_backend.c where a GPU is. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "engine/vram.h"
#include "tests/core/model_fixture.h"

static struct model *open_fixture(const char *name, const char *type)
{
    char err[256] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf_typed(name, type), &m, err, sizeof err), 0, "%s", err);
    return m;
}

Test(vram, parse_bytes)
{
    char err[128];
    uint64_t v = 0;
    cr_assert_eq(gw_vram_parse_bytes("123", &v, err, sizeof err), 0);
    cr_assert_eq(v, 123);
    cr_assert_eq(gw_vram_parse_bytes("64M", &v, err, sizeof err), 0);
    cr_assert_eq(v, 64ull << 20);
    cr_assert_eq(gw_vram_parse_bytes("1.5G", &v, err, sizeof err), 0);
    cr_assert_eq(v, 3ull << 29);
    cr_assert_eq(gw_vram_parse_bytes("80GiB", &v, err, sizeof err), 0);
    cr_assert_eq(v, 80ull << 30);
    cr_assert_eq(gw_vram_parse_bytes("2tb", &v, err, sizeof err), 0);
    cr_assert_eq(v, 2ull << 40);
    const char *bad[] = {"", "x", "-1", "12Q", "5 G", "1e30", "G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        cr_assert_eq(gw_vram_parse_bytes(bad[i], &v, err, sizeof err), NB_EINVAL, "\"%s\" accepted", bad[i]);
        cr_assert_eq(v, 7, "\"%s\" changed the value", bad[i]);
        cr_assert(strstr(err, "not a byte count"), "%s", err);
    }
}

/* The slots are the experts the map marks, each at its layer's bytes as the device holds them. */
Test(vram, slots_follow_the_map)
{
    struct model *m = open_fixture("tiny-a", "f32");
    const struct model_hparams *hp = &m->hp;
    const int L = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    /* f32 experts: gate and up I×C, down C×I floats */
    const uint64_t eb = 4 * (uint64_t)hp->n_ff_exp * (uint64_t)hp->n_embd * 3;
    for (int il = 0; il < L; il++) cr_assert_eq(gw_vram_expert_bytes(m, il), eb, "layer %d", il);
    struct gw_vram_parts all, half, none;
    gw_vram_plan(m, NULL, 256, &all);
    cr_assert_eq(all.n_slots, (int64_t)L * E);
    cr_assert_eq(all.slots, (uint64_t)L * E * eb);
    uint8_t *local = calloc((size_t)L * E, 1);
    gw_vram_plan(m, local, 256, &none);
    cr_assert_eq(none.n_slots, 0);
    cr_assert_eq(none.slots, 0);
    int64_t marked = 0;
    for (int i = 0; i < L * E; i++) marked += local[i] = (i % 3 == 0);
    gw_vram_plan(m, local, 256, &half);
    cr_assert_eq(half.n_slots, marked);
    cr_assert_eq(half.slots, (uint64_t)marked * eb);
    /* the rest does not depend on the map */
    cr_assert_eq(half.kv, all.kv);
    cr_assert_eq(half.scratch, all.scratch);
    free(local);
    model_close(m);
}

/* K/V grows with the context: by the same amount for each equal step (steps of whole QSA blocks). */
Test(vram, kv_and_scratch_grow_with_context)
{
    struct model *m = open_fixture("tiny-a", "f32");
    struct gw_vram_parts a, b, c, d;
    gw_vram_plan(m, NULL, 1024, &a);
    gw_vram_plan(m, NULL, 2048, &b);
    gw_vram_plan(m, NULL, 3072, &c);
    cr_assert_eq(a.n_ctx, 1024);
    cr_assert_gt(b.kv, a.kv);
    cr_assert_eq(c.kv - b.kv, b.kv - a.kv);
    cr_assert_geq(b.scratch, a.scratch);
    cr_assert_geq(a.scratch, gw_vram_arena_bytes(m, 1024));
    gw_vram_plan(m, NULL, 0, &d); /* the default context */
    cr_assert_eq(d.n_ctx, gw_vram_default_ctx(m));
    cr_assert_gt(d.n_ctx, 0);
    model_close(m);
}

Test(vram, check_names_every_part)
{
    struct gw_vram_parts p = {.dense = 1000000, .mtp = 200000, .kv = 30000, .slots = 4000000, .scratch = 500,
                              .n_ctx = 4096, .n_slots = 77};
    const uint64_t total = gw_vram_total(&p);
    cr_assert_eq(total, 5230500);
    char err[1024] = "";
    cr_assert_eq(gw_vram_check(&p, 0, err, sizeof err), 0);
    cr_assert_eq(gw_vram_check(&p, total, err, sizeof err), 0);
    cr_assert_eq(gw_vram_check(&p, total - 1, err, sizeof err), NB_ENOMEM);
    const char *want[] = {"dense weights", "(1000000 B)", "MTP", "(200000 B)", "4096 positions", "(30000 B)",
                          "77 expert slots", "(4000000 B)", "scratch", "(500 B)", "(5230499 B)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(err, want[i]), "no \"%s\" in: %s", want[i], err);
}

/* Matrices of a type the device has no decoder for are held widened to F32:
 * the plan counts them and an over-budget message names the first. */
Test(vram, widened_matrices_are_named)
{
    struct model *f = open_fixture("tiny-a", "f32"), *q = open_fixture("tiny-a", "iq4_xs");
    struct gw_vram_parts pf, pq;
    gw_vram_plan(f, NULL, 256, &pf);
    gw_vram_plan(q, NULL, 256, &pq);
    cr_assert_eq(pf.n_widened, 0);
    cr_assert_gt(pq.n_widened, 0);
    cr_assert_eq(pq.widened_type, QT_IQ4_XS);
    cr_assert(pq.widened_name && strstr(pq.widened_name, "weight"), "%s", pq.widened_name ? pq.widened_name : "NULL");
    char err[1024] = "";
    pq.dense = 1000;
    cr_assert_eq(gw_vram_check(&pq, 1, err, sizeof err), NB_ENOMEM);
    cr_assert(strstr(err, "widened to f32") && strstr(err, pq.widened_name) && strstr(err, "iq4_xs"), "%s", err);
    model_close(f), model_close(q);
}

Test(vram, worker_budget)
{
    struct gw_vram_parts p = {.dense = 10, .mtp = 1, .kv = 300, .slots = 50, .scratch = 4000};
    cr_assert_eq(gw_vram_worker_budget(0, 0, true, &p), 0);          /* none given: no limit */
    cr_assert_eq(gw_vram_worker_budget(12345, 99, true, &p), 12345); /* --vram-budget wins */
    cr_assert_eq(gw_vram_worker_budget(0, 1000, true, &p), 1000);    /* the placement's whole budget */
    cr_assert_eq(gw_vram_worker_budget(0, 1000, false, &p), 1000 + 300 + 4000); /* an older placement: the weights' share */
}

/* The reserve nebula-prepare pays before expert slots is the plan's K/V + scratch. */
Test(vram, reserve_is_kv_and_scratch)
{
    struct model *m = open_fixture("tiny-a", "f32");
    struct gw_vram_parts a, d;
    gw_vram_plan(m, NULL, 1024, &a);
    cr_assert_eq(gw_vram_reserve(m, 1024), a.kv + a.scratch);
    gw_vram_plan(m, NULL, 0, &d);
    cr_assert_eq(gw_vram_reserve(m, 0), d.kv + d.scratch);
    model_close(m);
}

/* Logits scratch is GW_VRAM_HEAD_ROWS rows (the head runs in sub-batches),
 * never a prefill chunk's rows × vocabulary: one more vocabulary entry costs
 * the decode arena's 2 floats plus one float per head row. */
Test(vram, logits_scratch_is_bounded)
{
    struct model *m = open_fixture("tiny-a", "f32");
    struct model big = *m;
    big.hp.n_vocab += 1000;
    struct gw_vram_parts a, b;
    /* the graph arena: a verify window's GW_VERIFY_ROWS rows of logits (more than a step's two rows' worth);
     * the pool: the head's GW_VRAM_HEAD_ROWS rows */
    gw_vram_plan(m, NULL, 4096, &a);
    gw_vram_plan(&big, NULL, 4096, &b);
    cr_assert_eq(b.scratch - a.scratch, 4ull * 1000 * (GW_VERIFY_ROWS + GW_VRAM_HEAD_ROWS));
    gw_vram_plan(m, NULL, 8, &a); /* a context shorter than the head's rows: only those rows in the pool */
    gw_vram_plan(&big, NULL, 8, &b);
    cr_assert_eq(b.scratch - a.scratch, 4ull * 1000 * (GW_VERIFY_ROWS + 8));
    model_close(m);
}

/* Dense weights as the device holds them: an F32 model's are its file's
 * non-expert tensor bytes (shared tensors once), each upload at a
 * GW_VRAM_ALIGN multiple, with each layer's expert → slot table and the
 * step's three words in the same block; a quantized mix's are at least that
 * (types the device does not decode grow to F32). */
static uint64_t file_dense_bytes(const struct model *m)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_tensor_count(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (!strstr(t->name, "_exps.")) total += gw_vram_align(t->nbytes);
    }
    const int L = m->hp.n_layer + m->hp.n_nextn;
    return total + (uint64_t)L * gw_vram_align(4 * (uint64_t)m->hp.n_expert) + 3 * GW_VRAM_ALIGN;
}

Test(vram, dense_bytes_as_uploaded)
{
    char err[256] = "";
    const char *types[] = {"f32", "mix"};
    for (int k = 0; k < 2; k++) {
        struct model *m = open_fixture("tiny-a", types[k]);
        uint64_t dense = 0, mtp = 0;
        cr_assert_eq(gw_vram_dense_bytes(m, &dense, &mtp, err, sizeof err), 0, "%s", err);
        cr_assert_gt(dense, 0);
        if (m->hp.n_nextn > 0) cr_assert_gt(mtp, 0, "%s: the MTP block's own weights", types[k]);
        const uint64_t file = file_dense_bytes(m);
        if (k == 0) cr_assert_eq(dense + mtp, file, "f32: %" PRIu64 " + %" PRIu64 " vs the file's %" PRIu64, dense, mtp, file);
        else cr_assert_geq(dense + mtp, file, "mix: %" PRIu64 " + %" PRIu64 " vs the file's %" PRIu64, dense, mtp, file);
        model_close(m);
    }
}

/* Types the device decodes keep their bytes; the others are widened to F32. */
Test(vram, native_types)
{
    cr_assert(gw_vram_native_type(QT_Q4_K));
    cr_assert(gw_vram_native_type(QT_BF16));
    cr_assert(gw_vram_native_type(QT_Q2_K)); /* every stored type but IQ4_XS has a device decoder */
    cr_assert(gw_vram_native_type(QT_IQ1_M));
    cr_assert(!gw_vram_native_type(QT_IQ4_XS));
    cr_assert(!gw_vram_native_type(-1));
    cr_assert_eq(gw_vram_device_type(QT_Q6_K), QT_Q6_K);
    cr_assert_eq(gw_vram_device_type(QT_F16), QT_F16);
    cr_assert_eq(gw_vram_device_type(QT_IQ4_XS), QT_F32);
}

/* ---- the plan against the blocks the CUDA backend allocates (issue 11) ----
 * The backend sizes every device block with the layouts and capacities of
 * vram.c; gw_vram_allocs lists those blocks for a model, a map and a
 * context.  The plan must hold each part's blocks, plus a page of the
 * driver's rounding for each block, plus the pool's temporaries, for every
 * model, map and context — a zero-slot map too, where the backend used to
 * allocate one expert per layer and matrix that the plan did not count
 * (8 layers: 23 MiB over the plan, the bench's 2132 MiB vs 2115 MiB). */

static const char *const fixtures[][2] = {{"tiny-a", "f32"}, {"tiny-a", "mix"}, {"tiny-b", "f32"}, {"tiny-b-vl", "mix"}};
static const int64_t contexts[] = {1, 7, 64, 100, 1000, 5000, 70000};

/* map 0: all local (NULL), 1: none, 2: even layers remote, 3: ~30% remote (the check_backend patterns) */
static uint8_t *make_map(const struct model *m, int pat)
{
    const int L = m->hp.n_layer + m->hp.n_nextn, E = m->hp.n_expert;
    if (pat == 0) return NULL;
    uint8_t *local = malloc((size_t)L * E);
    for (int l = 0; l < L; l++)
        for (int x = 0; x < E; x++)
            local[l * E + x] = pat == 1 ? 0 : pat == 2 ? (uint8_t)(l % 2) : (uint8_t)((x * 2654435761u + l * 40503u) % 10 >= 3);
    return local;
}

Test(vram, plan_holds_every_block)
{
    char err[256] = "";
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        struct model *m = open_fixture(fixtures[f][0], fixtures[f][1]);
        const int L = m->hp.n_layer + m->hp.n_nextn;
        for (int pat = 0; pat < 4; pat++) {
            uint8_t *local = make_map(m, pat);
            for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
                const int64_t n_ctx = contexts[c];
                struct gw_vram_parts plan;
                gw_vram_plan(m, local, n_ctx, &plan);
                cr_assert_eq(gw_vram_dense_bytes(m, &plan.dense, &plan.mtp, err, sizeof err), 0, "%s", err);
                struct gw_vram_alloc a[16];
                const int n = gw_vram_allocs(m, local, n_ctx, a, 16);
                cr_assert(n > 0 && n <= 16);
                uint64_t part[5] = {0}, paged = 0;
                bool slots = false;
                for (int i = 0; i < n; i++) {
                    cr_assert_gt(a[i].bytes, 0, "%s listed with 0 bytes", a[i].what);
                    part[a[i].part] += a[i].bytes;
                    paged += (a[i].bytes + GW_VRAM_PAGE - 1) / GW_VRAM_PAGE * GW_VRAM_PAGE;
                    slots |= a[i].part == GW_PART_SLOTS;
                }
                const char *at = fixtures[f][0];
                cr_assert_eq(part[GW_PART_DENSE], plan.dense + plan.mtp, "%s: the dense block is the walk's", at);
                cr_assert_eq(part[GW_PART_KV], plan.kv, "%s ctx %lld: the state, K/V and RoPE blocks are the plan's kv", at,
                             (long long)n_ctx);
                cr_assert_geq(part[GW_PART_SLOTS], plan.slots, "%s", at);
                cr_assert_leq(part[GW_PART_SLOTS], plan.slots + 3ull * L * GW_VRAM_ALIGN, "%s: slots past their alignment", at);
                cr_assert_eq(slots, plan.n_slots > 0, "%s map %d: a slot block without slots (or none with)", at, pat);
                cr_assert_leq(part[GW_PART_SCRATCH], plan.scratch, "%s", at);
                /* every block rounded up to whole pages, and the pool's temporaries, within the plan */
                const uint64_t need = paged + gw_vram_pool_bytes(m, n_ctx), total = gw_vram_total(&plan);
                cr_assert_leq(need, total, "%s map %d ctx %lld: blocks in pages %" PRIu64 " + pool %" PRIu64 " > planned %" PRIu64,
                              at, pat, (long long)n_ctx, paged, gw_vram_pool_bytes(m, n_ctx), total);
                /* what nebula-prepare reserves before slots is the same sum */
                cr_assert_eq(gw_vram_reserve(m, n_ctx), plan.kv + plan.scratch);
            }
            free(local);
        }
        model_close(m);
    }
}

/* With the context fixed (the CUDA backend under a budget), every position-indexed block
 * gets its planned capacity at its first reservation and never grows while
 * the positions stay within it; without, it doubles from its floor and stops
 * at the planned one. */
Test(vram, capacities)
{
    const enum gw_grow kinds[] = {GW_GROW_KV, GW_GROW_MTP, GW_GROW_ROPE};
    for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
        const int64_t n_ctx = contexts[c];
        for (int k = 0; k < 3; k++) {
            const int64_t planned = gw_vram_capacity(kinds[k], 0, 1, n_ctx, true);
            const int64_t want = kinds[k] == GW_GROW_KV ? n_ctx : n_ctx + GW_VRAM_PAST_CTX;
            cr_assert_eq(planned, kinds[k] == GW_GROW_ROPE && want < 1024 ? 1024 : want);
            for (int64_t need = 1; need <= planned; need += need < 100 ? 1 : 97) {
                cr_assert_eq(gw_vram_capacity(kinds[k], 0, need, n_ctx, true), planned);
                cr_assert_eq(gw_vram_capacity(kinds[k], planned, need, n_ctx, true), planned, "no growth within the plan");
            }
            cr_assert_eq(gw_vram_capacity(kinds[k], planned, planned + 5, n_ctx, true), planned + 5, "past the plan: what is asked");
            int64_t cap = 0; /* doubling */
            for (int64_t need = 1; need <= planned; need++) {
                const int64_t next = gw_vram_capacity(kinds[k], cap, need, n_ctx, false);
                cr_assert_geq(next, need);
                cr_assert_leq(next, planned > need ? planned : need);
                cr_assert(next == cap || cap < need, "grew without need");
                cap = next;
            }
        }
    }
}

/* A layer's n arrays of a layout: none (UINT64_MAX) where want is 0, else
 * aligned, after the previous one (*end); returns their bytes. */
static uint64_t check_arrays(const uint64_t *off, const uint64_t *want, int n, uint64_t *end, int layer, const char *what)
{
    uint64_t sum = 0;
    for (int j = 0; j < n; j++) {
        if (!want[j]) {
            cr_assert_eq(off[j], UINT64_MAX, "layer %d %s %d", layer, what, j);
            continue;
        }
        cr_assert_eq(off[j] % GW_VRAM_ALIGN, 0);
        cr_assert_geq(off[j], *end, "layer %d %s %d overlaps", layer, what, j);
        *end = off[j] + want[j], sum += want[j];
    }
    return sum;
}

/* The layouts the backend allocates by: each array at an aligned offset, in
 * order, of the size the model says, none where a layer has no such state. */
Test(vram, layouts)
{
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        struct model *m = open_fixture(fixtures[f][0], fixtures[f][1]);
        const struct model_hparams *hp = &m->hp;
        uint64_t (*so)[3] = calloc((size_t)hp->n_layer, sizeof *so);
        uint64_t (*ko)[4] = calloc((size_t)hp->n_layer, sizeof *ko);
        uint64_t (*vo)[GW_VRAM_VERIFY_ARRAYS] = calloc((size_t)hp->n_layer, sizeof *vo);
        const uint64_t vb = gw_vram_verify_layout(m, vo), R = GW_VERIFY_ROWS;
        cr_assert_eq(vb, gw_vram_verify_layout(m, NULL));
        uint64_t v_end = 0, v_sum = 0;
        const uint64_t sb = gw_vram_state_layout(m, so);
        const int64_t cap = 333;
        const uint64_t kb = gw_vram_kv_layout(m, cap, ko);
        cr_assert_eq(sb, gw_vram_state_layout(m, NULL));
        cr_assert_eq(kb, gw_vram_kv_layout(m, cap, NULL));
        uint64_t s_end = 0, k_end = 0, s_sum = 0;
        const uint64_t kvw = (uint64_t)hp->n_head_kv * hp->head_dim;
        for (int i = 0; i < hp->n_layer; i++) {
            const struct model_layer *l = &m->layers[i];
            const uint64_t want_s[3] = {l->kind == MODEL_LAYER_GDN ? 4 * (uint64_t)model_gdn_conv_state_floats(hp) : 0,
                                        l->kind == MODEL_LAYER_GDN ? 4 * (uint64_t)model_gdn_ssm_state_floats(hp) : 0,
                                        l->has_ple ? 4 * (uint64_t)model_ple_conv_state_floats(hp) : 0};
            const bool attn = l->kind == MODEL_LAYER_ATTN, qsa = attn && l->compress_ratio > 0;
            const uint64_t want_k[4] = {attn ? 4 * cap * kvw : 0, attn ? 4 * cap * kvw : 0, qsa ? 4 * cap * (uint64_t)hp->idx_head_dim : 0,
                                        qsa ? 4 * ((uint64_t)cap / l->compress_ratio + 1) * hp->idx_head_dim : 0};
            s_sum += check_arrays(so[i], want_s, 3, &s_end, i, "state");
            /* the verify checkpoint: the states again, and R rows of qkv, q|k|v, g, β; of the PLE conv's inputs */
            const uint64_t gdn_rows = 4 * R * (2 * (uint64_t)model_gdn_conv_dim(hp) + 2 * (uint64_t)hp->ssm_n_v_heads);
            const uint64_t want_v[GW_VRAM_VERIFY_ARRAYS] = {want_s[0], want_s[1], want_s[0] ? gdn_rows : 0, want_s[2],
                                                            l->has_ple ? 4 * R * (uint64_t)model_wide(hp) : 0};
            v_sum += check_arrays(vo[i], want_v, GW_VRAM_VERIFY_ARRAYS, &v_end, i, "verify");
            check_arrays(ko[i], want_k, 4, &k_end, i, "kv");
        }
        cr_assert_leq(s_end, sb);
        cr_assert_leq(k_end, kb);
        cr_assert_geq(sb, s_sum);
        cr_assert_leq(v_end, vb);
        cr_assert(vb >= v_sum && (v_sum > 0) == (s_sum > 0), "a verify checkpoint where there is recurrent state");
        for (int il = 0; il < hp->n_layer + hp->n_nextn; il++) {
            uint64_t off[3];
            cr_assert_eq(gw_vram_slot_layout(m, il, 0, off), 0, "no slots: no bytes");
            const int64_t n = 5;
            const uint64_t b = gw_vram_slot_layout(m, il, n, off);
            cr_assert_geq(b, n * gw_vram_expert_bytes(m, il));
            cr_assert_lt(b, n * gw_vram_expert_bytes(m, il) + 3 * GW_VRAM_ALIGN);
            for (int j = 0; j < 3; j++) cr_assert_eq(off[j] % GW_VRAM_ALIGN, 0);
        }
        free(so), free(ko), free(vo);
        model_close(m);
    }
}

/* A separate MTP file (nebula-convert --mtp-out) of a type (iq4_xs) whose
 * matrices the device widens to F32 (tiny-b's shapes at a hidden size of
 * 256, so that IQ4_XS's 256-value blocks fit): the plan counts the same
 * bytes as with the block inside the model file, and its widened matrices
 * too. */
Test(vram, separate_mtp_file_counts_the_same)
{
    char err[512] = "";
    static const char *const keys[] = {"hidden_size", "ple_embed_dim"};
    const int vals[] = {256, 258}; /* the PLE width a multiple of its 6 n-gram heads */
    struct model *in, *sep;
    const char *in_path = fixture_gguf_edited("tiny-b", "tiny-b-256-iq4_xs", 2, keys, vals, "--type iq4_xs");
    const char *main_path = fixture_gguf_edited("tiny-b", "tiny-b-256-iq4_xs-mtp-separate", 2, keys, vals,
                                                "--type iq4_xs --mtp-out build/fixtures/tiny-b-256-iq4_xs-mtp-only.gguf");
    cr_assert_eq(model_open(in_path, &in, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_open_mtp(main_path, "build/fixtures/tiny-b-256-iq4_xs-mtp-only.gguf", &sep, err, sizeof err), 0, "%s", err);
    uint64_t d1, m1, d2, m2;
    cr_assert_eq(gw_vram_dense_bytes(in, &d1, &m1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_vram_dense_bytes(sep, &d2, &m2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d1, d2);
    cr_assert_eq(m1, m2);
    cr_assert_gt(m2, 0);
    struct gw_vram_parts p1, p2;
    gw_vram_plan(in, NULL, 256, &p1);
    gw_vram_plan(sep, NULL, 256, &p2);
    cr_assert_eq(p1.slots, p2.slots, "the MTP block's experts are slots too");
    cr_assert_gt(p2.n_widened, 0);
    cr_assert_eq(p1.n_widened, p2.n_widened, "the MTP file's widened matrices are counted");
    model_close(in), model_close(sep);
}

/* gw_ple_host_detach (ple_tier ram or ssd on cuda): the dense weights the
 * device holds lose exactly the table's bytes, and nothing else changes. */
Test(vram, host_table_leaves_the_dense_weights)
{
    struct model *m = open_fixture("tiny-b", "mix");
    char err[256];
    uint64_t d0, m0, d1, m1;
    cr_assert_eq(gw_vram_dense_bytes(m, &d0, &m0, err, sizeof err), 0, "%s", err);
    const uint64_t table = gw_vram_ple_table_bytes(m);
    cr_assert_gt(table, 0, "tiny-b has an n-gram table");
    struct gw_ple_host h;
    gw_ple_host_detach(m, &h);
    cr_assert_eq(gw_vram_ple_table_bytes(m), 0);
    cr_assert_eq(gw_vram_dense_bytes(m, &d1, &m1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d1, d0 - table, "dense %" PRIu64 " -> %" PRIu64 ", table %" PRIu64, d0, d1, table);
    cr_assert_eq(m1, m0);
    cr_assert_eq(h.rows, m->ple_table.ne[1]);
    model_close(m);
}
