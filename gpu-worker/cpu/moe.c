/* moe.c — routed experts plus the gated shared expert.
 *
 * Router: softmax over all E logits (the probabilities in fp32, as
 * transformers computes them), the top k kept (ties to the lower expert
 * index), renormalised to sum 1 when the model says so.  Each expert is
 * W_down(silu(W_gate x) ⊙ W_up x); the tokens routed to one expert are
 * gathered and run as one batch, so its weight rows are decoded once per
 * batch.  The shared expert runs on every token, scaled by
 * sigmoid(w_sh · x). */
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "gpu-worker/cpu/cpu.h"

/* Top-k of the softmaxed router logits of one token: ids and weights. */
static void route(const struct model_hparams *hp, float *probs, int *ids, float *wts)
{
    const int E = hp->n_expert, k = hp->n_expert_used;
    cpu_softmax(probs, E);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ids[i] == e;
            if (!taken && (best < 0 || probs[e] > probs[best])) best = e;
        }
        ids[j] = best;
        wts[j] = probs[best];
    }
    if (hp->expert_weights_norm) {
        double s = 0;
        for (int j = 0; j < k; j++) s += wts[j];
        for (int j = 0; j < k; j++) wts[j] = (float)(wts[j] / s);
    }
}

/* out (T × C) += scale[t] · W_down(silu(W_gate x) ⊙ W_up x) for the T rows of x. */
static int ffn_add(const struct cpu_mat *gate, const struct cpu_mat *up, const struct cpu_mat *down, const float *x,
                   int T, const float *scale, float *out)
{
    const int64_t I = gate->n_out, C = down->n_out;
    float *g = malloc((size_t)(T * I) * sizeof *g), *u = malloc((size_t)(T * I) * sizeof *u);
    float *d = malloc((size_t)(T * C) * sizeof *d);
    int rc = g && u && d ? 0 : NB_ENOMEM;
    if (rc == 0) {
        cpu_matmul(gate, x, T, g);
        cpu_matmul(up, x, T, u);
        for (int64_t i = 0; i < (int64_t)T * I; i++) g[i] = cpu_silu(g[i]) * u[i];
        cpu_matmul(down, g, T, d);
        for (int t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) out[t * C + c] += scale[t] * d[t * C + c];
    }
    free(g);
    free(u);
    free(d);
    return rc;
}

/* Runs local expert e on the (token, slot) pairs routed to it and writes
 * each pair's weighted output into contrib[t·k + j] (C floats). */
static int run_expert(const struct model_hparams *hp, const struct model_moe *w, int e, const float *x, int T,
                      const int *ids, const float *wts, float *contrib, float *xs, float *ys, float *sc, int *slot,
                      uint64_t *computed)
{
    const int k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    int n = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++)
            if (ids[t * k + j] == e) {
                memcpy(xs + (int64_t)n * C, x + (int64_t)t * C, (size_t)C * sizeof *xs);
                sc[n] = wts[t * k + j];
                slot[n++] = t * k + j;
            }
    if (n == 0) return 0;
    memset(ys, 0, (size_t)(n * C) * sizeof *ys);
    struct cpu_mat g = cpu_mat_expert(&w->gate_exps, e), u = cpu_mat_expert(&w->up_exps, e),
                   d = cpu_mat_expert(&w->down_exps, e);
    int rc = ffn_add(&g, &u, &d, xs, n, sc, ys);
    if (rc == 0 && computed) __atomic_fetch_add(computed, (uint64_t)n, __ATOMIC_RELAXED);
    for (int i = 0; rc == 0 && i < n; i++) memcpy(contrib + (int64_t)slot[i] * C, ys + (int64_t)i * C, (size_t)C * sizeof *ys);
    return rc;
}

int gw_kernels_parse(const char *name, enum gw_kernels *k)
{
    if (name && strcmp(name, "ref") == 0) return *k = GW_KERNELS_REF, 0;
    if (name && strcmp(name, "fast") == 0) return *k = GW_KERNELS_FAST, 0;
    return NB_EINVAL;
}

