/* nebula-bench-reference — tokens per second of the CPU reference backend.
 *
 * For every GGUF in a folder: prefill a prompt of seeded random ids, then
 * decode greedily, several repetitions on a fresh sequence; prints the median
 * (and min–max) as a Markdown table.  The reference is the exactness oracle,
 * not the fast path: these numbers are a record of its cost, not a target.
 * `make bench` prepares the models (tools/bench/prepare-models.sh). */
#include "core/model/model.h"
#include "core/sampling/sampling.h"
#include "engine/backend.h"
#include "core/util/clock.h"
#include "core/util/opts.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

struct opts {
    const char *dir;
    int prompt, gen, reps, threads;
};

/* One prefill + decode run; returns tok/s of each phase. */
static int run_once(gw_seq *s, const struct model *m, const struct opts *o, double *pre_tps, double *dec_tps)
{
    int64_t V = m->hp.n_vocab;
    int32_t *ids = malloc((size_t)o->prompt * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    char err[512];
    int rc = -1;
    if (!ids || !logits) goto out;
    uint64_t x = 12345;
    for (int i = 0; i < o->prompt; i++) ids[i] = (int32_t)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (int32_t)V;
    gw_seq_reset(s);
    double t0 = nb_now_s();
    struct gw_eval_args a = {.tokens = ids, .n_tokens = o->prompt, .logits_rows = GW_ROWS_LAST, .logits = logits};
    if (gw_eval(s, &a, err, sizeof err)) goto fail;
    double t1 = nb_now_s();
    for (int i = 0; i < o->gen; i++) {
        int32_t id = sampling_argmax(logits, (int32_t)V);
        struct gw_eval_args d = {.tokens = &id, .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .logits = logits};
        if (gw_eval(s, &d, err, sizeof err)) goto fail;
    }
    double t2 = nb_now_s();
    *pre_tps = o->prompt / (t1 - t0);
    *dec_tps = o->gen / (t2 - t1);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "nebula-bench-reference: %s\n", err);
out:
    free(ids);
    free(logits);
    return rc;
}

static int bench_model(const char *path, const struct opts *o)
{
    char err[1024];
    struct model *m;
    gw_backend *be = NULL;
    gw_seq *s = NULL;
    if (model_open(path, &m, err, sizeof err)) {
        fprintf(stderr, "nebula-bench-reference: %s: %s\n", path, err);
        return -1;
    }
    struct gw_backend_params bp = {.kind = "cpu", .n_threads = o->threads};
    int rc = -1;
    double *pre = calloc((size_t)o->reps, sizeof *pre), *dec = calloc((size_t)o->reps, sizeof *dec);
    if (!pre || !dec || gw_backend_create(m, &bp, &be, err, sizeof err) || gw_seq_create(be, &s, err, sizeof err)) {
        fprintf(stderr, "nebula-bench-reference: %s: %s\n", path, err);
        goto out;
    }
    for (int r = 0; r < o->reps; r++)
        if (run_once(s, m, o, &pre[r], &dec[r])) goto out;
    qsort(pre, (size_t)o->reps, sizeof *pre, cmp_double);
    qsort(dec, (size_t)o->reps, sizeof *dec, cmp_double);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    double gib = 0;
    for (int64_t i = 0; i < gguf_tensor_count(m->gguf); i++) gib += (double)gguf_tensor_at(m->gguf, i)->nbytes;
    printf("| %-26s | %2d | %3d/%-2d | %6.2f | %4d | %9.2f (%.2f–%.2f) | %9.3f (%.3f–%.3f) | %6.0f |\n", base, m->hp.n_layer,
           m->hp.n_expert, m->hp.n_expert_used, gib / (1 << 30), o->prompt, pre[o->reps / 2], pre[0], pre[o->reps - 1],
           dec[o->reps / 2], dec[0], dec[o->reps - 1], ru.ru_maxrss / 1024.0);
    fflush(stdout);
    rc = 0;
out:
    free(pre);
    free(dec);
    if (s) gw_seq_free(s);
    if (be) gw_backend_free(be);
    model_close(m);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {"build/bench-models", 64, 16, 3, 0};
    static const struct option lo[] = {
        NB_OPT_ARG("models-dir", 'd'), NB_OPT_ARG("prompt", 'p'), NB_OPT_ARG("gen", 'g'), NB_OPT_ARG("reps", 'r'),
        NB_OPT_ARG("threads", 't'), NB_OPT_FLAG("help", 'h'), NB_OPT_END};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'd': o.dir = optarg; break;
        case 'p': o.prompt = atoi(optarg); break;
        case 'g': o.gen = atoi(optarg); break;
        case 'r': o.reps = atoi(optarg); break;
        case 't': o.threads = atoi(optarg); break;
        case 'h':
            printf("usage: nebula-bench-reference [--models-dir DIR] [--prompt N] [--gen N] [--reps N] [--threads N]\n"
                   "Times prefill and greedy decode of the CPU reference backend on every DIR/*.gguf\n"
                   "(default build/bench-models, made by tools/bench/prepare-models.sh).\n");
            return 0;
        default: return 2;
        }
    }
    if (o.prompt < 1 || o.gen < 1 || o.reps < 1) {
        fprintf(stderr, "nebula-bench-reference: --prompt, --gen and --reps must be positive\n");
        return 2;
    }
    DIR *d = opendir(o.dir);
    if (!d) {
        fprintf(stderr, "nebula-bench-reference: no models in %s (run tools/bench/prepare-models.sh)\n", o.dir);
        return 1;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (!n) {
        fprintf(stderr, "nebula-bench-reference: no .gguf in %s\n", o.dir);
        return 1;
    }
    printf("CPU reference backend (fp32 activations, double-accumulated dots); prompt of seeded random ids, greedy decode of %d tokens; "
           "%d repetitions, median (min–max); peak RSS of the process so far\n\n",
           o.gen, o.reps);
    printf("| model | layers | experts | weights GiB | prompt | prefill tok/s | decode tok/s | peak RSS MiB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o.dir, names[i]);
        if (bench_model(path, &o)) rc = 1;
        free(names[i]);
    }
    return rc;
}
