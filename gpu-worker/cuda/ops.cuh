/* ops.cuh — the CUDA backend's kernels (included by backend_cuda.cu only).
 *
 * Every kernel follows the CPU reference (gpu-worker/cpu/) operation for
 * operation: weights are decoded to fp32 exactly as quant_ref.c decodes them,
 * dot products and reductions accumulate in double where the reference does,
 * and results are rounded to float where it rounds.  The file is compiled
 * with --fmad=false so that no multiply-add is fused that the CPU rounds
 * twice.  What differs is only the order of double-precision sums (a
 * parallel reduction instead of the CPU's four running sums), which almost
 * never changes the float that results: logits agree with the reference to
 * ~1e-7 relative, and greedy generation token for token.  Transcendentals
 * the CPU evaluates in float (powf, cosf, sinf for RoPE) are taken from host
 * tables made with the same libm calls; the others are evaluated in double
 * on both sides and rounded to float.
 *
 * Speed is not the point of this first version: one block per output row
 * (and per 8 activation rows) for matrices, one thread per value of a GDN
 * state column, one block per (query row, head) for attention. */
#ifndef NB_GW_CUDA_OPS_CUH
#define NB_GW_CUDA_OPS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "core/quant/quant.h"
#include "engine/vram.h"
}
#include "gpu-worker/mailbox.h"
#include "core/quant/quant_blocks.h"
#include "gpu-worker/cuda/dec_lowbit.cuh"

/* A weight matrix on the device: n_out rows of n_in values of `type`
 * (enum quant_type numbers); expert e of a 3-D tensor at e·mat_bytes. */
struct dmat {
    const uint8_t *d;
    int type;
    int64_t n_in, n_out;
    size_t row_bytes, mat_bytes;
};

/* Formats with a device decoder: the rows of gpu-worker/cuda/cuda_types.h
 * (others are widened to F32 at upload).  d_wval has a case for each. */
static inline bool dev_decodes(int t) { return gw_vram_native_type(t); }

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

/* ---------- reductions ---------- */

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets it. */
static __device__ double block_sum(double v)
{
    __shared__ double part[32];
    __shared__ double total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

static __device__ float block_max(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (int)(blockDim.x >> 5) ? part[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_down_sync(0xffffffffu, s, o));
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

static __device__ __forceinline__ float d_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
static __device__ __forceinline__ float d_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }
static __device__ __forceinline__ float d_softplus(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

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

/* ---------- norms, RoPE, elementwise ---------- */

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
static __device__ __forceinline__ void d_rope(float *v, int rope_dim, const float *cosv, const float *sinv, int64_t pos)
{
    const int half = rope_dim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double c = cosv[pos * half + i], s = sinv[pos * half + i];
        double a = v[i], b = v[i + half];
        v[i] = (float)(a * c - b * s);
        v[i + half] = (float)(b * c + a * s);
    }
}

__global__ void k_rope(float *x, int64_t rs, int64_t hs, int rope_dim, const float *cosv, const float *sinv, int64_t pos0,
                       int64_t pstep, const int64_t *dpos)
{
    const int64_t pos = pos0 + (dpos ? *dpos : 0) + (int64_t)blockIdx.x * pstep;
    d_rope(x + blockIdx.x * rs + blockIdx.y * hs, rope_dim, cosv, sinv, pos);
}

/* dst row slot0 (+ *dpos) + t = src row t, for T rows of `width` (K/V and raw indexer keys into their caches). */
__global__ void k_store_rows(const float *src, int T, int64_t width, float *dst, int64_t slot0, const int64_t *dpos)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * width) return;
    const int64_t base = slot0 + (dpos ? *dpos : 0);
    dst[(base + idx / width) * width + idx % width] = src[idx];
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

__global__ void k_silu_div(float *v, int64_t n, float div)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) v[i] = d_silu(v[i] / div);
}

/* inj = 2·sigmoid(inj / n) */
__global__ void k_inject(float *v, int64_t n, float div)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) v[i] = 2.0f * d_sigmoid(v[i] / div);
}