const char *gw_kernels_name(enum gw_kernels k) { return k == GW_KERNELS_FAST ? "fast" : "ref"; }

#define EXPERT_ROWS 32 /* weight rows per work item of gw_expert_ffn_many */

/* A job's three matrices, as cpu_mats. */
struct job_mats {
    struct cpu_mat g, u, d;
};

static int job_mats_of(const struct gw_expert *w, struct job_mats *m)
{
    const struct quant_traits *tg = quant_traits_of(w->gate_type), *tu = quant_traits_of(w->up_type),
                              *td = quant_traits_of(w->down_type);
    if (!tg || !tu || !td || !tg->to_float || !tu->to_float || !td->to_float) return NB_ENOTSUP;
    m->g = (struct cpu_mat){w->gate, tg, w->n_embd, w->n_ff, quant_row_size(w->gate_type, w->n_embd)};
    m->u = (struct cpu_mat){w->up, tu, w->n_embd, w->n_ff, quant_row_size(w->up_type, w->n_embd)};
    m->d = (struct cpu_mat){w->down, td, w->n_ff, w->n_embd, quant_row_size(w->down_type, w->n_ff)};
    return 0;
}

static int64_t chunks(int64_t rows) { return (rows + EXPERT_ROWS - 1) / EXPERT_ROWS; }

/* The job of flat work item `it` (first[j] ≤ it < first[j + 1]). */
static int job_of(const int64_t *first, int n_jobs, int64_t it)
{
    int lo = 0, hi = n_jobs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= it) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

void gw_expert_scratch_free(struct gw_expert_scratch *s)
{
    free(s->buf);
    s->buf = NULL, s->bytes = 0;
}

/* The key idea: the work of every job is cut into items of EXPERT_ROWS weight
 * rows, numbered flat over the jobs, and threads take items dynamically —
 * phase 1 the same rows of gate and up (h = gate · x, u = up · x, then
 * silu(h) ⊙ u on those rows), then, after the one barrier, phase 2 the down
 * rows written straight into out and scaled.  Two barriers per call (with
 * the region's end): with OMP_WAIT_POLICY=passive each is a futex wake-up.
 * Each output value is computed by one row function with the same
 * operations as cpu_matmul, so ref results do not depend on the split, and
 * 20 experts of one token keep 16 threads busy.  The per-call tables and
 * the h/u rows are one block of the caller's scratch (grown, never shrunk),
 * so a worker's steady state allocates nothing. */
