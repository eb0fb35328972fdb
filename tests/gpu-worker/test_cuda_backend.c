/* test_cuda_backend.c — the "cuda" kind as make test sees it.
 *
 * Where there is no GPU (CI, this project's build machine) creating a cuda
 * backend must fail cleanly with NB_ENOTSUP and a message naming the cause
 * ("no CUDA device: …", or "built without CUDA" where nvcc was absent), and
 * the test says SKIP for the comparison it could not make.  Where a GPU is
 * there, the comparison runs: tiny-a's logits for the whole prompt within
 * 1e-3 · max|ref| of the CPU reference, and on synthetic models whose GDN
 * key and value heads differ in size, a prefill and decode.  The full GPU checks (every fixture,
 * decode, MTP, hooks, 512-token greedy) are tests/cuda/run-backend-on-gpu.sh. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"
#include "tests/core/model_fixture.h"

/* A kernels name the backend does not have is refused before any device is looked for. */
Test(cuda_backend, unknown_kernels_refused)
{
    char err[256] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf("tiny-a"), &m, err, sizeof err), 0, "%s", err);
    struct gw_backend_params p = {.kind = "cuda", .kernels = "turbo"};
    gw_backend *be = NULL;
    int rc = gw_backend_create(m, &p, &be, err, sizeof err);
    cr_assert_null(be);
    if (strstr(err, "built without CUDA")) {
        cr_assert_eq(rc, NB_ENOTSUP);
    } else {
        cr_assert_eq(rc, NB_EINVAL, "%d: %s", rc, err);
        cr_assert(strstr(err, "\"turbo\"") && strstr(err, "ref or fast"), "%s", err);
    }
    model_close(m);
}

/* Over its VRAM budget the backend is not created, and says what each part needs. */
Test(cuda_backend, budget_refused)
{
    char err[1024] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf("tiny-a"), &m, err, sizeof err), 0, "%s", err);
    const size_t n = (size_t)(m->hp.n_layer + m->hp.n_nextn) * m->hp.n_expert;
    uint8_t *local = malloc(n);
    memset(local, 1, n);
    struct gw_backend_params p = {.kind = "cuda", .local = local, .vram_budget = 4096, .n_ctx = 256};
    gw_backend *be = NULL;
    int rc = gw_backend_create(m, &p, &be, err, sizeof err);
    free(local);
    cr_assert_null(be);
    if (rc == NB_ENOTSUP) {
        model_close(m);
        cr_skip_test("SKIP: %s", err);
    }
    cr_assert_eq(rc, NB_ENOMEM, "%d: %s", rc, err);
    cr_assert(strstr(err, "VRAM budget") && strstr(err, "dense weights") && strstr(err, "expert slots") &&
                  strstr(err, "256 positions"),
              "%s", err);
    model_close(m);
}

