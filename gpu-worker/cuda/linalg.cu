/* linalg.cu — the reference's arithmetic on the device (engine/cpu/
 * linalg.c's twin): matrix × activations, row gathers, RMS norms, RoPE and
 * the causal conv, with their launchers.
 *
 * Matrices decode a weight value at a time as quant_ref.c decodes it
 * (d_wval, with block sizes and offsets from core/quant/quant_blocks.h) and
 * accumulate in double: bit-faithful to the CPU, for the "ref" kernels; with
 * "fast" (the default) cu_matmul takes matvec.cu's fp32 kernels wherever the
 * type has one.  d_wval and the IQ4_NL table in constant memory live here
 * only, so the one copy of the table is the one cu_linalg_init fills. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

#include <cuda_fp16.h>

#include "core/quant/quant_blocks.h"
#include "gpu-worker/cuda/dec_lowbit.cuh"

extern "C" const int8_t quant_iq4nl_values[16];

__constant__ int8_t c_iq4nl[16];

static __device__ __forceinline__ float d_half(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}

static __device__ __forceinline__ int d_nib(const uint8_t *qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

static __device__ __forceinline__ int d_q5(const uint8_t *qh, const uint8_t *qs, int j)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    return d_nib(qs, j) | (int)((h >> j) & 1) << 4;
}

static __device__ __forceinline__ void d_kscale(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Value i of a row (quant_ref.c's decoders, one value at a time); byte
 * offsets are quant_blocks.h's. */
static __device__ float d_wval(const uint8_t *row, int type, int64_t i)
{
    switch (type) {
    case QT_F32: return ((const float *)row)[i];
    case QT_F16: return d_half(row + 2 * i);
    case QT_BF16: return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
    case QT_Q8_0: {
        const uint8_t *b = row + (i / QK_SMALL) * sizeof(block_q8_0);
        return (float)(int8_t)b[offsetof(block_q8_0, qs) + i % QK_SMALL] * d_half(b);
    }
    case QT_Q4_0: {
        const uint8_t *b = row + (i / QK_SMALL) * sizeof(block_q4_0);
        return (float)(d_nib(b + offsetof(block_q4_0, qs), (int)(i % QK_SMALL)) - 8) * d_half(b);
    }
    case QT_Q5_0: {
        const uint8_t *b = row + (i / QK_SMALL) * sizeof(block_q5_0);
        return (float)(d_q5(b + offsetof(block_q5_0, qh), b + offsetof(block_q5_0, qs), (int)(i % QK_SMALL)) - 16) *
               d_half(b);
    }
    case QT_IQ4_NL: {
        const uint8_t *b = row + (i / QK_SMALL) * sizeof(block_iq4_nl);
        return (float)c_iq4nl[d_nib(b + offsetof(block_iq4_nl, qs), (int)(i % QK_SMALL))] * d_half(b);
    }
    case QT_Q5_1: {
        const uint8_t *b = row + (i / QK_SMALL) * sizeof(block_q5_1);
        return (float)d_q5(b + offsetof(block_q5_1, qh), b + offsetof(block_q5_1, qs), (int)(i % QK_SMALL)) *
                   d_half(b) +
               d_half(b + offsetof(block_q5_1, m));
    }
    case QT_Q4_K:
    case QT_Q5_K: { /* the two share d, dmin and scales; Q5_K adds qh before qs */
        const bool five = type == QT_Q5_K;
        const uint8_t *b = row + (i / QK_K) * (five ? sizeof(block_q5_K) : sizeof(block_q4_K));
        const int v = (int)(i % QK_K);
        int sc, m;
        d_kscale(b + offsetof(block_q4_K, scales), v / 32, &sc, &m);
        const uint8_t *qs = b + (five ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs));
        uint8_t byte = qs[32 * (v / 64) + v % 32];
        int code = (v % 64) < 32 ? (byte & 15) : (byte >> 4);
        if (five) {
            int bit = 2 * (v / 64) + ((v % 64) >= 32);
            code |= ((b[offsetof(block_q5_K, qh) + v % 32] >> bit) & 1) << 4;
        }
        float dl = d_half(b) * (float)sc, ml = d_half(b + offsetof(block_q4_K, dmin)) * (float)m;
        return dl * (float)code - ml;
    }
    case QT_Q6_K: {
        const uint8_t *b = row + (i / QK_K) * sizeof(block_q6_K);
        const int v = (int)(i % QK_K);
        int h = v / 128, r = v % 128, l = r % 32, quarter = r / 32;
        uint8_t lo = b[offsetof(block_q6_K, ql) + 64 * h + l + 32 * (quarter & 1)];
        int nib = quarter < 2 ? (lo & 15) : (lo >> 4);
        int code = nib | ((b[offsetof(block_q6_K, qh) + 32 * h + l] >> (2 * quarter)) & 3) << 4;
        return d_half(b + offsetof(block_q6_K, d)) * (float)(int8_t)b[offsetof(block_q6_K, scales) + v / 16] *
               (float)(code - 32);
    }
    }
    bool ok;
    const float v = lb_value(row, type, i, &ok); /* the low-bit formats: dec_lowbit.cuh */
    return ok ? v : __int_as_float(0x7fc00000); /* unreachable: the upload widened every other type */
}

