/* ffn.c — one routed expert's FFN on the CPU (engine/ffn.h), and a batch of
 * them in one parallel region.
 *
 * Each expert is W_down(silu(W_gate x) ⊙ W_up x), every weight row decoded
 * through its format's row function (engine/cpu/linalg.c) — the same row
 * arithmetic as the reference backend's MoE layer (moe.c), so a result
 * computed here for a remote expert is the bits the backend would have
 * computed itself.  What a worker outside the backend runs (cpu-moe-worker,
 * nebula-bench-expert). */
#include "engine/ffn.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

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

/* Item it of a phase numbered by first[]: its job, returned, and the rows
 * [*r0, *r1) of that job's gate/up (n_ff rows) or down (n_embd rows) matrix. */
static int item_of(const int64_t *first, int n_jobs, int64_t it, const struct gw_expert_job *jobs, bool down,
                   int64_t *r0, int64_t *r1)
{
    const int j = job_of(first, n_jobs, it);
    const int64_t n = down ? jobs[j].w.n_embd : jobs[j].w.n_ff;
    *r0 = (it - first[j]) * EXPERT_ROWS;
    *r1 = *r0 + EXPERT_ROWS < n ? *r0 + EXPERT_ROWS : n;
    return j;
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
                int64_t r0, r1;
                const int j = item_of(first1, n_jobs, it, jobs, false, &r0, &r1);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t I = J->w.n_ff;
                float *g = h + hoff[j], *u = g + (size_t)J->n * (size_t)I;
                rows(&m[j].g, J->x, J->w.n_embd, J->n, g, I, r0, r1);
                rows(&m[j].u, J->x, J->w.n_embd, J->n, u, I, r0, r1);
                for (int t = 0; t < J->n; t++)
                    for (int64_t i = t * I + r0; i < t * I + r1; i++) g[i] = cpu_silu(g[i]) * u[i];
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n2; it++) {
                int64_t r0, r1;
                const int j = item_of(first2, n_jobs, it, jobs, true, &r0, &r1);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t C = J->w.n_embd;
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
