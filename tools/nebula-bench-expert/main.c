/* nebula-bench-expert — speed of the CPU expert FFN (gw_expert_ffn), the
 * cpu-moe-worker's whole job, per schedule and kernel set.
 *
 *   nebula-bench-expert [--embd C] [--ff I] [--experts N,N,...] [--tokens T] [--pool P] [--seconds S]
 *                       [--threads N] [--mix G,U,D] [--latency [--gap-us G,G,...] [--busy B] [--kernels ref|fast|int8]]
 *
 * Two tables.  The first is one expert per call, for each weight format
 * (gate, up and down all of that format; down q8_0 where its rows of I values
 * do not fit the format's blocks), on every thread: how fast each format's
 * rows stream.  The second is the question of issue 5: one decode
 * request of N routed experts in the q4_k_m mix (gate/up Q4_K, down Q5_1
 * and Q8_0, as nebula-gen writes them), one token each, under four
 * schedules (--mix G,U,D: that mix of gate, up and down formats instead,
 * e.g. iq2_xxs,iq2_xxs,iq2_xs for the published IQ2 files' experts) —
 *   experts   one expert per OpenMP thread, each a reference gw_expert_ffn
 *             (the cpu-moe-worker before issue 5: its nested row loops
 *             ran serially inside the per-expert loop);
 *   rows-ref  gw_expert_ffn_many with the ref kernels (every expert's rows
 *             split over the threads; bit-identical to `experts`);
 *   rows-fast gw_expert_ffn_many with the fast kernels (SIMD decode, fp32 FMA);
 *   rows-int8 gw_expert_ffn_many with the opt-in int8 kernels (activations
 *             quantized to 8 bits once, VNNI dots on the codes: approximate).
 * Experts are taken round-robin from a pool of P distinct experts (default
 * 64, ~190 MiB in the mix) so the weights stream from RAM, not the caches, as
 * in a real decode.  The four schedules take turns request by request
 * (same machine state for each).  Reported: ms per call, the fastest (what
 * the code does when no other process takes its cores: on a shared machine a
 * thread descheduled at a barrier costs a whole time slice) and the median;
 * GB/s of weight bytes read at the fastest; and the largest difference of
 * fast and of int8 from ref relative to the largest |output| (the check that
 * the bench computes the same thing; int8's is the activations' rounding).  The rows schedules keep one gw_expert_scratch
 * across calls, as the cpu-moe-worker does.  Only DISTINCT_ROWS rows of a
 * matrix and DISTINCT_EXPERTS experts of a pool are quantized, the rest are
 * copies (own memory, so still streamed from RAM): the grid formats'
 * quantizers take seconds per matrix, and no kernel's speed depends on the
 * values.
 *
 * --latency replaces both tables with the question the pipeline asks: how
 * long one request takes when requests come with a gap between them — a
 * decode token sends one request per layer, with 50 µs–1 ms of GPU work in
 * between.  During the gap (the calling thread spins it, as the worker's ring
 * wait does while requests flow) the OpenMP team waits however
 * OMP_WAIT_POLICY / GOMP_SPINCOUNT in the environment make it wait: passive
 * threads sleep and each request starts with futex wake-ups, spinning ones
 * are still on their cores.  --busy B starts B threads that spin for the
 * whole run, the gpu-worker's host threads waiting for the experts (the
 * CUDA backend's mailbox thread spins; its main thread yields): with
 * --threads + B over the cores, OpenMP threads share cores with spinners.
 * Reported per (experts, gap): requests, p50 / p90 / p99 / max ms per
 * request, and GB/s of weights at the p50.
 * Exit status: 0 ok, 1 out of memory or a kernel error, 2 bad usage. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/quant/quant.h"
#include "engine/ffn.h"
#include "core/util/clock.h"

static const char usage[] =
    "usage: nebula-bench-expert [--embd C] [--ff I] [--experts N,N,...] [--tokens T] [--pool P] [--seconds S]\n"
    "                           [--threads N] [--mix G,U,D] [--latency [--gap-us G,G,...] [--busy B] [--kernels ref|fast|int8]]\n"
    "\n"
    "  --embd C      hidden width (default 2560)\n"
    "  --ff I        expert FFN width (default 640)\n"
    "  --experts L   experts per request for the mix table, comma-separated (default 1,10,20)\n"
    "  --tokens T    rows per expert (default 1: a decode token)\n"
    "  --pool P      distinct experts the calls cycle through (default 64)\n"
    "  --seconds S   time per schedule and row of the table (default 1)\n"
    "  --threads N   OpenMP threads (default: OMP_NUM_THREADS, else every core)\n"
    "  --mix G,U,D   the gate, up and down formats of the mix table and --latency (ggml names, e.g.\n"
    "                iq2_xxs,iq2_xxs,iq2_xs; default: q4_K,q4_K,q5_1 and q4_K,q4_K,q8_0)\n"
    "  --latency     instead of the two tables: ms per request of the mix (default q4_K,q4_K,q5_1) when\n"
    "                requests come with a gap between them; the OpenMP team waits in the gaps as\n"
    "                OMP_WAIT_POLICY / GOMP_SPINCOUNT say (compare passive with active or unset)\n"
    "  --gap-us L    --latency: gaps between requests, comma-separated µs (default 0,200,1000)\n"
    "  --busy B      --latency: B more threads spin all the time (the gpu-worker's host threads; default 0)\n"
    "  --kernels K   --latency: ref, fast or int8 (default fast)\n"
    "  --help        this text\n"
    "\n"
    "exit status: 0 ok, 1 out of memory or a kernel error, 2 bad usage\n";

struct options {
    int64_t C, I;
    int experts[8], n_experts;
    int tokens, pool;
    double seconds;
    int threads;
    bool latency;
    int gaps_us[8], n_gaps;
    int busy;
    enum gw_kernels kernels;
    enum quant_type mix[3]; /* gate, up, down */
    bool have_mix;          /* --mix given */
};

