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

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "engine/cpu/cpu.h"

static const char *const kernel_names[] = {[GW_KERNELS_REF] = "ref", [GW_KERNELS_FAST] = "fast",
                                           [GW_KERNELS_INT8] = "int8"};

int gw_kernels_parse(const char *name, enum gw_kernels *k)
{
    for (int i = 0; name && i < (int)(sizeof kernel_names / sizeof *kernel_names); i++)
        if (strcmp(name, kernel_names[i]) == 0) return *k = (enum gw_kernels)i, 0;
    return NB_EINVAL;
}

int gw_kernels_parse_matrix(const char *name, enum gw_kernels *k)
{
    enum gw_kernels got;
    if (gw_kernels_parse(name, &got) || got == GW_KERNELS_INT8) return NB_EINVAL;
    return *k = got, 0;
}

const char *gw_kernels_name(enum gw_kernels k)
{
    return (unsigned)k < sizeof kernel_names / sizeof *kernel_names ? kernel_names[k] : "?";
}

#define EXPERT_ROWS 32 /* weight rows per work item of gw_expert_ffn_many */

/* A matrix's int8 dots (GW_KERNELS_INT8): the format's vec_dot against its
 * activations quantized to its vec_dot_type (Q8_0, Q8_1 or Q8_K: 8-bit codes
 * with a scale per 32 or 256 values), `row` bytes per quantized activation
 * row.  dot NULL where the format dots with fp32 (the float formats): that
 * matrix takes the fast fp32 rows, which lose nothing to quantize. */
struct q8_side {
    quant_vec_dot_fn dot;
    const struct quant_traits *act;
    size_t row;
};

/* A job's three matrices, as cpu_mats, and their int8 sides (all dot NULL
 * unless int8). */
struct job_mats {
    struct cpu_mat g, u, d;
    struct q8_side qg, qu, qd;
};

static struct q8_side q8_side_of(const struct quant_traits *w, int64_t n_in)
{
    const struct quant_traits *a = quant_traits_of(w->vec_dot_type);
    if (!w->vec_dot || !a || !a->is_quantized || !a->from_float) return (struct q8_side){0};
    return (struct q8_side){w->vec_dot, a, quant_row_size(a->type, n_in)};
}

static int job_mats_of(const struct gw_expert *w, bool int8, struct job_mats *m)
{
    const struct quant_traits *tg = quant_traits_of(w->gate_type), *tu = quant_traits_of(w->up_type),
                              *td = quant_traits_of(w->down_type);
    if (!tg || !tu || !td || !tg->to_float || !tu->to_float || !td->to_float) return NB_ENOTSUP;
    m->g = (struct cpu_mat){w->gate, tg, w->n_embd, w->n_ff, quant_row_size(w->gate_type, w->n_embd)};
    m->u = (struct cpu_mat){w->up, tu, w->n_embd, w->n_ff, quant_row_size(w->up_type, w->n_embd)};
    m->d = (struct cpu_mat){w->down, td, w->n_ff, w->n_embd, quant_row_size(w->down_type, w->n_ff)};
    m->qg = m->qu = m->qd = (struct q8_side){0};
    if (int8) m->qg = q8_side_of(tg, w->n_embd), m->qu = q8_side_of(tu, w->n_embd), m->qd = q8_side_of(td, w->n_ff);
    return 0;
}

/* Bytes of a job's quantized activations: n rows for gate, for up (none when
 * up shares gate's format: it reads gate's) and for down's input h. */
static size_t q8_bytes(const struct job_mats *m, int n)
{
    size_t up = m->qu.dot && m->qu.act != m->qg.act ? m->qu.row : 0;
    return (size_t)n * (m->qg.row + up + m->qd.row);
}

/* Rows [j0, j1) of y = W x for T activation rows quantized to q's format
 * (xq: T rows of q->row bytes): one vec_dot per weight row and token. */
static void rows_q8(const struct cpu_mat *w, const struct q8_side *q, const uint8_t *xq, int T, float *y,
                    int64_t y_stride, int64_t j0, int64_t j1)
{
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *row = w->data + (size_t)j * w->row_bytes;
        for (int t = 0; t < T; t++) q->dot(w->n_in, &y[(int64_t)t * y_stride + j], row, xq + (size_t)t * q->row);
    }
}