/* g = silu(g) · u */
__global__ void k_swiglu(float *g, const float *u, int64_t n)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) g[i] = d_silu(g[i]) * u[i];
}

/* x[t][c] = (Σ_i sigmoid(gate[t][iC+c]) · xn[t][iC+c]) / n  (hc mix) */
__global__ void k_hc_mean(const float *xn, const float *gate, int T, int n, int64_t C, float *x)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    int64_t t = idx / C, c = idx % C;
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)d_sigmoid(gate[t * n * C + i * C + c]) * xn[t * n * C + i * C + c];
    x[idx] = (float)(s / n);
}

/* X[t][iC+c] += inj[t][i] · y[t][c] */
__global__ void k_hc_add(float *X, const float *y, const float *inj, int T, int n, int64_t C)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * n * C) return;
    int64_t t = idx / (n * C), i = (idx / C) % n, c = idx % C;
    X[idx] += inj[t * n + i] * y[t * C + c];
}

/* X[t] stream i = row t of e, for every stream (the embedding in the wide residual) */
__global__ void k_broadcast_streams(const float *e, int T, int n, int64_t C, float *X)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * n * C) return;
    int64_t t = idx / (n * C), c = idx % C;
    X[idx] = e[t * C + c];
}

/* ---------- GDN ----------
 * q and k heads are Dk wide, v and the outputs Dv wide; a value head's state
 * is Dk × Dv, row-major (element (i, j) at i·Dv + j), as on the CPU.  No
 * kernel assumes Dk or Dv a multiple of 32: threads past a size idle. */

/* Per (row t, head): L2-normalise q (× 1/√Dk) and k heads in place in the conv
 * output, squash beta and g.  grid (T, max(Hk, Hv)); blockDim.x = 32·k. */
__global__ void k_gdn_prep(float *mixed, int64_t conv_dim, int Hk, int Hv, int Dk, float qscale, float *g, float *beta,
                           const float *a, const float *dt_bias)
{
    const int t = blockIdx.x, h = blockIdx.y;
    if (h < Hk) {
        for (int which = 0; which < 2; which++) {
            float *v = mixed + (int64_t)t * conv_dim + (int64_t)which * Hk * Dk + (int64_t)h * Dk;
            double ss = 0;
            for (int i = threadIdx.x; i < Dk; i += blockDim.x) ss += (double)v[i] * v[i];
            ss = block_sum(ss);
            const float inv = (float)(1.0 / sqrt(ss + 1e-6)), sc = which == 0 ? qscale : 1.0f;
            for (int i = threadIdx.x; i < Dk; i += blockDim.x) v[i] = v[i] * inv * sc;
        }
    }
    if (h < Hv && threadIdx.x == 0) {
        const int64_t r = (int64_t)t * Hv + h;
        beta[r] = d_sigmoid(beta[r]);
        g[r] = a[h] * d_softplus(g[r] + dt_bias[h]);
    }
}

/* The recurrent delta rule (cpu_gdn_core_recurrent): block = value head,
 * thread j = value column j of the head's state (Dk values), which only that
 * thread touches; blockDim ≥ Dv.  q, k, v rows at stride rs (the conv
 * output); out T × Hv × Dv. */
__global__ void k_gdn_recurrent(int Hk, int Hv, int Dk, int Dv, int T, const float *q, const float *k, const float *v,
                                int64_t rs, const float *g, const float *beta, float *state, float *out)
{
    const int h = blockIdx.x, j = threadIdx.x, kh = h % Hk;
    if (j >= Dv) return;
    float *S = state + (size_t)h * Dk * Dv;
    for (int t = 0; t < T; t++) {
        const float *qt = q + t * rs + (int64_t)kh * Dk, *kt = k + t * rs + (int64_t)kh * Dk;
        const float *vt = v + t * rs + (int64_t)h * Dv;
        const float decay = (float)exp((double)g[(int64_t)t * Hv + h]), b = beta[(int64_t)t * Hv + h];
        for (int i = 0; i < Dk; i++) S[i * Dv + j] *= decay;
        double kv = 0;
        for (int i = 0; i < Dk; i++) kv += (double)S[i * Dv + j] * kt[i];
        const float delta = (float)((vt[j] - kv) * b);
        for (int i = 0; i < Dk; i++) S[i * Dv + j] += kt[i] * delta;
        double o = 0;
        for (int i = 0; i < Dk; i++) o += (double)S[i * Dv + j] * qt[i];
        out[((int64_t)t * Hv + h) * Dv + j] = (float)o;
    }
}

