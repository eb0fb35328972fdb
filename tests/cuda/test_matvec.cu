/* test_matvec.cu — checks and times gpu-worker/cuda/matvec.cu on a real GPU.
 *
 * Correctness: for each format, random fp32 weights are quantized with the
 * CPU encoder (core/quant), the reference is the CPU decode of those same
 * bytes (quant_traits_of(t)->to_float) dotted with x in double, and the GPU
 * result must be within ||y - ref|| / ||ref|| < 1e-5.  Outputs are poisoned
 * (all bits set: NaN) before every launch, so an unwritten element fails, and
 * a guard region past y must stay poisoned; each case runs twice and must be
 * bit-identical (a moving result is a race).  Inputs are fresh per case.
 * Timing: a 327680x2560 "all experts of a layer" matrix and a 248320x2560
 * "output head" matrix, filled by tiling 512 distinct encoded rows (so the
 * full-size result is checked against the same reference too), median of 20
 * event-timed launches, reported as GB/s of weight bytes beside a measured
 * device-to-device copy.  Exit status 0 only if every check passed. */
#include "gpu-worker/cuda/cuda_kernels.h"

extern "C" {
#include "core/quant/quant.h"
}

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5
#define GUARD_FLOATS 64

static int g_failures = 0;

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* The formats under test: every type with a kernel (gpu-worker/cuda/cuda_types.h), in type order. */
static enum quant_type k_types[QT_COUNT];
static int N_TYPES;

static void list_types(void)
{
    for (int t = 0; t < QT_COUNT; t++)
        if (gw_cuda_matvec_of(t)) k_types[N_TYPES++] = (enum quant_type)t;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double rnd_uniform(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1p-53;
}

/* Roughly Gaussian (sum of four uniforms), scaled: weights and activations
 * of a model look like this, and no value is zero by construction. */
static void fill_random(float *v, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(scale * (rnd_uniform() + rnd_uniform() + rnd_uniform() + rnd_uniform() - 2.0));
}

/* The quantized matrix (n_rows x n_cols), its CPU decode, both host-side. */
struct host_matrix {
    void *bytes;
    float *decoded;
    size_t n_bytes;
};

static struct host_matrix make_matrix(enum quant_type t, int n_rows, int n_cols)
{
    const struct quant_traits *tr = quant_traits_of(t);
    size_t n = (size_t)n_rows * n_cols;
    struct host_matrix m;
    float *src = (float *)malloc(n * sizeof(float));
    m.n_bytes = quant_row_size(t, n_cols) * n_rows;
    m.bytes = malloc(m.n_bytes);
    m.decoded = (float *)malloc(n * sizeof(float));
    if (!src || !m.bytes || !m.decoded) { fprintf(stderr, "out of host memory\n"); exit(2); }
    fill_random(src, n, 0.05);
    tr->from_float(src, m.bytes, (int64_t)n); /* rows are whole blocks: one call encodes them all */
    tr->to_float(m.bytes, m.decoded, (int64_t)n);
    free(src);
    return m;
}

static void free_matrix(struct host_matrix *m)
{
    free(m->bytes);
    free(m->decoded);
}

/* ref[b*n_rows + r] = Σ decoded[r][c] * x[b][c], in double. */
static void reference(const float *decoded, int n_rows, int n_cols, const float *x, int nb, double *ref)
{
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < n_rows; r++) {
            double s = 0;
            const float *w = decoded + (size_t)r * n_cols, *xb = x + (size_t)b * n_cols;
            for (int c = 0; c < n_cols; c++) s += (double)w[c] * (double)xb[c];
            ref[(size_t)b * n_rows + r] = s;
        }
}

/* ||y - ref|| / ||ref|| where y row r is compared with ref row r % ref_rows;
 * returns INFINITY if any element is not finite (unwritten: poison is NaN). */