/* "N,N,..." → at most 8 integers ≥ lo; -1 on anything else. */
static int parse_list(const char *v, int lo, int *out)
{
    int n = 0;
    char *end = NULL;
    for (const char *p = v; *p; p = end + (*end == ',')) {
        if (n == 8) return -1;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > 1000000 || (*end && *end != ',')) return -1;
        out[n++] = (int)x;
    }
    return n ? n : -1;
}

/* "G,U,D" → three formats that have a quantizer; -1 on anything else. */
static int parse_mix(const char *v, enum quant_type mix[3])
{
    char buf[64];
    if (strlen(v) >= sizeof buf) return -1;
    strcpy(buf, v);
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    for (int k = 0; k < 3; k++, tok = strtok_r(NULL, ",", &save)) {
        int t = tok ? quant_type_from_name(tok) : -1;
        if (t < 0 || !quant_traits_of((enum quant_type)t)->from_float) return -1;
        mix[k] = (enum quant_type)t;
    }
    return tok ? -1 : 0;
}

static int bad_usage(const char *why)
{
    fprintf(stderr, "nebula-bench-expert: %s\n%s", why, usage);
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){2560, 640, {1, 10, 20}, 3, 1, 64, 1.0, 0, false, {0, 200, 1000}, 3, 0, GW_KERNELS_FAST,
                          {QT_Q4_K, QT_Q4_K, QT_Q5_1}, false};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--help") == 0) return fputs(usage, stdout), 1;
        if (strcmp(a, "--latency") == 0) { /* the one flag without a value */
            o->latency = true, i--;
            continue;
        }
        if (!v) return bad_usage("an option without its value");
        if (strcmp(a, "--embd") == 0) o->C = strtoll(v, &end, 10);
        else if (strcmp(a, "--ff") == 0) o->I = strtoll(v, &end, 10);
        else if (strcmp(a, "--tokens") == 0) o->tokens = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--pool") == 0) o->pool = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--seconds") == 0) o->seconds = strtod(v, &end);
        else if (strcmp(a, "--threads") == 0) o->threads = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--busy") == 0) o->busy = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--kernels") == 0) {
            if (gw_kernels_parse(v, &o->kernels)) return bad_usage("--kernels: ref, fast or int8");
            continue;
        } else if (strcmp(a, "--experts") == 0) {
            if ((o->n_experts = parse_list(v, 1, o->experts)) < 0) return bad_usage("--experts: up to 8 positive integers");
            continue;
        } else if (strcmp(a, "--mix") == 0) {
            if (parse_mix(v, o->mix)) return bad_usage("--mix: three quantized formats gate,up,down (ggml names)");
            o->have_mix = true;
            continue;
        } else if (strcmp(a, "--gap-us") == 0) {
            if ((o->n_gaps = parse_list(v, 0, o->gaps_us)) < 0) return bad_usage("--gap-us: up to 8 integers ≥ 0");
            continue;
        } else return bad_usage("unknown option");
        if (!end || *end) return bad_usage("a value is not a number");
    }
    if (o->threads < 0 || o->threads > 4096 || o->busy < 0 || o->busy > 64) return bad_usage("a value out of range");
    if (o->C < 256 || o->C % 256 || o->I < 32 || o->I % 32)
        return bad_usage("--embd must be a positive multiple of 256, --ff of 32");
    if (o->tokens < 1 || o->tokens > 4096 || o->pool < 1 || o->seconds <= 0) return bad_usage("a value out of range");
    if (!quant_row_size(o->mix[0], o->C) || !quant_row_size(o->mix[1], o->C) || !quant_row_size(o->mix[2], o->I))
        return bad_usage("--mix: a format's blocks do not fit the rows (down's rows are --ff long)");
    return 0;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static float uniform(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

#define DISTINCT_ROWS 16   /* rows quantized per matrix, the rest copies */
#define DISTINCT_EXPERTS 4 /* experts quantized per pool, the rest copies */

/* rows × n random weights (scaled like a trained layer's, 1/sqrt(n)) in type t. */
static void *random_matrix(enum quant_type t, int64_t rows, int64_t n)
{
    const struct quant_traits *q = quant_traits_of(t);
    size_t rb = quant_row_size(t, n);
    uint8_t *m = malloc(rb * (size_t)rows);
    float *row = malloc((size_t)n * sizeof *row);
    if (m && row)
        for (int64_t r = 0; r < rows; r++) {
            if (r >= DISTINCT_ROWS) {
                memcpy(m + rb * (size_t)r, m + rb * (size_t)(r % DISTINCT_ROWS), rb);
                continue;
            }
            for (int64_t i = 0; i < n; i++) row[i] = uniform() / sqrtf((float)n);
            q->from_float(row, m + rb * (size_t)r, n);
        }
    free(row);
    return m;
}

static void *copy_of(const void *src, size_t bytes)
{
    void *m = malloc(bytes);
    if (m) memcpy(m, src, bytes);
    return m;
}

struct pool {
    struct gw_expert *e;
    int n;
    size_t expert_bytes;
};

static int pool_make(struct pool *p, int n, int64_t C, int64_t I, enum quant_type tg, enum quant_type tu,
                     enum quant_type td)
{
    p->e = calloc((size_t)n, sizeof *p->e), p->n = n;
    p->expert_bytes = quant_row_size(tg, C) * I + quant_row_size(tu, C) * I + quant_row_size(td, I) * C;
    for (int i = 0; p->e && i < n; i++) {
        if (i < DISTINCT_EXPERTS)
            p->e[i] = (struct gw_expert){random_matrix(tg, I, C), random_matrix(tu, I, C), random_matrix(td, C, I),
                                         tg, tu, td, C, I};
        else
            p->e[i] = (struct gw_expert){copy_of(p->e[i % DISTINCT_EXPERTS].gate, quant_row_size(tg, C) * I),
                                         copy_of(p->e[i % DISTINCT_EXPERTS].up, quant_row_size(tu, C) * I),
                                         copy_of(p->e[i % DISTINCT_EXPERTS].down, quant_row_size(td, I) * C),
                                         tg, tu, td, C, I};
        if (!p->e[i].gate || !p->e[i].up || !p->e[i].down) return 1;
    }
    return p->e ? 0 : 1;
}

static void pool_free(struct pool *p)
{
    for (int i = 0; p->e && i < p->n; i++) {
        free((void *)p->e[i].gate);
        free((void *)p->e[i].up);
        free((void *)p->e[i].down);
    }
    free(p->e);
}

enum sched { SCHED_EXPERTS, SCHED_ROWS_REF, SCHED_ROWS_FAST, SCHED_ROWS_INT8, N_SCHED };
static const char *const sched_name[] = {"experts", "rows-ref", "rows-fast", "rows-int8"};

/* One request: jobs[0..n) over the schedule. */
static struct gw_expert_scratch ffn_scratch; /* kept across requests, as in the cpu-moe-worker */

static int run(enum sched s, struct gw_expert_job *jobs, int n)
{
    if (s == SCHED_ROWS_REF) return gw_expert_ffn_many(jobs, n, GW_KERNELS_REF, &ffn_scratch);
    if (s == SCHED_ROWS_FAST) return gw_expert_ffn_many(jobs, n, GW_KERNELS_FAST, &ffn_scratch);
    if (s == SCHED_ROWS_INT8) return gw_expert_ffn_many(jobs, n, GW_KERNELS_INT8, &ffn_scratch);
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : bad)
    for (int j = 0; j < n; j++) bad |= gw_expert_ffn(&jobs[j].w, jobs[j].x, jobs[j].n, jobs[j].scale, jobs[j].out) != 0;
    return bad;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fastest and median seconds per request of n experts from the pool
 * (cycled) for each schedule, the schedules taking turns request by request so that all four
 * see the same machine (this one is shared: a load that comes and goes would
 * otherwise land in one cell).  sec[s] < 0 on error. */
static void time_cells(const struct pool *p, int n, int T, const float *x, const float *scale, float *out,
                       double seconds, double sec[N_SCHED], double med[N_SCHED])
{
    enum { MAX_SAMPLES = 2048 };
    struct gw_expert_job jobs[64];
    static double samples[N_SCHED][MAX_SAMPLES];
    int ns = 0, next = 0;
    int64_t C = p->e[0].n_embd;
    for (double t_end = nb_now_s() + 3 * seconds; ns < MAX_SAMPLES && (ns < 3 || nb_now_s() < t_end); ns++)
        for (int s = 0; s < N_SCHED; s++) {
            for (int j = 0; j < n; j++, next = (next + 1) % p->n)
                jobs[j] = (struct gw_expert_job){p->e[next], x, T, scale, out + (size_t)j * (size_t)T * (size_t)C};
            double t0 = nb_now_s();
            if (run((enum sched)s, jobs, n)) {
                for (int c = 0; c < N_SCHED; c++) sec[c] = med[c] = -1;
                return;
            }
            samples[s][ns] = nb_now_s() - t0;
        }
    for (int s = 0; s < N_SCHED; s++) {
        qsort(samples[s], (size_t)ns, sizeof **samples, cmp_double);
        sec[s] = samples[s][0], med[s] = samples[s][ns / 2];
    }
}

/* max |k - ref| / max |ref| over one request of n experts. */
static double vs_ref(enum gw_kernels k, const struct pool *p, int n, int T, const float *x, const float *scale, float *a,
                     float *b)
{
    struct gw_expert_job jr[64], jf[64];
    int64_t C = p->e[0].n_embd;
    for (int j = 0; j < n; j++) {
        jr[j] = (struct gw_expert_job){p->e[j % p->n], x, T, scale, a + (size_t)j * (size_t)T * (size_t)C};
        jf[j] = jr[j], jf[j].out = b + (size_t)j * (size_t)T * (size_t)C;
    }
    if (gw_expert_ffn_many(jr, n, GW_KERNELS_REF, &ffn_scratch) || gw_expert_ffn_many(jf, n, k, &ffn_scratch))
        return -1;
    double mx = 0, md = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)T * (size_t)C; i++) {
        mx = fmax(mx, fabs(a[i]));
        md = fmax(md, fabs((double)a[i] - b[i]));
    }
    return mx > 0 ? md / mx : md;
}