/* The same recurrence with each thread's state column (Dk values) in
 * registers: read once and written once per call instead of four passes over
 * memory per token, and the Dv columns of a head spread over blockDim-sized
 * groups (grid Hv × ⌈Dv / blockDim⌉) so every SM has work.  The operations
 * and their order per column are k_gdn_recurrent's (the decay before the k·S
 * sum, the update before the q·S sum, doubles where it accumulates in
 * double), so the results are its results.  For Dk ≤ DMAX (Dv is free). */
template <int DMAX>
__global__ void k_gdn_recurrent_cols(int Hk, int Hv, int Dk, int Dv, int T, const float *q, const float *k,
                                     const float *v, int64_t rs, const float *g, const float *beta, float *state,
                                     float *out)
{
    const int h = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x, kh = h % Hk;
    if (j >= Dv) return;
    float *S = state + (size_t)h * Dk * Dv;
    float s[DMAX];
#pragma unroll
    for (int i = 0; i < DMAX; i++)
        if (i < Dk) s[i] = S[i * Dv + j];
    for (int t = 0; t < T; t++) {
        const float *qt = q + t * rs + (int64_t)kh * Dk, *kt = k + t * rs + (int64_t)kh * Dk;
        const float *vt = v + t * rs + (int64_t)h * Dv;
        const float decay = (float)exp((double)g[(int64_t)t * Hv + h]), b = beta[(int64_t)t * Hv + h];
        double kv = 0;
#pragma unroll
        for (int i = 0; i < DMAX; i++)
            if (i < Dk) {
                s[i] *= decay;
                kv += (double)s[i] * kt[i];
            }
        const float delta = (float)((vt[j] - kv) * b);
        double o = 0;
#pragma unroll
        for (int i = 0; i < DMAX; i++)
            if (i < Dk) {
                s[i] += kt[i] * delta;
                o += (double)s[i] * qt[i];
            }
        out[((int64_t)t * Hv + h) * Dv + j] = (float)o;
    }
#pragma unroll
    for (int i = 0; i < DMAX; i++)
        if (i < Dk) S[i * Dv + j] = s[i];
}

/* The chunked form (cpu_gdn_core_chunked / chunk_step), block = value head,
 * thread c = value column c of the state and, where c < Dk, key column c of
 * W; blockDim ≥ max(Dk, Dv).  Scratch per head: cum, dec (chunk doubles),
 * A (chunk²), U (chunk × Dv), W (chunk × Dk floats). */
