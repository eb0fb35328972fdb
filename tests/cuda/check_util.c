/* check_util.c — what the GPU checks of the CUDA backend share
 * (tests/cuda/check.h): the verdict lines, the comparisons, the hooks
 * answered on the CPU, backends, sequences and greedy runs. */
#include "tests/cuda/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util/err.h"

int failures;
double tol = 1e-3;
const char *kernels;

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void die(const char *what, const char *err)
{
    fprintf(stderr, "FAIL: %s: %s\n", what, err);
    exit(1);
}

/* max|a-b| / max|b| over n values */
double rel_err(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d; /* NaN counts as the largest error */
        if (fabs(b[i]) > mr) mr = fabs(b[i]);
    }
    return mr > 0 ? md / mr : md;
}

void report(const char *name, bool ok, const char *fmt, double v)
{
    printf("%s: %-10s ", ok ? "PASS" : "FAIL", name);
    printf(fmt, v);
    printf("\n");
    fflush(stdout);
    failures += !ok;
}

int32_t argmax(const float *v, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

int32_t *read_tokens(const char *path, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) die("open", path);
    int cap = 1024;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    long x;
    *n = 0;
    while (fscanf(f, "%ld", &x) == 1) {
        if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[(*n)++] = (int32_t)x;
    }
    fclose(f);
    return v;
}

/* ---- route tap: every layer's expert ids, appended ---- */
void route_tap(void *ctx, int layer, int n_tokens, int k, const int32_t *experts, const float *weights)
{
    struct routes *r = ctx;
    int64_t add = (int64_t)n_tokens * k;
    if (r->n + add > r->cap) r->ids = realloc(r->ids, (size_t)(r->cap = 2 * (r->n + add)) * sizeof *r->ids);
    memcpy(r->ids + r->n, experts, (size_t)add * sizeof *experts);
    r->n += add;
    (void)layer, (void)weights;
}

/* ---- the remote-expert hook, answered on the CPU ---- */
int remote_fn(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
              const int32_t *experts, const float *weights, float *out, char *err, size_t errlen)
{
    struct remote_ctx *r = ctx;
    __atomic_add_fetch(&r->calls, 1, __ATOMIC_RELAXED);
    if (r->fail) return nb_errf(err, errlen, NB_EIO, "told to fail");
    const struct model_moe *w = &r->m->layers[layer].moe;
    const int64_t C = r->m->hp.n_embd;
    /* one job per pair, all in one gw_expert_ffn_many call: its threads split
     * the rows, and with the ref kernels each pair's bits are gw_expert_ffn's */
    struct gw_expert_job *jobs = malloc((size_t)(n_pairs > 0 ? n_pairs : 1) * sizeof *jobs);
    if (!jobs) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    for (int i = 0; i < n_pairs; i++) {
        int e = experts[i];
        if (rows[i] < 0 || rows[i] >= n_rows) {
            free(jobs);
            return nb_errf(err, errlen, NB_EINVAL, "pair %d: row %d", i, rows[i]);
        }
        struct gw_expert ex = {w->gate_exps.data + (size_t)e * w->gate_exps.mat_bytes,
                               w->up_exps.data + (size_t)e * w->up_exps.mat_bytes,
                               w->down_exps.data + (size_t)e * w->down_exps.mat_bytes,
                               w->gate_exps.type, w->up_exps.type, w->down_exps.type, C, w->gate_exps.ne[1]};
        jobs[i] = (struct gw_expert_job){ex, x + (int64_t)rows[i] * C, 1, &weights[i], out + (int64_t)i * C};
    }
    int rc = gw_expert_ffn_many(jobs, n_pairs, GW_KERNELS_REF, &r->scratch);
    free(jobs);
    if (rc) return nb_errf(err, errlen, NB_ENOTSUP, "experts of layer %d", layer);
    r->pairs += (uint64_t)n_pairs;
    return 0;
}

/* ---- the PLE row hook, answered from the model's table on the host ---- */
int ple_fn(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen)
{
    const struct model *m = ctx;
    const struct model_tensor *t = &m->ple_table;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i] < 0 || rows[i] >= t->ne[1]) return nb_errf(err, errlen, NB_EINVAL, "row %lld", (long long)rows[i]);
        t->qt->to_float(t->data + (size_t)rows[i] * t->row_bytes, out + (int64_t)i * t->ne[0], t->ne[0]);
    }
    return 0;
}