/* ---------- matrices ---------- */

#define MM_TT 8 /* activation rows per block (weight values decoded once for them) */
#define MM_THREADS 128

/* y[t·ys + j] = Σ_i W[j][i] · x[xr(t)·xs + i] for output row j = blockIdx.x.
 * Plain: rows t = blockIdx.y·MM_TT …, xr(t) = t.  Expert mode (eid != NULL):
 * one pair t = p0 + blockIdx.y per block, its matrix slot[eid[t]] (the expert's
 * slot in the layer's slot array), its x row t / xdiv; pairs whose expert has
 * no slot (slot < 0: computed elsewhere) are skipped. */
__global__ void k_matmul(dmat w, const float *x, int64_t xs, int T, float *y, int64_t ys, const int32_t *eid, int xdiv,
                         const int32_t *slot, int p0)
{
    const int64_t j = blockIdx.x;
    const uint8_t *row = w.d + (size_t)j * w.row_bytes;
    int t0, nt;
    const float *xr[MM_TT];
    if (eid) {
        t0 = p0 + blockIdx.y; /* pairs beyond the grid's 65535 rows come in several launches */
        nt = 1;
        const int e = slot[eid[t0]];
        if (e < 0) return;
        row += (size_t)e * w.mat_bytes;
        xr[0] = x + (int64_t)(t0 / xdiv) * xs;
    } else {
        t0 = blockIdx.y * MM_TT;
        nt = T - t0 < MM_TT ? T - t0 : MM_TT;
#pragma unroll
        for (int tt = 0; tt < MM_TT; tt++) xr[tt] = x + (int64_t)(t0 + (tt < nt ? tt : 0)) * xs;
    }
    double acc[MM_TT];
#pragma unroll
    for (int tt = 0; tt < MM_TT; tt++) acc[tt] = 0;
    for (int64_t i = threadIdx.x; i < w.n_in; i += blockDim.x) {
        const double v = d_wval(row, w.type, i);
#pragma unroll
        for (int tt = 0; tt < MM_TT; tt++)
            if (tt < nt) acc[tt] += v * (double)xr[tt][i];
    }
#pragma unroll
    for (int tt = 0; tt < MM_TT; tt++) {
        if (tt >= nt) break;
        double s = block_sum(acc[tt]);
        if (threadIdx.x == 0) y[(int64_t)(t0 + tt) * ys + j] = (float)s;
    }
}

/* out[r·os + i] = row rows[r] of W, dequantized (embeddings, the PLE table). */
template <typename I> __global__ void k_get_rows(dmat w, const I *rows, float *out, int64_t os)
{
    const uint8_t *row = w.d + (size_t)rows[blockIdx.x] * w.row_bytes;
    for (int64_t i = threadIdx.x; i < w.n_in; i += blockDim.x) out[(int64_t)blockIdx.x * os + i] = d_wval(row, w.type, i);
}

/* ---------- norms, RoPE, the causal conv ---------- */

/* RMS norm of group g (of `n` values) of row r: in at r·irs + g·igs, out at
 * r·ors + g·ogs, weight w + g·wgs (NULL: none; wgs 0: one weight shared by
 * the groups, as the per-head q/k norms).  grid (rows, groups). */
