/* test_vram.c — the VRAM budget's host arithmetic (gpu-worker/vram.c): the
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
#include "gpu-worker/backend.h"
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
    gw_vram_plan(m, NULL, 4096, &a);
    gw_vram_plan(&big, NULL, 4096, &b);
    cr_assert_eq(b.scratch - a.scratch, 4ull * 1000 * (2 + GW_VRAM_HEAD_ROWS));
    gw_vram_plan(m, NULL, 8, &a); /* a context shorter than the head's rows: only those rows */
    gw_vram_plan(&big, NULL, 8, &b);
    cr_assert_eq(b.scratch - a.scratch, 4ull * 1000 * (2 + 8));
    model_close(m);
}

/* Dense weights as the device holds them: an F32 model's are its file's
 * non-expert tensor bytes (shared tensors once); a quantized mix's are at
 * least its file's (types the device does not decode grow to F32). */
static uint64_t file_dense_bytes(const struct model *m)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_tensor_count(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(m->gguf, i);
        if (!strstr(t->name, "_exps.")) total += t->nbytes;
    }
    return total;
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
    cr_assert(!gw_vram_native_type(QT_Q2_K));
    cr_assert(!gw_vram_native_type(QT_IQ4_XS));
}
