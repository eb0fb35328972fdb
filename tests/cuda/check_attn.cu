/* check_attn.cu — the attention kernels of gpu-worker/cuda/attn.cu on the
 * GPU (issue 15 item 2, issue 16 item 2): the split-K (flash-decoding)
 * kernel against the reference k_attend and a double-precision host
 * reference of engine/cpu/qsa.c's attend_row, and the indexer's fast scores,
 * rank top-k and kept-block list against the reference kernels and the host.
 *
 * Shapes: the released one (24 query heads, 2 KV heads, head 256, indexer
 * 4 × 128, blocks of 4, 512 kept blocks), the same without an indexer (the
 * MTP block: dense over every position), and an odd one (6:2 heads of 40,
 * indexer 2 × 24, blocks of 3, 6 kept: sparse from position 21).  For each,
 * contexts 1, 63, 64, 65, 512, 4096, 16384 (row t at position n − 1 + t)
 * and windows of 1, 2, 5, 17 rows:
 *   - the selection: fast scores within 1e-6 of the reference kernel's,
 *     keep flags = the host's rank rule on the same scores and = the old
 *     per-row rank kernel's (kept below as it was), the list = the kept
 *     blocks in ascending order;
 *   - attention: split-K vs k_attend and vs the host, max|d| / max|ref| ≤ tol
 *     (default 1e-4);
 *   - the exactness contract: each row of a T-row window bit-identical to
 *     the one-row call at its position (its own selection), and the dpos
 *     form (position on the device, buffers at capacity: a captured step)
 *     bit-identical to the plain one.
 * Then (unless --no-timing) µs per call, old kernels vs new, at 4K, 16K and
 * 32K positions for 1 and 17 rows: the indexer's scores + top-k (+ list) and
 * the attention.  Prints PASS/FAIL lines; exits 1 on any FAIL.
 * Build: make cuda-check (build/tests/cuda/check_attn); run on the GPU
 * machine: tools/dev/device-checks.sh attn. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/cuda/attn.h"

#define CK(x)                                                                                                        \
    do {                                                                                                             \
        cudaError_t e_ = (x);                                                                                        \
        if (e_ != cudaSuccess) {                                                                                     \
            printf("FAIL: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__);                                \
            exit(1);                                                                                                 \
        }                                                                                                            \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

struct shape {
    const char *name;
    int Hq, Hkv, D, cr, Hi, Di;
    int64_t top;
};
static const shape shapes[] = {
    {"released", 24, 2, 256, 4, 4, 128, 512},
    {"dense", 24, 2, 256, 0, 4, 128, 0},
    {"odd", 6, 2, 40, 3, 2, 24, 6},
};
static const int64_t contexts[] = {1, 63, 64, 65, 512, 4096, 16384};
static const int windows[] = {1, 2, 5, 17};
#define W GW_VERIFY_ROWS
#define CAP (32768 + W)

static int failures;
static double tol = 1e-4;

__attribute__((format(printf, 2, 3)))
static void report(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures += !ok;
}

/* The rank kernel qsa.cu had before the warp-per-block one: a thread a block, one launch a row. */
__global__ void k_block_keep_old(const float *scores, int64_t B, int64_t bstride, int64_t top, uint8_t *keep)
{
    const int t = blockIdx.y;
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (b >= B) return;
    const float *s = scores + t * bstride;
    const float sb = s[b];
    int64_t rank = 0;
    for (int64_t o = 0; o < B; o++) rank += s[o] > sb || (s[o] == sb && o < b);
    keep[t * bstride + b] = rank < top;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
}
static float *dev_random(int64_t n, float scale)
{
    float *h = (float *)malloc((size_t)n * sizeof *h), *d;
    for (int64_t i = 0; i < n; i++) h[i] = frand() * scale;
    CK(cudaMalloc(&d, (size_t)n * sizeof *d));
    CK(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    free(h);
    return d;
}
static void *dev_alloc(size_t bytes)
{
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemset(d, 0, bytes));
    return d;
}
static void *to_host(const void *d, size_t bytes)
{
    void *h = malloc(bytes);
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* The device data of a shape: a K/V cache of CAP slots, W rows of queries, gates and indexer queries, block keys. */
struct data {
    const shape *sh;
    float *k, *v, *q, *qg, *qi, *blk;
    float *h_k, *h_v, *h_q, *h_qg; /* host copies for the reference */
    /* outputs and temporaries */
    float *out_old, *out_new, *out_one, *p, *part, *scores, *scores_ref, *scores_one;
    uint8_t *keep, *keep_old, *keep_one;
    int32_t *list, *list_one;
    int64_t *dpos;
    int64_t bmax;
};

static void data_make(data *d, const shape *sh)
{
    memset(d, 0, sizeof *d);
    d->sh = sh;
    const int64_t kvw = (int64_t)sh->Hkv * sh->D, qw = (int64_t)sh->Hq * sh->D;
    d->k = dev_random(CAP * kvw, 1.0f), d->v = dev_random(CAP * kvw, 1.0f);
    d->q = dev_random(W * qw, 4.0f), d->qg = dev_random(W * 2 * qw, 2.0f);
    d->h_k = (float *)to_host(d->k, (size_t)CAP * kvw * 4), d->h_v = (float *)to_host(d->v, (size_t)CAP * kvw * 4);
    d->h_q = (float *)to_host(d->q, (size_t)W * qw * 4), d->h_qg = (float *)to_host(d->qg, (size_t)W * 2 * qw * 4);
    d->bmax = sh->cr > 0 ? CAP / sh->cr : 1;
    if (sh->cr > 0) {
        d->qi = dev_random((int64_t)W * sh->Hi * sh->Di, 1.0f), d->blk = dev_random(d->bmax * sh->Di, 1.0f);
    }
    d->out_old = (float *)dev_alloc((size_t)W * qw * 4), d->out_new = (float *)dev_alloc((size_t)W * qw * 4);
    d->out_one = (float *)dev_alloc((size_t)qw * 4);
    d->p = (float *)dev_alloc((size_t)W * sh->Hq * CAP * 4);
    d->part = (float *)dev_alloc((size_t)cu_flash_part_floats(W, sh->Hq, sh->D) * 4);
    d->scores = (float *)dev_alloc((size_t)W * d->bmax * 4), d->scores_ref = (float *)dev_alloc((size_t)W * d->bmax * 4);
    d->scores_one = (float *)dev_alloc((size_t)W * d->bmax * 4);
    d->keep = (uint8_t *)dev_alloc((size_t)W * d->bmax), d->keep_old = (uint8_t *)dev_alloc((size_t)W * d->bmax);
    d->keep_one = (uint8_t *)dev_alloc((size_t)W * d->bmax);
    d->list = (int32_t *)dev_alloc((size_t)W * (sh->top + 1) * 4), d->list_one = (int32_t *)dev_alloc((size_t)W * (sh->top + 1) * 4);
    d->dpos = (int64_t *)dev_alloc(sizeof(int64_t));
}

static void data_free(data *d)
{
    void *dv[] = {d->k,     d->v,       d->q,          d->qg,     d->qi,       d->blk,      d->out_old, d->out_new,
                  d->out_one, d->p,     d->part,       d->scores, d->scores_ref, d->scores_one, d->keep,  d->keep_old,
                  d->keep_one, d->list, d->list_one,   d->dpos};
    for (size_t i = 0; i < sizeof dv / sizeof *dv; i++) cudaFree(dv[i]);
    free(d->h_k), free(d->h_v), free(d->h_q), free(d->h_qg);
}

/* The attention arguments of T rows whose first is row r0 of the data, at slot = position pos0 (dpos: 0 + *dpos). */
static cu_attn_args args_of(const data *d, int r0, int64_t pos0, bool dpos, float *out)
{
    const shape *sh = d->sh;
    const int64_t qw = (int64_t)sh->Hq * sh->D;
    cu_attn_args a = {d->q + r0 * qw, d->qg + r0 * 2 * qw, 2 * qw, d->k, d->v, sh->Hq, sh->Hkv, sh->D,
                      dpos ? 0 : pos0, dpos ? 0 : pos0, sh->cr, sh->top, dpos ? d->dpos : NULL, out};
    return a;
}

/* The fast selection of T rows from data row r0 at pos0: scores, keep, list (bstride apart). */
static void select_fast(const data *d, int T, int r0, int64_t pos0, bool dpos, int64_t bstride, float *scores,
                        uint8_t *keep, int32_t *list)
{
    const shape *sh = d->sh;
    const int64_t p0 = dpos ? 0 : pos0;
    const int64_t *dp = dpos ? d->dpos : NULL;
    cu_block_scores_fast(0, T, d->qi + (int64_t)r0 * sh->Hi * sh->Di, sh->Hi, sh->Di, d->blk, bstride, scores, sh->cr,
                         sh->top, p0, dp);
    LAUNCHED();
    cu_block_keep(0, T, scores, bstride, sh->top, keep, sh->cr, p0, dp);
    LAUNCHED();
    cu_keep_list(0, T, keep, bstride, sh->top, sh->cr, p0, dp, list);
    LAUNCHED();
}

/* The old selection: reference scores and the old rank kernel, a launch each per sparse row. */
static void select_old(const data *d, int T, int64_t pos0, int64_t bstride)
{
    const shape *sh = d->sh;
    for (int r = 0; r < T; r++) {
        const int64_t Br = (pos0 + r + 1) / sh->cr;
        if (Br <= sh->top) continue;
        cu_block_scores_ref(0, d->qi + (int64_t)r * sh->Hi * sh->Di, sh->Hi, sh->Di, d->blk, Br, bstride,
                            d->scores_ref + r * bstride, sh->cr, NULL, 0);
        k_block_keep_old<<<(unsigned)((Br + 127) / 128), 128>>>(d->scores_ref + r * bstride, Br, bstride, sh->top,
                                                               d->keep_old + r * bstride);
        LAUNCHED();
    }
}

static double max_abs(const float *a, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}
/* max|a − b| / max|b| (NaN: infinite) */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = fabs((double)a[i] - b[i]);
        if (!(x <= e)) e = x != x ? INFINITY : x;
    }
    const double m = max_abs(b, n);
    return m > 0 ? e / m : e;
}
static double rel_err_d(const float *a, const double *b, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = fabs(a[i] - b[i]);
        if (!(x <= e)) e = x != x ? INFINITY : x;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return m > 0 ? e / m : e;
}