typedef void (*rows_fn)(const struct cpu_mat *, const float *, int64_t, int, float *, int64_t, int64_t, int64_t);

/* Rows [j0, j1) of one matrix: int8 where its side has a dot, else `rows` on the fp32 x. */
static void mat_rows(const struct cpu_mat *w, const struct q8_side *q, const uint8_t *xq, rows_fn rows,
                     const float *x, int T, float *y, int64_t y_stride, int64_t j0, int64_t j1)
{
    if (q->dot) rows_q8(w, q, xq, T, y, y_stride, j0, j1);
    else rows(w, x, w->n_in, T, y, y_stride, j0, j1);
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
 * so a worker's steady state allocates nothing.
 *
 * int8 adds a phase 0 (each job's x rows quantized, one (job, token) an
 * item) and quantizes h: inside the phase-1 item that made those rows where
 * down's activation blocks (32 values) tile an item, else in a phase 1b over
 * (job, token) — one more barrier each. */
int gw_expert_ffn_many(const struct gw_expert_job *jobs, int n_jobs, enum gw_kernels k, struct gw_expert_scratch *s)
{
    if (n_jobs <= 0) return 0;
    struct gw_expert_scratch own = {0};
    if (!s) s = &own;
    const bool int8 = k == GW_KERNELS_INT8;
    const size_t n_tab = (size_t)n_jobs + 1; /* entries of first0, first1, first2, hoff, qoff */
    size_t h_floats = 0;
    for (int j = 0; j < n_jobs; j++) h_floats += 2 * (size_t)jobs[j].n * (size_t)jobs[j].w.n_ff;
    const size_t at_first = align64((size_t)n_jobs * sizeof(struct job_mats));
    const size_t at_hoff = at_first + align64(3 * n_tab * sizeof(int64_t));
    const size_t at_h = at_hoff + align64(2 * n_tab * sizeof(size_t));
    const size_t at_q = at_h + align64(h_floats * sizeof(float));
    int rc = 0;
    size_t q_bytes = 0; /* the quantized rows' size depends on the matrices: a first look at them */
    for (int j = 0; int8 && rc == 0 && j < n_jobs; j++) {
        struct job_mats t;
        rc = job_mats_of(&jobs[j].w, int8, &t);
        q_bytes += rc ? 0 : q8_bytes(&t, jobs[j].n);
    }
    const size_t bytes = at_q + q_bytes;
    if (rc == 0 && bytes > s->bytes) {
        free(s->buf);
        s->bytes = (s->buf = malloc(bytes)) ? bytes : 0;
    }
    if (rc == 0 && !s->buf) rc = NB_ENOMEM;
    uint8_t *base = s->buf;
    struct job_mats *m = (struct job_mats *)base;
    int64_t *first0 = (int64_t *)(base + at_first), *first1 = first0 + n_tab, *first2 = first1 + n_tab;
    size_t *hoff = (size_t *)(base + at_hoff), *qoff = hoff + n_tab;
    float *h = (float *)(base + at_h);
    uint8_t *q = base + at_q;
    int64_t work = 0;
    bool h_pass = false; /* down's h quantized in a pass of its own (phase 1b) */
    for (int j = 0; rc == 0 && j < n_jobs; j++) {
        const struct gw_expert *w = &jobs[j].w;
        rc = job_mats_of(w, int8, &m[j]);
        first0[j] = j ? first0[j - 1] + jobs[j - 1].n : 0;
        first1[j] = j ? first1[j - 1] + chunks(jobs[j - 1].w.n_ff) : 0;
        first2[j] = j ? first2[j - 1] + chunks(jobs[j - 1].w.n_embd) : 0;
        hoff[j] = j ? hoff[j - 1] + 2 * (size_t)jobs[j - 1].n * (size_t)jobs[j - 1].w.n_ff : 0;
        qoff[j] = j ? qoff[j - 1] + q8_bytes(&m[j - 1], jobs[j - 1].n) : 0;
        work += 3 * (int64_t)jobs[j].n * w->n_embd * w->n_ff;
        if (rc == 0 && m[j].qd.dot && EXPERT_ROWS % m[j].qd.act->blck_size) h_pass = true;
    }
    if (rc == 0) {
        first0[n_jobs] = first0[n_jobs - 1] + jobs[n_jobs - 1].n;
        first1[n_jobs] = first1[n_jobs - 1] + chunks(jobs[n_jobs - 1].w.n_ff);
        first2[n_jobs] = first2[n_jobs - 1] + chunks(jobs[n_jobs - 1].w.n_embd);
        hoff[n_jobs] = h_floats;
        rows_fn rows = k == GW_KERNELS_REF ? cpu_matmul_rows : cpu_matmul_rows_f32;
        const int64_t n0 = int8 && q_bytes ? first0[n_jobs] : 0, n1 = first1[n_jobs], n2 = first2[n_jobs];
        /* Job j's quantized rows: gate's, up's (gate's when they share a format), h's. */
#define XG(j) (q + qoff[j])
#define XU(j) (m[j].qu.act == m[j].qg.act ? XG(j) : XG(j) + (size_t)jobs[j].n * m[j].qg.row)
#define HQ(j) (XG(j) + (size_t)jobs[j].n * (m[j].qg.row + (m[j].qu.act == m[j].qg.act ? 0 : m[j].qu.row)))
#pragma omp parallel if (work >= CPU_PAR_MIN_WORK)
        {
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n0; it++) {
                int j = job_of(first0, n_jobs, it);
                const int t = (int)(it - first0[j]);
                const int64_t C = jobs[j].w.n_embd;
                const float *x = jobs[j].x + (int64_t)t * C;
                if (m[j].qg.dot) m[j].qg.act->from_float(x, XG(j) + (size_t)t * m[j].qg.row, C);
                if (m[j].qu.dot && m[j].qu.act != m[j].qg.act)
                    m[j].qu.act->from_float(x, XU(j) + (size_t)t * m[j].qu.row, C);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n1; it++) {
                int64_t r0, r1;
                const int j = item_of(first1, n_jobs, it, jobs, false, &r0, &r1);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t I = J->w.n_ff;
                float *g = h + hoff[j], *u = g + (size_t)J->n * (size_t)I;
                mat_rows(&m[j].g, &m[j].qg, XG(j), rows, J->x, J->n, g, I, r0, r1);
                mat_rows(&m[j].u, &m[j].qu, XU(j), rows, J->x, J->n, u, I, r0, r1);
                for (int t = 0; t < J->n; t++)
                    for (int64_t i = t * I + r0; i < t * I + r1; i++) g[i] = cpu_silu(g[i]) * u[i];
                const struct q8_side *qd = &m[j].qd;
                if (qd->dot && EXPERT_ROWS % qd->act->blck_size == 0)
                    for (int t = 0; t < J->n; t++)
                        qd->act->from_float(g + t * I + r0,
                                            HQ(j) + (size_t)t * qd->row + (size_t)(r0 / qd->act->blck_size) * qd->act->type_size,
                                            r1 - r0);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < (h_pass ? n0 : 0); it++) {
                int j = job_of(first0, n_jobs, it);
                const int t = (int)(it - first0[j]);
                const struct q8_side *qd = &m[j].qd;
                const int64_t I = jobs[j].w.n_ff;
                if (qd->dot && EXPERT_ROWS % qd->act->blck_size)
                    qd->act->from_float(h + hoff[j] + (size_t)t * (size_t)I, HQ(j) + (size_t)t * qd->row, I);
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t it = 0; it < n2; it++) {
                int64_t r0, r1;
                const int j = item_of(first2, n_jobs, it, jobs, true, &r0, &r1);
                const struct gw_expert_job *J = &jobs[j];
                const int64_t C = J->w.n_embd;
                mat_rows(&m[j].d, &m[j].qd, HQ(j), rows, h + hoff[j], J->n, J->out, C, r0, r1);
                /* out = 0 + scale · d: ffn_add's sum into a zeroed row, bit for bit (-0 becomes +0). */
                for (int t = 0; t < J->n; t++)
                    for (int64_t c = r0; c < r1; c++) J->out[t * C + c] = 0.0f + J->scale[t] * J->out[t * C + c];
            }
        }
#undef XG
#undef XU
#undef HQ
    }
    gw_expert_scratch_free(&own);
    return rc;
}

int gw_expert_ffn(const struct gw_expert *w, const float *x, int n, const float *scale, float *out)
{
    struct gw_expert_job job = {*w, x, n, scale, out};
    return gw_expert_ffn_many(&job, 1, GW_KERNELS_REF, NULL);
}