static double rel_error(const float *y, int n_rows, int nb, const double *ref, int ref_rows)
{
    double num = 0, den = 0;
    for (int b = 0; b < nb; b++)
        for (int r = 0; r < n_rows; r++) {
            float v = y[(size_t)b * n_rows + r];
            double want = ref[(size_t)b * ref_rows + r % ref_rows];
            if (!isfinite(v)) return INFINITY;
            num += (v - want) * (v - want);
            den += want * want;
        }
    return sqrt(num / den);
}

static int guard_intact(const float *guard)
{
    for (int i = 0; i < GUARD_FLOATS; i++) {
        uint32_t u;
        memcpy(&u, &guard[i], 4);
        if (u != 0xffffffffu) return 0;
    }
    return 1;
}

/* Poison y (and its guard), launch, wait, copy back. */
static int run_once(gw_cuda_matvec_fn fn, const void *dw, int n_rows, int n_cols, const float *dx, int nb,
                    float *dy, float *hy, char *err)
{
    size_t ny = (size_t)nb * n_rows;
    CK(cudaMemset(dy, 0xff, (ny + GUARD_FLOATS) * sizeof(float)));
    int rc = fn(dw, n_rows, n_cols, dx, nb, dy, NULL, err, 256);
    if (rc) return rc;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hy, dy, (ny + GUARD_FLOATS) * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

static void check_case(enum quant_type t, int n_rows, int n_cols, int nb)
{
    const char *name = quant_type_name(t);
    gw_cuda_matvec_fn fn = gw_cuda_matvec_of(t);
    struct host_matrix m = make_matrix(t, n_rows, n_cols);
    size_t nx = (size_t)nb * n_cols, ny = (size_t)nb * n_rows;
    float *x = (float *)malloc(nx * sizeof(float));
    float *y1 = (float *)malloc((ny + GUARD_FLOATS) * sizeof(float));
    float *y2 = (float *)malloc((ny + GUARD_FLOATS) * sizeof(float));
    double *ref = (double *)malloc(ny * sizeof(double));
    if (!x || !y1 || !y2 || !ref) { fprintf(stderr, "out of host memory\n"); exit(2); }
    fill_random(x, nx, 1.0);
    reference(m.decoded, n_rows, n_cols, x, nb, ref);

    void *dw;
    float *dx, *dy;
    CK(cudaMalloc(&dw, m.n_bytes));
    CK(cudaMalloc((void **)&dx, nx * sizeof(float)));
    CK(cudaMalloc((void **)&dy, (ny + GUARD_FLOATS) * sizeof(float)));
    CK(cudaMemcpy(dw, m.bytes, m.n_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, nx * sizeof(float), cudaMemcpyHostToDevice));

    char err[256] = "";
    int rc1 = fn ? run_once(fn, dw, n_rows, n_cols, dx, nb, dy, y1, err) : -1;
    int rc2 = rc1 ? rc1 : run_once(fn, dw, n_rows, n_cols, dx, nb, dy, y2, err);
    double e = rc1 ? INFINITY : rel_error(y1, n_rows, nb, ref, n_rows);
    int same = !rc2 && memcmp(y1, y2, ny * sizeof(float)) == 0;
    int guard = !rc1 && guard_intact(y1 + ny);
    int ok = !rc1 && !rc2 && e < TOL && same && guard;
    if (!ok) g_failures++;
    printf("| %-6s | %6d | %5d | %2d | %9.2e | %-4s | %-5s | %s%s%s |\n", name, n_rows, n_cols, nb, e,
           same ? "yes" : "NO", guard ? "yes" : "NO", ok ? "pass" : "FAIL", rc1 || rc2 ? ": " : "",
           rc1 || rc2 ? err : "");
    CK(cudaFree(dw));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    free(x); free(y1); free(y2); free(ref);
    free_matrix(&m);
}

/* Bad arguments come back as GW_CUDA_EINVAL with a message, launching nothing. */
static void check_errors(void)
{
    char err[256] = "";
    float *dx, *dy;
    void *dw;
    CK(cudaMalloc((void **)&dx, 4096 * sizeof(float)));
    CK(cudaMalloc((void **)&dy, 4096 * sizeof(float)));
    CK(cudaMalloc(&dw, 4096));
    int bad_cols = gw_cuda_matvec_of(QT_Q4_K)(dw, 4, 100, dx, 1, dy, NULL, err, sizeof err);
    int ok1 = bad_cols == GW_CUDA_EINVAL && strstr(err, "matvec q4_K") != NULL;
    err[0] = 0;
    int bad_batch = gw_cuda_matvec_of(QT_F32)(dw, 4, 32, dx, GW_CUDA_MAX_BATCH + 1, dy, NULL, err, sizeof err);
    int ok2 = bad_batch == GW_CUDA_EINVAL && err[0] != 0;
    int bad_align = gw_cuda_matvec_of(QT_Q8_0)(dw, 4, 32, dx + 1, 1, dy, NULL, err, sizeof err);
    int bad_walign = gw_cuda_matvec_of(QT_Q4_K)((const char *)dw + 8, 4, 256, dx, 1, dy, NULL, err, sizeof err);
    int ok3 = bad_align == GW_CUDA_EINVAL && bad_walign == GW_CUDA_EINVAL;
    int ok4 = gw_cuda_matvec_of(QT_Q8_K) == NULL && gw_cuda_matvec_of(QT_Q4_0) != NULL && gw_cuda_matvec_of(QT_Q6_K) != NULL && gw_cuda_matvec_of(-1) == NULL;
    CK(cudaGetLastError());
    printf("argument errors: cols %s, batch %s, alignment %s, table %s (last: \"%s\")\n", ok1 ? "ok" : "FAIL",
           ok2 ? "ok" : "FAIL", ok3 ? "ok" : "FAIL", ok4 ? "ok" : "FAIL", err);
    if (!(ok1 && ok2 && ok3 && ok4)) g_failures++;
    CK(cudaFree(dx)); CK(cudaFree(dy)); CK(cudaFree(dw));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define REPS 20
#define TILE_ROWS 512

/* Median ms of REPS launches after 3 warm-ups. */
static float time_launches(gw_cuda_matvec_fn fn, const void *dw, int n_rows, int n_cols, const float *dx, int nb,
                           float *dy)
{
    char err[256];
    float ms[REPS];
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3 + REPS; i++) {
        CK(cudaEventRecord(a));
        if (fn(dw, n_rows, n_cols, dx, nb, dy, NULL, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(2); }
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        if (i >= 3) CK(cudaEventElapsedTime(&ms[i - 3], a, b));
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    qsort(ms, REPS, sizeof(float), cmp_float);
    return ms[REPS / 2];
}

static float copy_ceiling_gbs(void)
{
    size_t n = (size_t)2 << 30;
    void *s, *d;
    float ms[REPS];
    cudaEvent_t a, b;
    CK(cudaMalloc(&s, n));
    CK(cudaMalloc(&d, n));
    CK(cudaMemset(s, 0x5a, n));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3 + REPS; i++) {
        CK(cudaEventRecord(a));
        CK(cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        if (i >= 3) CK(cudaEventElapsedTime(&ms[i - 3], a, b));
    }
    qsort(ms, REPS, sizeof(float), cmp_float);
    CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
    CK(cudaFree(s)); CK(cudaFree(d));
    return (float)(2.0 * n / (ms[REPS / 2] * 1e-3) / 1e9); /* bytes read + written */
}

static void time_shape(enum quant_type t, const char *shape, int n_rows, int n_cols, float copy_gbs)
{
    static const int batches[] = {1, 16};
    gw_cuda_matvec_fn fn = gw_cuda_matvec_of(t);
    struct host_matrix tile = make_matrix(t, TILE_ROWS, n_cols);
    size_t total = tile.n_bytes * (size_t)(n_rows / TILE_ROWS);
    uint8_t *dw;
    float *dx, *dy, *x, *y;
    double *ref;
    CK(cudaMalloc((void **)&dw, total));
    CK(cudaMemcpy(dw, tile.bytes, tile.n_bytes, cudaMemcpyHostToDevice));
    for (size_t have = tile.n_bytes; have < total; have *= 2) /* double the filled prefix */
        CK(cudaMemcpy(dw + have, dw, have * 2 <= total ? have : total - have, cudaMemcpyDeviceToDevice));
    x = (float *)malloc((size_t)16 * n_cols * sizeof(float));
    y = (float *)malloc(((size_t)16 * n_rows + GUARD_FLOATS) * sizeof(float));
    ref = (double *)malloc((size_t)16 * TILE_ROWS * sizeof(double));
    if (!x || !y || !ref) { fprintf(stderr, "out of host memory\n"); exit(2); }
    fill_random(x, (size_t)16 * n_cols, 1.0);
    CK(cudaMalloc((void **)&dx, (size_t)16 * n_cols * sizeof(float)));
    CK(cudaMalloc((void **)&dy, ((size_t)16 * n_rows + GUARD_FLOATS) * sizeof(float)));
    CK(cudaMemcpy(dx, x, (size_t)16 * n_cols * sizeof(float), cudaMemcpyHostToDevice));
    for (int bi = 0; bi < 2; bi++) {
        int nb = batches[bi];
        char err[256] = "";
        reference(tile.decoded, TILE_ROWS, n_cols, x, nb, ref);
        int rc = run_once(fn, dw, n_rows, n_cols, dx, nb, dy, y, err);
        double e = rc ? INFINITY : rel_error(y, n_rows, nb, ref, TILE_ROWS);
        int ok = !rc && e < TOL && guard_intact(y + (size_t)nb * n_rows);
        if (!ok) g_failures++;
        float ms = time_launches(fn, dw, n_rows, n_cols, dx, nb, dy);
        double gbs = (double)total / (ms * 1e-3) / 1e9;
        printf("| %-6s | %-6s | %6d x %d | %2d | %8.1f | %7.3f | %7.0f | %4.0f%% | %9.2e %s |\n", quant_type_name(t),
               shape, n_rows, n_cols, nb, total / 1e6, ms, gbs, 100.0 * gbs / copy_gbs, e, ok ? "pass" : "FAIL");
    }
    CK(cudaFree(dw)); CK(cudaFree(dx)); CK(cudaFree(dy));
    free(x); free(y); free(ref);
    free_matrix(&tile);
}

int main(int argc, char **argv)
{
    int timing = !(argc > 1 && strcmp(argv[1], "--no-timing") == 0);
    struct cudaDeviceProp prop;
    int dev;
    quant_init();
    {
        char err[256];
        if (gw_cuda_matvec_init(err, sizeof err)) {
            fprintf(stderr, "FAIL: %s\n", err);
            return 1;
        }
    }
    list_types();
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, %d SMs, L2 %d MB, compute %d.%d\n\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, prop.major, prop.minor);

    check_errors();
    printf("\n| type   |   rows |  cols | nb | rel error | same | guard | result |\n");
    printf("|--------|-------:|------:|---:|----------:|------|-------|--------|\n");
    static const int cases[][3] = {{1003, 2560, 1}, {77, 4608, 3}, {257, 768, 16}, {40, 2560, 5}, {9, 256, 2}};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
            check_case(k_types[ti], cases[ci][0], cases[ci][1], cases[ci][2]);

    if (timing) {
        float copy_gbs = copy_ceiling_gbs();
        printf("\ndevice-to-device copy (2 GiB, read + write): %.0f GB/s\n\n", copy_gbs);
        printf("| type   | shape  | matrix          | nb | weight MB | ms (median of %d) | GB/s | of copy | rel error (full matrix) |\n", REPS);
        printf("|--------|--------|-----------------|---:|----------:|--------:|--------:|-----:|-----------|\n");
        for (int ti = 0; ti < N_TYPES; ti++) {
            time_shape(k_types[ti], "expert", 512 * 640, 2560, copy_gbs);
            time_shape(k_types[ti], "head", 248320, 2560, copy_gbs);
        }
    }
    printf("\n%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}