/* engine/cpu/qsa.c's attend_row in double, for T rows at pos0 over the kept blocks (keep: host flags, bstride apart). */
static void host_attend(const data *d, int T, int64_t pos0, const uint8_t *keep, int64_t bstride, double *out)
{
    const shape *sh = d->sh;
    const int G = sh->Hq / sh->Hkv, D = sh->D;
    const int64_t kvw = (int64_t)sh->Hkv * D, qw = (int64_t)sh->Hq * D;
    double *s = (double *)malloc((size_t)CAP * sizeof *s);
    int64_t *sel = (int64_t *)malloc((size_t)CAP * sizeof *sel);
    for (int t = 0; t < T; t++) {
        const int64_t pos = pos0 + t, B = sh->cr > 0 ? (pos + 1) / sh->cr : 0;
        const bool sparse = sh->cr > 0 && B > sh->top;
        int64_t n = 0;
        for (int64_t i = 0; i <= pos; i++)
            if (!sparse || i >= B * sh->cr || keep[t * bstride + i / sh->cr]) sel[n++] = i;
        for (int h = 0; h < sh->Hq; h++) {
            const float *qh = d->h_q + t * qw + (int64_t)h * D;
            const int64_t kvo = (int64_t)(h / G) * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++) {
                const float *kk = d->h_k + sel[j] * kvw + kvo;
                double a = 0;
                for (int x = 0; x < D; x++) a += (double)qh[x] * kk[x];
                s[j] = a / sqrt((double)D);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < n; j++) s[j] = exp(s[j] - mx), sum += s[j];
            const float *gate = d->h_qg + t * 2 * qw + (int64_t)h * 2 * D + D;
            for (int x = 0; x < D; x++) {
                double a = 0;
                for (int64_t j = 0; j < n; j++) a += s[j] * d->h_v[sel[j] * kvw + kvo + x];
                out[t * qw + (int64_t)h * D + x] = a / sum / (1.0 + exp(-(double)gate[x]));
            }
        }
    }
    free(s), free(sel);
}