__global__ void k_gdn_chunked(int Hk, int Hv, int Dk, int Dv, int T, int chunk, const float *q, const float *k,
                              const float *v, int64_t rs, const float *g, const float *beta, float *state, float *out,
                              double *dscr, float *fscr)
{
    const int h = blockIdx.x, c = threadIdx.x, kh = h % Hk;
    double *cum = dscr + (size_t)h * 2 * chunk, *dec = cum + chunk;
    float *A = fscr + (size_t)h * (chunk * chunk + chunk * (Dv + Dk)), *U = A + chunk * chunk, *W = U + chunk * Dv;
    float *S = state + (size_t)h * Dk * Dv;
    for (int c0 = 0; c0 < T; c0 += chunk) {
        const int L = T - c0 < chunk ? T - c0 : chunk;
#define QROW(i) (q + (int64_t)(c0 + (i)) * rs + (int64_t)kh * Dk)
#define KROW(i) (k + (int64_t)(c0 + (i)) * rs + (int64_t)kh * Dk)
#define GV(i) g[(int64_t)(c0 + (i)) * Hv + h]
#define BV(i) beta[(int64_t)(c0 + (i)) * Hv + h]
        if (threadIdx.x == 0) {
            double run = 0;
            for (int i = 0; i < L; i++) cum[i] = run += GV(i);
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < L * L; idx += blockDim.x) {
            int i = idx / L, j = idx % L;
            if (j >= i) continue;
            double d = 0;
            for (int a = 0; a < Dk; a++) d += (double)KROW(i)[a] * KROW(j)[a];
            A[i * L + j] = (float)(BV(i) * d * exp(cum[i] - cum[j]));
        }
        __syncthreads();
        /* column c of U (c < Dv) and of W (c < Dk): each only reads its own column */
        if (c < Dv)
            for (int i = 0; i < L; i++) {
                const float *vi = v + (int64_t)(c0 + i) * rs + (int64_t)h * Dv;
                double u = (double)BV(i) * vi[c];
                for (int j = 0; j < i; j++) u -= (double)A[i * L + j] * U[j * Dv + c];
                U[i * Dv + c] = (float)u;
            }
        if (c < Dk)
            for (int i = 0; i < L; i++) {
                double w = (double)BV(i) * exp(cum[i]) * KROW(i)[c];
                for (int j = 0; j < i; j++) w -= (double)A[i * L + j] * W[j * Dk + c];
                W[i * Dk + c] = (float)w;
            }
        __syncthreads();
        if (c < Dv)
            for (int i = 0; i < L; i++) {
                double s = 0;
                for (int a = 0; a < Dk; a++) s += (double)W[i * Dk + a] * S[a * Dv + c];
                U[i * Dv + c] -= (float)s;
            }
        __syncthreads();
        for (int idx = threadIdx.x; idx < L * L; idx += blockDim.x) {
            int i = idx / L, j = idx % L;
            if (j > i) continue;
            double d = 0;
            for (int a = 0; a < Dk; a++) d += (double)QROW(i)[a] * KROW(j)[a];
            A[i * L + j] = (float)(d * exp(cum[i] - cum[j]));
        }
        __syncthreads();
        if (c < Dv)
            for (int i = 0; i < L; i++) {
                double inter = 0, intra = 0;
                for (int a = 0; a < Dk; a++) inter += (double)QROW(i)[a] * S[a * Dv + c];
                for (int j = 0; j <= i; j++) intra += (double)A[i * L + j] * U[j * Dv + c];
                out[((int64_t)(c0 + i) * Hv + h) * Dv + c] = (float)(exp(cum[i]) * inter + intra);
            }
        __syncthreads();
        const double last = cum[L - 1];
        if (threadIdx.x == 0)
            for (int i = 0; i < L; i++) dec[i] = exp(last - cum[i]);
        __syncthreads();
        if (c < Dv)
            for (int a = 0; a < Dk; a++) {
                double s = exp(last) * S[a * Dv + c];
                for (int i = 0; i < L; i++) s += dec[i] * KROW(i)[a] * U[i * Dv + c];
                S[a * Dv + c] = (float)s;
            }
        __syncthreads();
#undef QROW
#undef KROW
#undef GV
#undef BV
    }
}

/* Gated RMS norm of each (row, value head) of o, D = Dv values: rms(o)·w,
 * × sigmoid(z), or × silu(z) when `silu` (ssm.output_gate).  grid T·Hv. */
__global__ void k_gated_norm(float *o, const float *z, int D, const float *w, float eps, bool silu)
{
    float *x = o + (int64_t)blockIdx.x * D;
    const float *zz = z + (int64_t)blockIdx.x * D;
    double ss = 0;
    for (int i = threadIdx.x; i < D; i += blockDim.x) ss += (double)x[i] * x[i];
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float r = x[i] * scale * w[i];
        x[i] = r * (silu ? zz[i] * d_sigmoid(zz[i]) : d_sigmoid(zz[i]));
    }
}