Test(cuda_backend, creates_or_says_why_not)
{
    char err[256] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf("tiny-a"), &m, err, sizeof err), 0, "%s", err);
    struct gw_backend_params p = {.kind = "cuda"};
    gw_backend *gpu;
    int rc = gw_backend_create(m, &p, &gpu, err, sizeof err);
    if (rc) {
        cr_assert_eq(rc, NB_ENOTSUP, "unexpected error %d: %s", rc, err);
        cr_assert(strstr(err, "no CUDA device") || strstr(err, "built without CUDA"), "unclear message: %s", err);
        cr_assert_null(gpu);
        model_close(m);
        cr_skip_test("SKIP: %s", err);
    }
    gw_backend *cpu;
    cr_assert_eq(gw_backend_create(m, NULL, &cpu, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(gw_backend_kind(gpu), "cuda");
    int T;
    int32_t *tok = fixture_ints("tiny-a", "tokens.txt", &T);
    const int64_t V = m->hp.n_vocab;
    float *lc = malloc((size_t)T * V * sizeof *lc), *lg = malloc((size_t)T * V * sizeof *lg);
    gw_seq *sc, *sg;
    cr_assert_eq(gw_seq_create(cpu, &sc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gw_seq_create(gpu, &sg, err, sizeof err), 0, "%s", err);
    struct gw_eval_args a = {.tokens = tok, .n_tokens = T, .logits_rows = GW_ROWS_ALL, .logits = lc};
    cr_assert_eq(gw_eval(sc, &a, err, sizeof err), 0, "%s", err);
    a.logits = lg;
    cr_assert_eq(gw_eval(sg, &a, err, sizeof err), 0, "%s", err);
    double md = 0, mr = 0;
    for (int64_t i = 0; i < (int64_t)T * V; i++) {
        double d = fabs((double)lg[i] - lc[i]);
        if (!(d <= md)) md = d;
        if (fabs(lc[i]) > mr) mr = fabs(lc[i]);
    }
    cr_assert(md <= 1e-3 * mr, "cuda logits off by %g (max|ref| %g)", md, mr);
    gw_seq_free(sc), gw_seq_free(sg);
    gw_backend_free(cpu), gw_backend_free(gpu);
    free(lc), free(lg), free(tok);
    model_close(m);
}

/* What a launcher's "auto" asks: the cpu backend always runs, an unknown kind
 * is a usage error, and cuda either names its device or says why not. */
Test(cuda_backend, probe_says_what_can_run)
{
    char msg[256];
    cr_assert_eq(gw_backend_probe("cpu", msg, sizeof msg), 0);
    cr_assert_eq(gw_backend_probe("tpu", msg, sizeof msg), NB_EINVAL);
    cr_assert(strstr(msg, "\"tpu\"") && strstr(msg, "cpu"), "%s", msg);
    int rc = gw_backend_probe("cuda", msg, sizeof msg);
    if (rc == 0)
        cr_assert(strstr(msg, "compute capability"), "%s", msg);
    else
        cr_assert(rc == NB_ENOTSUP && (strstr(msg, "no CUDA device") || strstr(msg, "built without CUDA") ||
                                       strstr(msg, "no kernels")),
                  "rc %d: %s", rc, msg);
}

/* GDN key and value heads of different sizes (synthetic models of tiny-a's
 * shapes, fixture_gguf_gdn_dims): half the prompt prefilled (the chunked
 * kernel), the rest decoded token by token (the decode kernels: the register
 * one for dk ≤ 128, the plain one above), every row's logits within 1e-3 ·
 * max|ref| of the CPU reference. */
static void gdn_dims_on_gpu(int dk, int dv)
{
    char err[256] = "";
    struct model *m;
    cr_assert_eq(model_open(fixture_gguf_gdn_dims("tiny-a", dk, dv), &m, err, sizeof err), 0, "%s", err);
    struct gw_backend_params p = {.kind = "cuda"};
    gw_backend *gpu, *cpu;
    int rc = gw_backend_create(m, &p, &gpu, err, sizeof err);
    if (rc) {
        cr_assert_eq(rc, NB_ENOTSUP, "unexpected error %d: %s", rc, err);
        model_close(m);
        cr_skip_test("SKIP: %s", err);
    }
    cr_assert_eq(gw_backend_create(m, NULL, &cpu, err, sizeof err), 0, "%s", err);
    int T;
    int32_t *tok = fixture_ints("tiny-a", "tokens.txt", &T);
    const int64_t V = m->hp.n_vocab;
    float *l[2];
    gw_backend *be[2] = {cpu, gpu};
    for (int b = 0; b < 2; b++) {
        l[b] = malloc((size_t)T * V * sizeof *l[b]);
        gw_seq *s;
        cr_assert_eq(gw_seq_create(be[b], &s, err, sizeof err), 0, "%s", err);
        struct gw_eval_args a = {.tokens = tok, .n_tokens = T / 2, .logits_rows = GW_ROWS_ALL, .logits = l[b]};
        cr_assert_eq(gw_eval(s, &a, err, sizeof err), 0, "%s", err);
        for (int t = T / 2; t < T; t++) {
            struct gw_eval_args d = {.tokens = tok + t, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = l[b] + (int64_t)t * V};
            cr_assert_eq(gw_eval(s, &d, err, sizeof err), 0, "%s", err);
        }
        gw_seq_free(s);
    }
    double md = 0, mr = 0;
    for (int64_t i = 0; i < (int64_t)T * V; i++) {
        double d = fabs((double)l[1][i] - l[0][i]);
        if (!(d <= md)) md = d;
        if (fabs(l[0][i]) > mr) mr = fabs(l[0][i]);
    }
    cr_assert(md <= 1e-3 * mr, "dk %d dv %d: cuda logits off by %g (max|ref| %g)", dk, dv, md, mr);
    gw_backend_free(cpu), gw_backend_free(gpu);
    free(l[0]), free(l[1]), free(tok);
    model_close(m);
}

Test(cuda_backend, gdn_values_wider_than_keys) { gdn_dims_on_gpu(16, 24); }
Test(cuda_backend, gdn_values_narrower_than_keys) { gdn_dims_on_gpu(24, 16); }
Test(cuda_backend, gdn_keys_past_the_register_kernel) { gdn_dims_on_gpu(160, 24); }