/* The selection checks of T rows at pos0: fast vs reference scores, keep vs the host's rank rule and the old
 * kernel's, the list vs the flags.  Returns the host keep flags (bstride apart), or NULL where no row is sparse. */
static uint8_t *check_selection(const data *d, int T, int64_t pos0, int64_t bstride, bool *ok, double *score_err)
{
    const shape *sh = d->sh;
    *score_err = 0;
    if (sh->cr <= 0 || bstride <= sh->top) return NULL;
    select_fast(d, T, 0, pos0, false, bstride, d->scores, d->keep, d->list);
    select_old(d, T, pos0, bstride);
    CK(cudaDeviceSynchronize());
    float *sf = (float *)to_host(d->scores, (size_t)T * bstride * 4), *sr = (float *)to_host(d->scores_ref, (size_t)T * bstride * 4);
    uint8_t *kf = (uint8_t *)to_host(d->keep, (size_t)T * bstride), *ko = (uint8_t *)to_host(d->keep_old, (size_t)T * bstride);
    int32_t *lf = (int32_t *)to_host(d->list, (size_t)T * sh->top * 4);
    for (int t = 0; t < T; t++) {
        const int64_t B = (pos0 + t + 1) / sh->cr;
        if (B <= sh->top) continue;
        const float *s = sf + t * bstride;
        const double e = rel_err(s, sr + t * bstride, B);
        *score_err = e > *score_err ? e : *score_err;
        int64_t kept = 0, at = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t rank = 0;
            for (int64_t o = 0; o < B; o++) rank += s[o] > s[b] || (s[o] == s[b] && o < b);
            const uint8_t want = rank < sh->top;
            *ok &= kf[t * bstride + b] == want;
            kept += want;
            if (want) *ok &= at < sh->top && lf[t * sh->top + at++] == b;
        }
        *ok &= kept == sh->top;
        /* the old kernel on the reference scores: the same flags wherever the scores are the same floats */
        if (!memcmp(s, sr + t * bstride, (size_t)B * 4)) *ok &= !memcmp(kf + t * bstride, ko + t * bstride, (size_t)B);
    }
    free(sf), free(sr), free(ko), free(lf);
    return kf;
}