__global__ void k_rms_norm(const float *in, int64_t irs, int64_t igs, float *out, int64_t ors, int64_t ogs, int64_t n,
                           const float *w, int64_t wgs, float eps)
{
    const float *x = in + blockIdx.x * irs + blockIdx.y * igs;
    float *o = out + blockIdx.x * ors + blockIdx.y * ogs;
    const float *wg = w ? w + blockIdx.y * wgs : NULL;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)x[i] * x[i];
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = x[i] * scale * (wg ? wg[i] : 1.0f);
}

/* NeoX RoPE of the first rope_dim values of head h of row r (x at r·rs + h·hs)
 * at position pos0 (+ *dpos when given: a replayed graph reads the position
 * from the device) + r·pstep, with the host's cos/sin tables (half per position). */
__global__ void k_rope(float *x, int64_t rs, int64_t hs, int rope_dim, const float *cosv, const float *sinv, int64_t pos0,
                       int64_t pstep, const int64_t *dpos)
{
    const int64_t pos = pos0 + (dpos ? *dpos : 0) + (int64_t)blockIdx.x * pstep;
    d_rope(x + blockIdx.x * rs + blockIdx.y * hs, rope_dim, cosv, sinv, pos);
}


/* Depthwise causal conv + SiLU (cpu_causal_conv_silu), one thread per channel;
 * in/out rows of ch values (in rows at stride ins). */
__global__ void k_conv_silu(const float *w, int K, int dilation, int64_t ch, float *state, const float *in, int T,
                            float *out)
{
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= ch) return;
    const int past = (K - 1) * dilation;
    const float *wc = w + c * K;
    for (int t = 0; t < T; t++) {
        double s = 0;
        for (int j = 0; j < K; j++) {
            int tau = t - (K - 1 - j) * dilation;
            float xv = tau >= 0 ? in[(int64_t)tau * ch + c] : state[(int64_t)(past + tau) * ch + c];
            s += (double)wc[j] * xv;
        }
        out[(int64_t)t * ch + c] = d_silu((float)s);
    }
    /* new state row j = input T-past+j; in place: row j+T (read) is above row j (written) */
    for (int j = 0; j < past; j++) {
        int tau = T - past + j;
        state[(int64_t)j * ch + c] = tau >= 0 ? in[(int64_t)tau * ch + c] : state[(int64_t)(j + T) * ch + c];
    }
}

/* ---------- launchers ---------- */

int cu_linalg_init(void)
{
    CK(cudaMemcpyToSymbol(c_iq4nl, quant_iq4nl_values, sizeof c_iq4nl));
    CK(lb_upload_codebooks());                                   /* the reference kernels' copy (this unit's) */
    if (gw_cuda_matvec_init(g_msg, sizeof g_msg)) return NB_EIO; /* the fast kernels' copy (matvec.cu's) */
    return 0;
}

/* The fast kernels apply to w (its type has one, its rows are whole blocks)
 * with x and y dense and 16-byte aligned. */
static bool fast_ok(const cuda_backend *be, const dmat &w, const float *x, int64_t xs, int64_t ys)
{
    const struct quant_traits *q = quant_traits_of((enum quant_type)w.type);
    return be->fast && gw_cuda_matvec_of(w.type) && q && xs == w.n_in && ys == w.n_out && w.n_in % q->blck_size == 0 &&
           w.n_in % 8 == 0 && !(((uintptr_t)x | (uintptr_t)w.d) & 15) && w.n_out < INT32_MAX;
}

/* y (T × n_out, row stride ys) = W x (T rows of n_in at stride xs): the
 * reference kernel (double accumulation), or with kernels "fast" matvec.cu's
 * (fp32, up to 16 rows a launch) where they apply. */
int cu_matmul(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int T, float *y, int64_t ys)
{
    if (T <= 0) return 0;
    cudaStream_t st = be->st;
    if (fast_ok(be, w, x, xs, ys)) {
        const gw_cuda_matvec_fn fn = gw_cuda_matvec_of(w.type);
        char e[160];
        for (int t0 = 0; t0 < T; t0 += GW_CUDA_MAX_BATCH) {
            const int nb = T - t0 < GW_CUDA_MAX_BATCH ? T - t0 : GW_CUDA_MAX_BATCH;
            if (fn(w.d, (int)w.n_out, (int)w.n_in, x + (int64_t)t0 * xs, nb, y + (int64_t)t0 * ys, st, e, sizeof e)) {
                snprintf(g_msg, sizeof g_msg, "%s", e);
                return NB_EIO;
            }
        }
        return 0;
    }
    for (int t0 = 0; t0 < T; t0 += 65535 * MM_TT) { /* grid.y limit */
        int nt = T - t0 < 65535 * MM_TT ? T - t0 : 65535 * MM_TT;
        dim3 grid((unsigned)w.n_out, nblk(nt, MM_TT));
        k_matmul<<<grid, MM_THREADS, 0, st>>>(w, x + (int64_t)t0 * xs, xs, nt, y + (int64_t)t0 * ys, ys, NULL, 1, NULL, 0);
        CKL("k_matmul");
    }
    return 0;
}