/* ---------- attention and the QSA indexer ---------- */

/* Block key b = nb0 + blockIdx.x (cpu indexer_prepare): RMS(mean of its cr
 * raw keys)·w, rotated at position b·cr.  With dpos (a graph's one-token
 * step) the block is the one that completes at position *dpos, if any.
 * Dynamic shared memory: Di floats. */
__global__ void k_block_key(const float *idx_k, int Di, int cr, int64_t nb0, const int64_t *dpos, float *blk_k,
                            const float *w, float eps, int rope_dim, const float *cosv, const float *sinv)
{
    extern __shared__ float kb[];
    int64_t b = nb0 + blockIdx.x;
    if (dpos) {
        if ((*dpos + 1) % cr != 0) return;
        b = (*dpos + 1) / cr - 1;
    }
    double ss = 0;
    for (int d = threadIdx.x; d < Di; d += blockDim.x) {
        double s = 0;
        for (int j = 0; j < cr; j++) s += idx_k[(b * cr + j) * Di + d];
        kb[d] = (float)(s / cr);
        ss += (double)kb[d] * kb[d];
    }
    ss = block_sum(ss);
    const float scale = (float)(1.0 / sqrt(ss / (double)Di + (double)eps));
    float *out = blk_k + b * Di;
    for (int d = threadIdx.x; d < Di; d += blockDim.x) out[d] = kb[d] * scale * w[d];
    __syncthreads();
    d_rope(out, rope_dim, cosv, sinv, b * cr);
}

/* Scores of the B blocks for query row t: Σ_h ReLU(q_h·K_b)/√Di.  With dpos
 * (one row at position *dpos) B = (*dpos + 1) / cr. */
__global__ void k_block_scores(const float *qi, int Hi, int Di, const float *blk_k, int64_t B, int64_t bstride,
                               float *scores, int cr, const int64_t *dpos)
{
    const int t = blockIdx.y;
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (dpos) B = (*dpos + 1) / cr;
    if (b >= B) return;
    const double inv = 1.0 / sqrt((double)Di);
    double s = 0;
    for (int h = 0; h < Hi; h++) {
        const float *qh = qi + ((int64_t)t * Hi + h) * Di, *kb = blk_k + b * Di;
        double d = 0;
        for (int i = 0; i < Di; i++) d += (double)qh[i] * kb[i];
        s += d > 0 ? d : 0;
    }
    scores[t * bstride + b] = (float)(s * inv);
}

/* keep[t][b] = 1 for the `top` best blocks of row t: by score, ties to the lower index. */
__global__ void k_block_keep(const float *scores, int64_t B, int64_t bstride, int64_t top, uint8_t *keep, int cr,
                             const int64_t *dpos)
{
    const int t = blockIdx.y;
    const int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (dpos) B = (*dpos + 1) / cr;
    if (b >= B) return;
    const float *s = scores + t * bstride;
    const float sb = s[b];
    int64_t rank = 0;
    for (int64_t o = 0; o < B; o++) rank += s[o] > sb || (s[o] == sb && o < b);
    keep[t * bstride + b] = rank < top;
}

/* One query row × one head: scores over the visible slots, softmax, weighted
 * values, × sigmoid(gate).  Row t sees slots 0..slot0+t, restricted (when
 * keep != NULL and the row has more than `top` complete blocks) to its kept
 * blocks plus its incomplete tail.  grid (rows, Hq); p holds pstride ≥ n_ctx
 * floats per (row, head). */