static void check_case(data *d, int64_t n, int T)
{
    const shape *sh = d->sh;
    const int64_t pos0 = n - 1, qw = (int64_t)sh->Hq * sh->D;
    const int64_t bstride = sh->cr > 0 && (pos0 + T) / sh->cr > 0 ? (pos0 + T) / sh->cr : 1;
    bool ok = true;
    double serr = 0;
    uint8_t *hkeep = check_selection(d, T, pos0, bstride, &ok, &serr);
    const uint8_t *keep = hkeep ? d->keep : NULL;
    const int32_t *list = hkeep ? d->list : NULL;
    const bool sel_ok = ok;
    /* attention, old and new */
    cu_attn_args a = args_of(d, 0, pos0, false, d->out_old);
    cu_attend_ref(0, T, &a, keep, bstride, d->p, pos0 + T);
    LAUNCHED();
    a.out = d->out_new;
    cu_flash_attend(0, T, &a, list, d->part);
    LAUNCHED();
    CK(cudaDeviceSynchronize());
    float *ho = (float *)to_host(d->out_old, (size_t)T * qw * 4), *hn = (float *)to_host(d->out_new, (size_t)T * qw * 4);
    double *hr = (double *)malloc((size_t)T * qw * sizeof *hr);
    host_attend(d, T, pos0, hkeep, bstride, hr);
    const double e_old = rel_err(hn, ho, T * qw), e_ref = rel_err_d(hn, hr, T * qw), e_old_ref = rel_err_d(ho, hr, T * qw);
    /* each row alone at its position (its own selection, at the K/V capacity's bstride): bit-identical */
    int same_rows = 0;
    float *h1 = (float *)malloc((size_t)qw * 4);
    for (int t = 0; t < T; t++) {
        const int64_t p = pos0 + t, b1 = sh->cr > 0 ? d->bmax : 1;
        const bool sparse = sh->cr > 0 && (p + 1) / sh->cr > sh->top;
        if (sparse) select_fast(d, 1, t, p, false, b1, d->scores_one, d->keep_one, d->list_one);
        cu_attn_args a1 = args_of(d, t, p, false, d->out_one);
        cu_flash_attend(0, 1, &a1, sparse ? d->list_one : NULL, d->part);
        LAUNCHED();
        CK(cudaMemcpy(h1, d->out_one, (size_t)qw * 4, cudaMemcpyDeviceToHost));
        same_rows += !memcmp(h1, hn + t * qw, (size_t)qw * 4);
    }
    /* the dpos form: position on the device, the selection at the capacity's bstride (a captured step) */
    CK(cudaMemcpy(d->dpos, &pos0, sizeof pos0, cudaMemcpyHostToDevice));
    if (sh->cr > 0) select_fast(d, T, 0, pos0, true, d->bmax, d->scores_one, d->keep_one, d->list_one);
    cu_attn_args ad = args_of(d, 0, pos0, true, d->out_old);
    cu_flash_attend(0, T, &ad, sh->cr > 0 ? d->list_one : NULL, d->part);
    LAUNCHED();
    CK(cudaDeviceSynchronize());
    float *hd = (float *)to_host(d->out_old, (size_t)T * qw * 4);
    const bool same_dpos = !memcmp(hd, hn, (size_t)T * qw * 4);
    const bool pass = sel_ok && e_old <= tol && e_ref <= tol && same_rows == T && same_dpos;
    report(pass,
           "attn-%s n=%lld rows=%d: split-K vs k_attend %.3g, vs host %.3g (k_attend vs host %.3g); %d of %d rows "
           "bit-identical alone, dpos form %s; selection %s (fast scores vs ref %.3g)",
           sh->name, (long long)n, T, e_old, e_ref, e_old_ref, same_rows, T, same_dpos ? "identical" : "DIFFERENT",
           !hkeep ? "dense" : sel_ok ? "exact" : "WRONG", serr);
    free(hkeep), free(ho), free(hn), free(hr), free(h1), free(hd);
}