/* Expert form: pair p uses the slot of expert eid[p] and x row p / xdiv; pairs without a slot skipped. */
int cu_matmul_pairs(cuda_backend *be, const dmat &w, const float *x, int64_t xs, int P, const int32_t *eid, int xdiv,
                    const int32_t *slot, float *y)
{
    cudaStream_t st = be->st;
    if (P <= 0) return 0;
    if (fast_ok(be, w, x, xs, w.n_out) && w.mat_bytes % 16 == 0) {
        char e[160];
        if (gw_cuda_matvec_pairs(w.type, w.d, w.mat_bytes, (int)w.n_out, (int)w.n_in, x, xdiv, eid, slot, P, y, st, e,
                                 sizeof e)) {
            snprintf(g_msg, sizeof g_msg, "%s", e);
            return NB_EIO;
        }
        return 0;
    }
    for (int p0 = 0; p0 < P; p0 += 65535) {
        int np = P - p0 < 65535 ? P - p0 : 65535;
        dim3 grid((unsigned)w.n_out, (unsigned)np);
        k_matmul<<<grid, MM_THREADS, 0, st>>>(w, x, xs, P, y, w.n_out, eid, xdiv, slot, p0);
        CKL("k_matmul (experts)");
    }
    return 0;
}

/* RMS norm of `groups` consecutive groups of n values per row; wgs: the
 * weight's stride between groups (n: a grouped [groups·n] weight, 0: shared). */
int cu_rms_rows(cudaStream_t st, const float *in, int64_t irs, float *out, int64_t ors, int rows, int64_t n, int groups,
                const float *w, int64_t wgs, float eps)
{
    if (rows <= 0) return 0;
    k_rms_norm<<<dim3((unsigned)rows, (unsigned)groups), nthr(n), 0, st>>>(in, irs, n, out, ors, n, n, w, wgs, eps);
    CKL("k_rms_norm");
    return 0;
}

int cu_rope(cuda_backend *be, float *x, int rows, int64_t rs, int heads, int64_t hs, int64_t pos0, int64_t pstep,
            const int64_t *dpos)
{
    const struct model_hparams *hp = &be->base.model->hp;
    if (rows <= 0 || hp->rope_dim < 2) return 0;
    k_rope<<<dim3((unsigned)rows, (unsigned)heads), nthr(hp->rope_dim / 2), 0, be->st>>>(
        x, rs, hs, hp->rope_dim, be->d_cos, be->d_sin, pos0, pstep, dpos);
    CKL("k_rope");
    return 0;
}

void cu_get_rows(unsigned blocks, int threads, cudaStream_t st, const dmat &w, const int32_t *rows, float *out,
                 int64_t os)
{
    k_get_rows<int32_t><<<blocks, threads, 0, st>>>(w, rows, out, os);
}

void cu_get_rows(unsigned blocks, int threads, cudaStream_t st, const dmat &w, const int64_t *rows, float *out,
                 int64_t os)
{
    k_get_rows<int64_t><<<blocks, threads, 0, st>>>(w, rows, out, os);
}

void cu_rms_norm(dim3 grid, int threads, cudaStream_t st, const float *in, int64_t irs, int64_t igs, float *out,
                 int64_t ors, int64_t ogs, int64_t n, const float *w, int64_t wgs, float eps)
{
    k_rms_norm<<<grid, threads, 0, st>>>(in, irs, igs, out, ors, ogs, n, w, wgs, eps);
}

void cu_conv_silu(unsigned blocks, int threads, cudaStream_t st, const float *w, int K, int dilation, int64_t ch,
                  float *state, const float *in, int T, float *out)
{
    k_conv_silu<<<blocks, threads, 0, st>>>(w, K, dilation, ch, state, in, T, out);
}