__global__ void k_attend(const float *q, const float *qg, int64_t qg_rs, const float *kc, const float *vc, int Hq,
                         int Hkv, int D, int64_t slot0, int64_t pos0, int cr, int64_t top, const uint8_t *keep,
                         int64_t bstride, float *p, int64_t pstride, float *out, const int64_t *dpos)
{
    if (dpos) slot0 += *dpos, pos0 += *dpos; /* a replayed graph: the position lives on the device */
    const int t = blockIdx.x, h = blockIdx.y, group = Hq / Hkv;
    const int64_t kvw = (int64_t)Hkv * D, kvo = (int64_t)(h / group) * D, last = slot0 + t;
    const float *qh = q + ((int64_t)t * Hq + h) * D;
    float *ph = p + ((int64_t)t * Hq + h) * pstride;
    bool sparse = false;
    int64_t B = 0;
    if (cr > 0) {
        const int64_t pos = pos0 + t;
        B = (pos + 1) / cr;
        sparse = B > top;
    }
    const uint8_t *kp = keep ? keep + (int64_t)t * bstride : NULL;
#define SELECTED(i) (!sparse || (i) >= B * cr || kp[(i) / cr])
    const double scale = 1.0 / sqrt((double)D);
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x) {
        if (!SELECTED(i)) continue;
        const float *kk = kc + i * kvw + kvo;
        double d = 0;
        for (int a = 0; a < D; a++) d += (double)qh[a] * kk[a];
        float s = (float)(d * scale);
        ph[i] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx);
    double sum = 0;
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x)
        if (SELECTED(i)) sum += exp((double)ph[i] - mx);
    sum = block_sum(sum);
    for (int64_t i = threadIdx.x; i <= last; i += blockDim.x)
        if (SELECTED(i)) ph[i] = (float)(exp((double)ph[i] - mx) / sum);
    __syncthreads();
    const float *gate = qg + (int64_t)t * qg_rs + (int64_t)h * 2 * D + D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i <= last; i++)
            if (SELECTED(i)) acc += (double)ph[i] * vc[i * kvw + kvo + d];
        out[((int64_t)t * Hq + h) * D + d] = (float)acc * d_sigmoid(gate[d]);
    }
#undef SELECTED
}

/* ---------- PLE ---------- */

/* G[t][iC+j] = sigmoid(signed √|⟨key_i, Gn_i⟩/√C|) · value[t][j].  grid (T, n). */
__global__ void k_ple_gate(const float *key, const float *qn, const float *value, int n, int64_t C, float *G)
{
    const int t = blockIdx.x, i = blockIdx.y;
    const float *kt = key + ((int64_t)t * n + i) * C, *qt = qn + ((int64_t)t * n + i) * C;
    double d = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) d += (double)kt[j] * qt[j];
    d = block_sum(d);
    const double s = d / sqrt((double)C);
    const double a = fabs(s) > 1e-6 ? fabs(s) : 1e-6;
    const float gate = d_sigmoid((float)(sqrt(a) * (s > 0 ? 1 : s < 0 ? -1 : 0)));
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) G[((int64_t)t * n + i) * C + j] = gate * value[(int64_t)t * C + j];
}

/* X += G + conv */
__global__ void k_add2(float *X, const float *G, const float *cv, int64_t n)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) X[i] += G[i] + cv[i];
}

/* ---------- MoE ---------- */

/* Softmax of one token's E router logits (in place), top k (ties to the lower
 * expert), renormalised when asked.  One block per token, E floats of dynamic
 * shared memory. */