gw_backend *make_pl(const struct model *m, const char *kind, bool no_graphs, const uint8_t *local)
{
    char err[1024];
    gw_backend *be;
    struct gw_backend_params p = {.kind = kind, .no_graphs = no_graphs, .local = local};
    if (!strcmp(kind, "cuda")) p.kernels = kernels;
    int rc = gw_backend_create(m, &p, &be, err, sizeof err);
    if (rc && strcmp(kind, "cuda") == 0 && rc == NB_ENOTSUP) {
        printf("SKIP: %s\n", err);
        exit(77);
    }
    if (rc) die(kind, err);
    return be;
}

gw_backend *make_p(const struct model *m, const char *kind, bool no_graphs)
{
    return make_pl(m, kind, no_graphs, NULL);
}
gw_backend *make(const struct model *m, const char *kind) { return make_p(m, kind, false); }

double mib(uint64_t b) { return (double)b / 1048576.0; }

gw_seq *seq(gw_backend *be)
{
    char err[256];
    gw_seq *s;
    if (gw_seq_create(be, &s, err, sizeof err)) die("seq", err);
    return s;
}

void eval(gw_seq *s, const int32_t *tok, int n, enum gw_rows lr, float *logits, enum gw_rows wr, float *wide,
          struct routes *rt)
{
    char err[512];
    struct gw_eval_args a = {.tokens = tok, .n_tokens = n, .logits_rows = lr, .logits = logits, .wide_rows = wr, .wide = wide,
                             .route_tap = rt ? route_tap : NULL, .route_ctx = rt};
    if (gw_eval(s, &a, err, sizeof err)) die("eval", err);
}

/* FNV-1a of a step's logits: the graph and plain runs are compared bit for bit, step by step. */
uint64_t hash_bytes(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* Greedy generation of n tokens after the prompt; ids into out (and each
 * step's logits hash into hashes, if given); returns seconds of the decode loop. */
double greedy_h(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out, float *last_logits,
                uint64_t *hashes)
{
    const int64_t V = gw_backend_model(be)->hp.n_vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    gw_seq *s = seq(be);
    eval(s, prompt, np, GW_ROWS_LAST, lg, GW_ROWS_NONE, NULL, NULL);
    double t0 = now();
    for (int i = 0; i < n; i++) {
        out[i] = argmax(lg, V);
        if (hashes) hashes[i] = hash_bytes(lg, (size_t)V * sizeof *lg);
        if (i + 1 < n) eval(s, &out[i], 1, GW_ROWS_LAST, lg, GW_ROWS_NONE, NULL, NULL);
    }
    double dt = now() - t0;
    if (last_logits) memcpy(last_logits, lg, (size_t)V * sizeof *lg);
    gw_seq_free(s);
    free(lg);
    return dt;
}

double greedy(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out, float *last_logits)
{
    return greedy_h(be, prompt, np, n, out, last_logits, NULL);
}

/* Greedy generation with the argmax taken by the backend and no logits copied
 * out (gw_eval_args.argmax); returns seconds of the decode loop. */
double greedy_argmax(gw_backend *be, const int32_t *prompt, int np, int n, int32_t *out)
{
    char err[512];
    gw_seq *s = seq(be);
    struct gw_eval_args a = {.tokens = prompt, .n_tokens = np, .logits_rows = GW_ROWS_LAST, .argmax = &out[0]};
    if (gw_eval(s, &a, err, sizeof err)) die("eval (argmax)", err);
    double t0 = now();
    for (int i = 1; i < n; i++) {
        struct gw_eval_args b = {.tokens = &out[i - 1], .n_tokens = 1, .logits_rows = GW_ROWS_LAST, .argmax = &out[i]};
        if (gw_eval(s, &b, err, sizeof err)) die("eval (argmax)", err);
    }
    double dt = now() - t0;
    gw_seq_free(s);
    return dt;
}

int same_prefix(const int32_t *a, const int32_t *b, int n)
{
    int i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}