int gw_expert_ffn_many(const struct gw_expert_job *jobs, int n_jobs, enum gw_kernels k, struct gw_expert_scratch *s)
{
    if (n_jobs <= 0) return 0;
    struct gw_expert_scratch own = {0};
    if (!s) s = &own;
    const size_t n_tab = (size_t)n_jobs + 1; /* entries of first1, first2, hoff */
    size_t h_floats = 0;
    for (int j = 0; j < n_jobs; j++) h_floats += 2 * (size_t)jobs[j].n * (size_t)jobs[j].w.n_ff;
    const size_t at_first = align64((size_t)n_jobs * sizeof(struct job_mats));
    const size_t at_hoff = at_first + align64(2 * n_tab * sizeof(int64_t));
    const size_t at_h = at_hoff + align64(n_tab * sizeof(size_t));
    const size_t bytes = at_h + h_floats * sizeof(float);
    if (bytes > s->bytes) {
        free(s->buf);
        s->bytes = (s->buf = malloc(bytes)) ? bytes : 0;
    }
    int rc = s->buf ? 0 : NB_ENOMEM;
    uint8_t *base = s->buf;
    struct job_mats *m = (struct job_mats *)base;
    int64_t *first1 = (int64_t *)(base + at_first), *first2 = first1 + n_tab;
    size_t *hoff = (size_t *)(base + at_hoff);
    float *h = (float *)(base + at_h);
    int64_t work = 0;
    for (int j = 0; rc == 0 && j < n_jobs; j++) {
        const struct gw_expert *w = &jobs[j].w;
        rc = job_mats_of(w, &m[j]);
        first1[j] = j ? first1[j - 1] + chunks(jobs[j - 1].w.n_ff) : 0;
        first2[j] = j ? first2[j - 1] + chunks(jobs[j - 1].w.n_embd) : 0;
        hoff[j] = j ? hoff[j - 1] + 2 * (size_t)jobs[j - 1].n * (size_t)jobs[j - 1].w.n_ff : 0;
        work += 3 * (int64_t)jobs[j].n * w->n_embd * w->n_ff;
    }
    if (rc == 0) {
        first1[n_jobs] = first1[n_jobs - 1] + chunks(jobs[n_jobs - 1].w.n_ff);
        first2[n_jobs] = first2[n_jobs - 1] + chunks(jobs[n_jobs - 1].w.n_embd);
        hoff[n_jobs] = h_floats;
        void (*rows)(const struct cpu_mat *, const float *, int64_t, int, float *, int64_t, int64_t, int64_t) =
            k == GW_KERNELS_FAST ? cpu_matmul_rows_f32 : cpu_matmul_rows;
        const int64_t n1 = first1[n_jobs], n2 = first2[n_jobs];
#pragma omp parallel if (work >= CPU_PAR_MIN_WORK)
        {
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n1; it++) {
                int j = job_of(first1, n_jobs, it);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t I = J->w.n_ff, r0 = (it - first1[j]) * EXPERT_ROWS;
                const int64_t r1 = r0 + EXPERT_ROWS < I ? r0 + EXPERT_ROWS : I;
                float *g = h + hoff[j], *u = g + (size_t)J->n * (size_t)I;
                rows(&m[j].g, J->x, J->w.n_embd, J->n, g, I, r0, r1);
                rows(&m[j].u, J->x, J->w.n_embd, J->n, u, I, r0, r1);
                for (int t = 0; t < J->n; t++)
                    for (int64_t i = t * I + r0; i < t * I + r1; i++) g[i] = cpu_silu(g[i]) * u[i];
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n2; it++) {
                int j = job_of(first2, n_jobs, it);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t C = J->w.n_embd, r0 = (it - first2[j]) * EXPERT_ROWS;
                const int64_t r1 = r0 + EXPERT_ROWS < C ? r0 + EXPERT_ROWS : C;
                rows(&m[j].d, h + hoff[j], J->w.n_ff, J->n, J->out, C, r0, r1);
                /* out = 0 + scale · d: ffn_add's sum into a zeroed row, bit for bit (-0 becomes +0). */
                for (int t = 0; t < J->n; t++)
                    for (int64_t c = r0; c < r1; c++) J->out[t * C + c] = 0.0f + J->scale[t] * J->out[t * C + c];
            }
        }
    }
    gw_expert_scratch_free(&own);
    return rc;
}

int gw_expert_ffn(const struct gw_expert *w, const float *x, int n, const float *scale, float *out)
{
    struct gw_expert_job job = {*w, x, n, scale, out};
    return gw_expert_ffn_many(&job, 1, GW_KERNELS_REF, NULL);
}

/* The pairs whose expert is remote, handed to the backend's remote hook. */
static int run_remote(const struct model_hparams *hp, const struct cpu_moe_ctx *mc, const float *x, int T, const int *ids,
                      const float *wts, float *contrib)
{
    const int k = hp->n_expert_used, E = hp->n_expert;
    const int64_t C = hp->n_embd;
    const uint8_t *local = mc->remote->local + (size_t)mc->layer * E;
    int32_t *rows = malloc((size_t)T * k * sizeof *rows), *exps = malloc((size_t)T * k * sizeof *exps);
    float *w = malloc((size_t)T * k * sizeof *w), *out = malloc((size_t)T * k * (size_t)C * sizeof *out);
    int *slot = malloc((size_t)T * k * sizeof *slot), n = 0, rc = rows && exps && w && out && slot ? 0 : NB_ENOMEM;
    for (int t = 0; rc == 0 && t < T; t++)
        for (int j = 0; j < k; j++)
            if (!local[ids[t * k + j]]) {
                rows[n] = t, exps[n] = ids[t * k + j], w[n] = wts[t * k + j], slot[n++] = t * k + j;
            }
    char err[256] = "";
    if (rc == 0 && n > 0) rc = mc->remote->fn(mc->remote->ctx, mc->layer, T, x, n, rows, exps, w, out, err, sizeof err);
    for (int i = 0; rc == 0 && i < n; i++) memcpy(contrib + (int64_t)slot[i] * C, out + (int64_t)i * C, (size_t)C * sizeof *out);
    free(rows);
    free(exps);
    free(w);
    free(out);
    free(slot);
    return rc;
}