/* µs per call of fn over reps, after one warm-up */
#define TIME_US(reps, body)                                                                                          \
    ({                                                                                                               \
        cudaEvent_t e0_, e1_;                                                                                        \
        CK(cudaEventCreate(&e0_));                                                                                   \
        CK(cudaEventCreate(&e1_));                                                                                   \
        body;                                                                                                        \
        CK(cudaEventRecord(e0_));                                                                                    \
        for (int r_ = 0; r_ < (reps); r_++) { body; }                                                                \
        CK(cudaEventRecord(e1_));                                                                                    \
        CK(cudaEventSynchronize(e1_));                                                                               \
        LAUNCHED();                                                                                                  \
        float ms_;                                                                                                   \
        CK(cudaEventElapsedTime(&ms_, e0_, e1_));                                                                    \
        cudaEventDestroy(e0_), cudaEventDestroy(e1_);                                                                \
        1000.0 * ms_ / (reps);                                                                                       \
    })

static void timing(data *d, int reps)
{
    const shape *sh = d->sh;
    static const int64_t ctxs[] = {4096, 16384, 32768};
    static const int rows[] = {1, W};
    for (size_t c = 0; c < sizeof ctxs / sizeof *ctxs; c++)
        for (size_t w = 0; w < sizeof rows / sizeof *rows; w++) {
            const int T = rows[w];
            const int64_t pos0 = ctxs[c] - T, bstride = sh->cr > 0 ? (pos0 + T) / sh->cr : 1; /* the last row sees ctx */
            const bool sparse = sh->cr > 0 && bstride > sh->top;
            double io = 0, in = 0;
            if (sparse) {
                io = TIME_US(reps, select_old(d, T, pos0, bstride));
                in = TIME_US(reps, select_fast(d, T, 0, pos0, false, bstride, d->scores, d->keep, d->list));
            }
            cu_attn_args a = args_of(d, 0, pos0, false, d->out_old);
            const double ao = TIME_US(reps, cu_attend_ref(0, T, &a, sparse ? d->keep : NULL, bstride, d->p, pos0 + T));
            a.out = d->out_new;
            const double an = TIME_US(reps, cu_flash_attend(0, T, &a, sparse ? d->list : NULL, d->part));
            printf("TIME attn-%s ctx=%lld rows=%d: indexer old %.1f us new %.1f us; attention old %.1f us new %.1f us; "
                   "together %.1f -> %.1f us (%.1fx)\n",
                   sh->name, (long long)ctxs[c], T, io, in, ao, an, io + ao, in + an, (io + ao) / (in + an));
        }
}

int main(int argc, char **argv)
{
    bool timed = true;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-timing")) timed = false;
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: check_attn [--no-timing] [--tol X] [--reps N]\n");
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("FAIL: check_attn: no CUDA device\n");
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("check_attn on %s (%d SMs), tol %.1g\n", prop.name, prop.multiProcessorCount, tol);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        if (!cu_flash_fits(sh->Hq, sh->Hkv, sh->D)) {
            report(false, "attn-%s: the split-K kernel does not fit the shape", sh->name);
            continue;
        }
        data d;
        data_make(&d, sh);
        for (size_t c = 0; c < sizeof contexts / sizeof *contexts; c++)
            for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) check_case(&d, contexts[c], windows[w]);
        if (timed && strcmp(sh->name, "odd")) timing(&d, reps);
        data_free(&d);
    }
    printf("check_attn: %d FAIL\n", failures);
    return failures ? 1 : 0;
}