/* worst[0], worst[1] = the largest of themselves and fast's, int8's vs_ref; nonzero on a kernel error. */
static int worst_of(const struct pool *p, int n, int T, const float *x, const float *scale, float *a, float *b,
                    double worst[2])
{
    for (int i = 0; i < 2; i++) {
        double d = vs_ref(i ? GW_KERNELS_INT8 : GW_KERNELS_FAST, p, n, T, x, scale, a, b);
        if (d < 0) return 1;
        worst[i] = d > worst[i] ? d : worst[i];
    }
    return 0;
}

static void row(const char *what, int n, enum sched s, double sec, double med, size_t bytes)
{
    printf("| %s | %d | %s | %.3f | %.3f | %.2f |\n", what, n, sched_name[s], sec * 1e3, med * 1e3,
           (double)bytes / sec / 1e9);
}

/* ---- --latency ---- */

static atomic_bool busy_stop;

static void *busy_spin(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&busy_stop, memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    return NULL;
}

static void spin_until(double t)
{
    while (nb_now_s() < t) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* Seconds per request of n experts (cycled from the pool), gap_us between
 * one request's end and the next one's start, for `seconds` after 5 unmeasured
 * requests: sorted into samples[0..*ns).  Nonzero on a kernel error. */
static int time_gapped(const struct pool *p, int n, int T, const float *x, const float *scale, float *out,
                       enum gw_kernels k, int gap_us, double seconds, double *samples, int max_samples, int *ns)
{
    struct gw_expert_job jobs[64];
    int64_t C = p->e[0].n_embd;
    int next = 0;
    *ns = 0;
    double t_end = 0;
    for (int i = -5; i < 0 || (*ns < max_samples && (*ns < 5 || nb_now_s() < t_end)); i++) {
        for (int j = 0; j < n; j++, next = (next + 1) % p->n)
            jobs[j] = (struct gw_expert_job){p->e[next], x, T, scale, out + (size_t)j * (size_t)T * (size_t)C};
        spin_until(nb_now_s() + gap_us * 1e-6);
        double t0 = nb_now_s();
        if (gw_expert_ffn_many(jobs, n, k, &ffn_scratch)) return 1;
        double dt = nb_now_s() - t0;
        if (i == -1) t_end = nb_now_s() + seconds;
        if (i >= 0) samples[(*ns)++] = dt;
    }
    qsort(samples, (size_t)*ns, sizeof *samples, cmp_double);
    return 0;
}

static int latency_table(const struct options *o, const float *x, const float *scale, float *out)
{
    enum { MAX_SAMPLES = 200000 };
    double *samples = malloc(MAX_SAMPLES * sizeof *samples);
    pthread_t busy[64];
    struct pool p;
    if (!samples || pool_make(&p, o->pool, o->C, o->I, o->mix[0], o->mix[1], o->mix[2]))
        return fputs("nebula-bench-expert: out of memory\n", stderr), 1;
    const char *policy = getenv("OMP_WAIT_POLICY"), *spins = getenv("GOMP_SPINCOUNT");
    printf("CPU expert FFN latency, gate %s up %s down %s, C %ld, I %ld, %d token(s) per expert, %s kernels, %d threads, "
           "%d busy thread(s), OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s, %d cores, ISA %s\n\n",
           quant_type_name(o->mix[0]), quant_type_name(o->mix[1]), quant_type_name(o->mix[2]), (long)o->C, (long)o->I, o->tokens, gw_kernels_name(o->kernels), omp_get_max_threads(), o->busy,
           policy ? policy : "(unset)", spins ? spins : "(unset)", omp_get_num_procs(),
           quant_isa_name(quant_isa_active()));
    printf("| experts/request | gap µs | requests | p50 ms | p90 ms | p99 ms | max ms | GB/s of weights (p50) |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    atomic_store(&busy_stop, false);
    int started = 0, rc = 0;
    while (started < o->busy && pthread_create(&busy[started], NULL, busy_spin, NULL) == 0) started++;
    if (started < o->busy) rc = 1, fputs("nebula-bench-expert: cannot start the busy threads\n", stderr);
    for (int i = 0; !rc && i < o->n_experts; i++)
        for (int g = 0; !rc && g < o->n_gaps; g++) {
            int ns;
            if (time_gapped(&p, o->experts[i], o->tokens, x, scale, out, o->kernels, o->gaps_us[g], o->seconds,
                            samples, MAX_SAMPLES, &ns)) {
                rc = 1, fputs("nebula-bench-expert: kernel error\n", stderr);
                break;
            }
            double p50 = samples[ns / 2], p90 = samples[ns * 9 / 10], p99 = samples[ns * 99 / 100];
            printf("| %d | %d | %d | %.3f | %.3f | %.3f | %.3f | %.2f |\n", o->experts[i], o->gaps_us[g], ns, p50 * 1e3,
                   p90 * 1e3, p99 * 1e3, samples[ns - 1] * 1e3,
                   (double)p.expert_bytes * o->experts[i] / p50 / 1e9);
            fflush(stdout);
        }
    atomic_store(&busy_stop, true);
    for (int i = 0; i < started; i++) pthread_join(busy[i], NULL);
    pool_free(&p);
    free(samples);
    return rc;
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    int maxn = 1;
    for (int i = 0; i < o.n_experts; i++) maxn = o.experts[i] > maxn ? o.experts[i] : maxn;
    if (maxn > 64) return bad_usage("at most 64 experts per request");
    const int64_t C = o.C, T = o.tokens;
    float *x = malloc((size_t)(T * C) * sizeof *x), *scale = malloc((size_t)T * sizeof *scale);
    float *out = malloc((size_t)maxn * (size_t)(T * C) * sizeof *out);
    float *out2 = malloc((size_t)maxn * (size_t)(T * C) * sizeof *out2);
    if (!x || !scale || !out || !out2) return fputs("nebula-bench-expert: out of memory\n", stderr), 1;
    for (int64_t i = 0; i < T * C; i++) x[i] = uniform();
    for (int64_t t = 0; t < T; t++) scale[t] = 0.1f;
    if (o.threads > 0) omp_set_num_threads(o.threads);
    if (o.latency) {
        rc = latency_table(&o, x, scale, out);
        free(x), free(scale), free(out), free(out2);
        gw_expert_scratch_free(&ffn_scratch);
        return rc;
    }

    printf("CPU expert FFN, C %ld, I %ld, %d token(s) per expert, %d threads, ISA %s\n\n", (long)C, (long)o.I,
           o.tokens, omp_get_max_threads(), quant_isa_name(quant_isa_active()));
    printf("| weights | experts/request | schedule | ms/request (fastest) | ms/request (median) | GB/s of weights (fastest) |\n"
           "|---|---:|---|---:|---:|---:|\n");
    static const enum quant_type types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q5_1,  QT_Q8_0,    QT_IQ4_NL, QT_BF16,
                                            QT_F32,  QT_Q3_K, QT_Q2_K, QT_IQ2_XS, QT_IQ2_XXS};
    int pool_one = o.pool < 8 ? o.pool : 8; /* 8 × an f32 expert is already 150 MiB */
    double worst[2] = {0, 0}; /* fast, int8 */
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        /* down's rows are I long: a K-quant down needs I % 256 == 0, else down is q8_0 */
        enum quant_type down = quant_row_size(types[k], o.I) ? types[k] : QT_Q8_0;
        char name[64];
        snprintf(name, sizeof name, down == types[k] ? "%s" : "%s (down q8_0)", quant_type_name(types[k]));
        struct pool p;
        if (pool_make(&p, pool_one, C, o.I, types[k], types[k], down))
            return fputs("nebula-bench-expert: out of memory\n", stderr), 1;
        double sec[N_SCHED], med[N_SCHED];
        time_cells(&p, 1, o.tokens, x, scale, out, o.seconds, sec, med);
        if (sec[0] < 0) return fputs("nebula-bench-expert: kernel error\n", stderr), 1;
        for (int s = 0; s < N_SCHED; s++) row(name, 1, (enum sched)s, sec[s], med[s], p.expert_bytes);
        if (worst_of(&p, 1, o.tokens, x, scale, out, out2, worst)) return fputs("nebula-bench-expert: kernel error\n", stderr), 1;
        pool_free(&p);
    }
    struct { char name[64]; enum quant_type t[3]; } mixes[2] = {{"q4_k_m (down q5_1)", {QT_Q4_K, QT_Q4_K, QT_Q5_1}},
                                                                {"q4_k_m (down q8_0)", {QT_Q4_K, QT_Q4_K, QT_Q8_0}}};
    size_t n_mixes = 2;
    if (o.have_mix) {
        n_mixes = 1;
        memcpy(mixes[0].t, o.mix, sizeof o.mix);
        snprintf(mixes[0].name, sizeof mixes[0].name, "%s/%s/%s", quant_type_name(o.mix[0]), quant_type_name(o.mix[1]),
                 quant_type_name(o.mix[2]));
    }
    for (size_t k = 0; k < n_mixes; k++) {
        struct pool p;
        if (pool_make(&p, o.pool, C, o.I, mixes[k].t[0], mixes[k].t[1], mixes[k].t[2]))
            return fputs("nebula-bench-expert: out of memory\n", stderr), 1;
        for (int i = 0; i < o.n_experts; i++) {
            double sec[N_SCHED], med[N_SCHED];
            time_cells(&p, o.experts[i], o.tokens, x, scale, out, o.seconds, sec, med);
            if (sec[0] < 0) return fputs("nebula-bench-expert: kernel error\n", stderr), 1;
            for (int s = 0; s < N_SCHED; s++)
                row(mixes[k].name, o.experts[i], (enum sched)s, sec[s], med[s], p.expert_bytes * (size_t)o.experts[i]);
        }
        if (worst_of(&p, maxn, o.tokens, x, scale, out, out2, worst)) return fputs("nebula-bench-expert: kernel error\n", stderr), 1;
        pool_free(&p);
    }
    printf("\nlargest |fast - ref| / max |ref| over the checked requests: %.2e; |int8 - ref| / max |ref|: %.2e\n",
           worst[0], worst[1]);
    free(x);
    free(scale);
    free(out);
    free(out2);
    gw_expert_scratch_free(&ffn_scratch);
    return 0;
}