__global__ void k_route(float *probs, int E, int k, int norm, int32_t *ids, float *wts)
{
    extern __shared__ float sp[];
    __shared__ float bv[32];
    __shared__ int bi[32];
    float *x = probs + (int64_t)blockIdx.x * E;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, x[e]);
    mx = block_max(mx);
    double sum = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) sum += exp((double)x[e] - mx);
    sum = block_sum(sum);
    for (int e = threadIdx.x; e < E; e += blockDim.x) sp[e] = x[e] = (float)(exp((double)x[e] - mx) / sum);
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int j = 0; j < k; j++) {
        float best = -INFINITY;
        int be = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (sp[e] >= 0 && (be < 0 || sp[e] > best)) best = sp[e], be = e; /* ascending e: first max kept */
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, best, o);
            int oe = __shfl_down_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ov > best || (ov == best && oe < be))) best = ov, be = oe;
        }
        if (lane == 0) bv[warp] = best, bi[warp] = be;
        __syncthreads();
        if (threadIdx.x == 0) {
            float b = -INFINITY;
            int e = -1;
            for (int w = 0; w < nw; w++)
                if (bi[w] >= 0 && (e < 0 || bv[w] > b || (bv[w] == b && bi[w] < e))) b = bv[w], e = bi[w];
            ids[blockIdx.x * k + j] = e;
            wts[blockIdx.x * k + j] = b;
            sp[e] = -1.0f; /* taken (probabilities are ≥ 0) */
        }
        __syncthreads();
    }
    if (norm && threadIdx.x == 0) {
        double s = 0;
        for (int j = 0; j < k; j++) s += wts[blockIdx.x * k + j];
        for (int j = 0; j < k; j++) wts[blockIdx.x * k + j] = (float)(wts[blockIdx.x * k + j] / s);
    }
}

/* contrib[p] = wts[p] · d[p] for the resident pairs (remote ones are written by the host) */
__global__ void k_scale_pairs(const float *d, const float *wts, const int32_t *ids, const int32_t *slot, int P,
                              int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)P * C) return;
    int64_t p = idx / C;
    if (slot[ids[p]] < 0) return;
    contrib[idx] = wts[p] * d[idx];
}

/* The misses of a layer's P pairs (k per row), in ascending pair order: out[0]
 * = their count m; then out[1 …] rows, out[1+P …] expert ids, out[1+2P …]
 * pair indices (m of each), and ow[0 … m) their weights.  One block of
 * SPLIT_THREADS threads, each taking a contiguous run of pairs. */
#define SPLIT_THREADS 1024
__global__ void k_split(const int32_t *ids, const float *wts, const int32_t *slot, int P, int k, int32_t *out, float *ow)
{
    __shared__ int start[SPLIT_THREADS];
    const int per = (P + SPLIT_THREADS - 1) / SPLIT_THREADS, a = threadIdx.x * per, b = a + per < P ? a + per : P;
    int c = 0;
    for (int p = a; p < b; p++) c += slot[ids[p]] < 0;
    start[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0;
        for (int i = 0; i < SPLIT_THREADS; i++) {
            int n = start[i];
            start[i] = sum;
            sum += n;
        }
        out[0] = sum;
    }
    __syncthreads();
    int o = start[threadIdx.x];
    for (int p = a; p < b; p++)
        if (slot[ids[p]] < 0) {
            out[1 + o] = p / k, out[1 + P + o] = ids[p], out[1 + 2 * P + o] = p, ow[o] = wts[p];
            o++;
        }
}

/* out[r] = the index of the largest of the V values of row r (the first of
 * equal ones), one block of ARGMAX_THREADS per row. */
#define ARGMAX_THREADS 256
__global__ void k_argmax(const float *v, int64_t V, int32_t *out)
{
    __shared__ float bv[ARGMAX_THREADS];
    __shared__ int64_t bi[ARGMAX_THREADS];
    const float *x = v + (int64_t)blockIdx.x * V;
    float best = -INFINITY;
    int64_t at = -1;
    for (int64_t i = threadIdx.x; i < V; i += ARGMAX_THREADS)
        if (at < 0 || x[i] > best) best = x[i], at = i; /* ascending i: the first of equals kept */
    bv[threadIdx.x] = best, bi[threadIdx.x] = at;
    __syncthreads();
    for (int s = ARGMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = bv[threadIdx.x + s];
            const int64_t oi = bi[threadIdx.x + s];
            if (oi >= 0 && (bi[threadIdx.x] < 0 || ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])))
                bv[threadIdx.x] = ov, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (int32_t)bi[0];
}

/* contrib[slot[i]] = remote[i] */
__global__ void k_scatter_rows(const float *src, const int32_t *slot, int n, int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    contrib[(int64_t)slot[idx / C] * C + idx % C] = src[idx];
}