int cpu_moe_forward(const struct model_hparams *hp, const struct model_moe *w, const struct cpu_layer_consts *c,
                    const float *x, int T, float *y, const struct cpu_moe_ctx *mc)
{
    const int E = hp->n_expert, k = hp->n_expert_used;
    const int64_t C = hp->n_embd;
    const bool remote = mc && mc->remote && mc->remote->fn;
    float *probs = malloc((size_t)T * E * sizeof *probs), *wts = malloc((size_t)T * k * sizeof *wts);
    int *ids = malloc((size_t)T * k * sizeof *ids), *slot = malloc((size_t)T * k * sizeof *slot);
    float *xs = malloc((size_t)(T * C) * sizeof *xs), *ys = malloc((size_t)(T * C) * sizeof *ys);
    float *sc = malloc((size_t)T * k * sizeof *sc), *contrib = malloc((size_t)T * k * (size_t)C * sizeof *contrib);
    int rc = probs && wts && ids && slot && xs && ys && sc && contrib ? 0 : NB_ENOMEM;
    if (rc) goto out;
    struct cpu_mat router = cpu_mat_of(&w->router);
    cpu_matmul(&router, x, T, probs);
    for (int t = 0; t < T; t++) route(hp, probs + (int64_t)t * E, ids + t * k, wts + t * k);
    if (mc && mc->tap && mc->tap->route_tap) mc->tap->route_tap(mc->tap->route_ctx, mc->layer, T, k, ids, wts);
    const uint8_t *local = remote ? mc->remote->local + (size_t)mc->layer * E : NULL;
    for (int e = 0; e < E && rc == 0; e++)
        if (!local || local[e]) rc = run_expert(hp, w, e, x, T, ids, wts, contrib, xs, ys, sc, slot, mc ? mc->computed : NULL);
    if (rc == 0 && remote) rc = run_remote(hp, mc, x, T, ids, wts, contrib);
    if (rc) goto out;
    /* Each token's k contributions summed in ascending expert order, wherever
     * they were computed: the order (so the float result) never depends on
     * the placement. */
    memset(y, 0, (size_t)(T * C) * sizeof *y);
    for (int t = 0; t < T; t++) {
        int *order = slot + t * k, nk = k; /* slot is free again: reuse it */
        for (int j = 0; j < nk; j++) order[j] = j;
        for (int a = 1; a < nk; a++)
            for (int b = a; b > 0 && ids[t * k + order[b]] < ids[t * k + order[b - 1]]; b--) {
                int tmp = order[b];
                order[b] = order[b - 1], order[b - 1] = tmp;
            }
        for (int j = 0; j < nk; j++) {
            const float *src = contrib + ((int64_t)t * k + order[j]) * C;
            for (int64_t ci = 0; ci < C; ci++) y[t * C + ci] += src[ci];
        }
    }
    for (int t = 0; t < T; t++) sc[t] = cpu_sigmoid((float)cpu_dot(c->shexp_gate, x + t * C, C));
    struct cpu_mat g = cpu_mat_of(&w->gate_shexp), u = cpu_mat_of(&w->up_shexp), d = cpu_mat_of(&w->down_shexp);
    rc = ffn_add(&g, &u, &d, x, T, sc, y);
out:
    free(probs);
    free(wts);
    free(ids);
    free(slot);
    free(xs);
    free(ys);
    free(sc);
    free(contrib);
    return rc;
}
