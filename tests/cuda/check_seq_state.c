/* check_seq_state.c — gw_seq_save / gw_seq_load on the CUDA backend, on a GPU
 * (the prompt cache, issue 17; tests/cuda/run-seq-state-on-gpu.sh runs it):
 *   1. the resume rule on the device: a prefill split at each multiple of
 *      64 gives the unsplit prefill's logits bit for bit (what the
 *      coordinator's checkpoints rely on; the CPU reference's test is
 *      tests/engine/test_seq_state.c);
 *   2. a state saved after a prefill of 128 (device → host) and loaded into a
 *      fresh sequence (host → device) goes on bit for bit as the sequence it
 *      came from: the rest of the prefill, then decode steps (the CUDA graph
 *      of a loaded sequence too);
 *   3. the format is the CPU's: the CUDA state loaded into the CPU reference
 *      continues within the backend check's tolerance of the CPU's own run;
 *   4. a cut or other-size buffer is refused with NB_EINVAL, the sequence reset.
 * Prints one line per check; exits 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "engine/backend.h"

#define N 200
static int failures;

static void report(const char *what, bool ok, const char *detail)
{
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail[0] ? ": " : "", detail);
    if (!ok) failures++;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "FAIL %s: %s\n", what, err);
    exit(1);
}

static gw_seq *new_seq(gw_backend *be)
{
    char err[512];
    gw_seq *s;
    if (gw_seq_create(be, &s, err, sizeof err)) die("sequence", err);
    return s;
}

static void eval(gw_seq *s, const int32_t *t, int from, int to, float *lg)
{
    char err[512];
    struct gw_eval_args a = {.tokens = t + from, .n_tokens = to - from, .logits_rows = GW_ROWS_LAST, .logits = lg};
    if (gw_eval(s, &a, err, sizeof err)) die("eval", err);
}

static double rel(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static void *save(gw_seq *s, uint64_t *len)
{
    char err[512];
    uint64_t cap = gw_seq_save_bytes(s);
    void *b = malloc(cap ? cap : 1);
    if (!b || gw_seq_save(s, b, cap, len, err, sizeof err)) die("save", err);
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [--kernels ref|fast] [--tol X]\n", argv[0]);
        return 2;
    }
    const char *kernels = NULL;
    double tol = 1e-3;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else return fprintf(stderr, "unknown argument %s\n", argv[i]), 2;
    }
    char err[512], msg[256];
    struct model *m;
    if (model_open(argv[1], &m, err, sizeof err)) die("model", err);
    const int64_t V = m->hp.n_vocab;
    struct gw_backend_params pc = {.kind = "cpu"}, pg = {.kind = "cuda", .kernels = kernels};
    gw_backend *cpu, *gpu;
    if (gw_backend_create(m, &pc, &cpu, err, sizeof err)) die("cpu backend", err);
    if (gw_backend_create(m, &pg, &gpu, err, sizeof err)) die("cuda backend", err);
    printf("== %s (cuda kernels %s), resume alignment %d\n", argv[1], kernels ? kernels : "default", model_resume_align(m));
    int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 37 + 11) % V);
    float *ref = malloc((size_t)V * 4), *got = malloc((size_t)V * 4), *dec = malloc((size_t)V * 4 * 3);
    gw_seq *a = new_seq(gpu);
    eval(a, t, 0, N, ref);
    for (int i = 0; i < 3; i++) eval(a, t, i, i + 1, dec + (size_t)i * V);
    /* 1 */
    const int A = model_resume_align(m);
    for (int cut = A; cut < N; cut += A) {
        gw_seq *b = new_seq(gpu);
        eval(b, t, 0, cut, got);
        eval(b, t, cut, N, got);
        snprintf(msg, sizeof msg, "max rel diff %.3g", rel(got, ref, V));
        char what[96];
        snprintf(what, sizeof what, "cuda prefill split at %d is the unsplit one bit for bit", cut);
        report(what, !memcmp(got, ref, (size_t)V * 4), memcmp(got, ref, (size_t)V * 4) ? msg : "");
        gw_seq_free(b);
    }
    /* 2 */
    gw_seq *b = new_seq(gpu), *c = new_seq(gpu);
    eval(b, t, 0, 128, got);
    uint64_t len;
    void *blob = save(b, &len);
    printf("     state at 128 positions: %llu bytes\n", (unsigned long long)len);
    eval(c, t, 0, 9, got);
    int rc = gw_seq_load(c, blob, len, err, sizeof err);
    report("cuda load", rc == 0 && gw_seq_pos(c) == 128, rc ? err : "");
    eval(c, t, 128, N, got);
    report("cuda: resumed at 128, the rest of the prefill bit for bit", !memcmp(got, ref, (size_t)V * 4), "");
    for (int i = 0; i < 3; i++) {
        eval(c, t, i, i + 1, got);
        snprintf(msg, sizeof msg, "cuda: decode step %d after the load bit for bit", i);
        report(msg, !memcmp(got, dec + (size_t)i * V, (size_t)V * 4), "");
    }
    /* 3 */
    float *cref = malloc((size_t)V * 4);
    gw_seq *x = new_seq(cpu), *y = new_seq(cpu);
    eval(x, t, 0, N, cref);
    rc = gw_seq_load(y, blob, len, err, sizeof err);
    report("the cuda state loads into the cpu reference", rc == 0, rc ? err : "");
    if (!rc) {
        eval(y, t, 128, N, got);
        double d = rel(got, cref, V);
        snprintf(msg, sizeof msg, "max rel diff %.3g (tolerance %.0e)", d, tol);
        report("cpu continuing a cuda state agrees with the cpu's own run", d <= tol, msg);
    }
    /* 4 */
    rc = gw_seq_load(c, blob, len / 2, err, sizeof err);
    report("a cut state is refused, the sequence reset", rc == NB_EINVAL && gw_seq_pos(c) == 0, err);
    free(blob), free(ref), free(got), free(dec), free(cref);
    gw_seq_free(a), gw_seq_free(b), gw_seq_free(c), gw_seq_free(x), gw_seq_free(y);
    gw_backend_free(gpu), gw_backend_free(cpu);
    model_close(m);
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