/* ---- the doorbell: remote experts inside the stream (backend_cuda.cu, "mailbox") ----
 *
 * The mailbox is pinned host memory mapped into the device; its protocol is
 * gpu-worker/mailbox.h's, whose step functions these kernels run.  k_mb_post
 * (one block) writes a layer's misses (k_split's list) and its rows of x
 * there, then — after a system-wide fence — the request's number into
 * `posted`; the backend's remote thread runs the gw_moe_remote hook into
 * `out` and stores the number into `done`; k_mb_wait (one thread) spins on
 * `done` inside the stream, so the host never waits between layers and a
 * step with remote experts can be a CUDA graph; k_mb_scatter then reads the
 * results over PCIe into their pairs' contribution rows.  A layer without
 * misses posts nothing and waits for nothing (want = 0). */
#define MB_POST_THREADS 1024
__global__ void k_mb_post(const int32_t *split, const float *splitw, const float *x, int T, int64_t C, int P, int layer,
                          mb_head *h, int32_t *mrows, int32_t *mexp, float *mw, float *mx, unsigned int *seq,
                          unsigned int *want)
{
    /* nothing missed, the eval failed already (its host side answers nothing
     * more) or the counts out of step: one decision for the whole block */
    __shared__ int open;
    const int n = split[0];
    if (threadIdx.x == 0) {
        open = mb_post_open(h, seq, n);
        if (!open) *want = 0;
    }
    __syncthreads();
    if (!open) return;
    for (int64_t i = threadIdx.x; i < (int64_t)T * C; i += MB_POST_THREADS) mx[i] = x[i];
    for (int i = threadIdx.x; i < n; i += MB_POST_THREADS)
        mrows[i] = split[1 + i], mexp[i] = split[1 + P + i], mw[i] = splitw[i];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) mb_post_publish(h, seq, want, layer, T, n);
}

/* Waits until the host answered request *want (none: returns at once); a
 * request the host cannot see or no thread takes fails at once (lost), one
 * whose hook does not return gives up after MB_WAIT_NS (timed_out), so the
 * eval fails instead of hanging the GPU. */
__global__ void k_mb_wait(mb_head *h, const unsigned int *want) { mb_wait_answer(h, *want, MB_PICKUP_NS, MB_WAIT_NS); }

/* contrib[pair of miss i] = out[i] for the split's n misses (split[1 + 2P + i]: the pair). */
__global__ void k_mb_scatter(const float *out, const int32_t *split, int P, int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)split[0] * C) return;
    contrib[(int64_t)split[1 + 2 * P + idx / C] * C + idx % C] = ((const volatile float *)out)[idx];
}

/* y[t][c] = Σ of the k contributions in ascending expert order (float adds, from 0). */
__global__ void k_expert_sum(const float *contrib, const int32_t *ids, int T, int k, int64_t C, float *y)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    int64_t t = idx / C, c = idx % C;
    int order[GW_CUDA_MAX_EXPERT_USED];
    for (int j = 0; j < k; j++) order[j] = j;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && ids[t * k + order[b]] < ids[t * k + order[b - 1]]; b--) {
            int tmp = order[b];
            order[b] = order[b - 1], order[b - 1] = tmp;
        }
    float s = 0;
    for (int j = 0; j < k; j++) s += contrib[(t * k + order[j]) * C + c];
    y[idx] = s;
}

/* sc[t] = sigmoid(w · x_t) */
__global__ void k_shexp_gate(const float *w, const float *x, int64_t C, float *sc)
{
    const float *xt = x + (int64_t)blockIdx.x * C;
    double d = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) d += (double)w[i] * xt[i];
    d = block_sum(d);
    if (threadIdx.x == 0) sc[blockIdx.x] = d_sigmoid((float)d);
}

/* y[t][c] += sc[t] · d[t][c] */
__global__ void k_add_scaled(float *y, const float *d, const float *sc, int T, int64_t C)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx < (int64_t)T * C) y[idx] += sc[idx / C] * d[idx];
}

#endif
