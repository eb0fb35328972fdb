/* gdn.cu — the GDN (gated delta net) linear-attention layer on the device
 * (engine/cpu/gdn.c's twin): projections, the causal conv, the
 * normalised q/k with squashed beta and g, the delta rule, the gated norm.
 *
 * The one idea: the recurrent state of a value head is Dk × Dv and each of
 * its Dv columns is touched by one thread only, so the decode step — and a
 * verify window, token by token, keeping what rollback.cu replays — keeps a
 * column in registers (k_gdn_recurrent_cols, Dk ≤ 128) and prefill runs the
 * chunked form (k_gdn_chunked) with max(Dk, Dv) threads per head; both do
 * the CPU's operations in the CPU's order. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

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

/* ---------- the layer ---------- */

/* T steps of the recurrence: the register kernel where a state column of Dk floats fits, else the plain one. */
int cu_gdn_recurrence(cuda_backend *be, int T, const float *mixed, int64_t rs, const float *g, const float *beta,
                      float *state, float *out)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, Dk = hp->ssm_k_head_dim, Dv = hp->ssm_v_head_dim;
    const int64_t kdim = model_gdn_k_dim(hp);
    const float *q = mixed, *k = mixed + kdim, *v = mixed + 2 * kdim;
    if (T <= 0) return 0;
    if (Dk <= 128) {
        k_gdn_recurrent_cols<128><<<dim3((unsigned)Hv, (unsigned)((Dv + 31) / 32)), 32, 0, be->st>>>(
            Hk, Hv, Dk, Dv, T, q, k, v, rs, g, beta, state, out);
        CKL("k_gdn_recurrent_cols");
    } else {
        k_gdn_recurrent<<<Hv, (Dv + 31) / 32 * 32, 0, be->st>>>(Hk, Hv, Dk, Dv, T, q, k, v, rs, g, beta, state, out);
        CKL("k_gdn_recurrent");
    }
    return 0;
}

/* A decode step (T = 1) and a verify window (token by token, so each row is
 * the decode step's and rollback.cu replays the same kernel on the same
 * inputs) run the recurrent form, a prefill the chunked one. */
int cu_gdn_forward(cuda_backend *be, const cu_layer *c, cu_lstate *ls, const float *x, int T, bool verify, float *y)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int Hk = hp->ssm_n_k_heads, Hv = hp->ssm_n_v_heads, Dk = hp->ssm_k_head_dim, Dv = hp->ssm_v_head_dim;
    const int64_t conv_dim = model_gdn_conv_dim(hp), vdim = model_gdn_v_dim(hp), kdim = model_gdn_k_dim(hp), C = hp->n_embd;
    cudaStream_t st = be->st;
    const cu_ck_rows ck = verify ? cu_ck_rows_of(hp, ls->ck_in) : cu_ck_rows{};
    tmp t = tmp_begin(be);
    float *qkv, *mixed, *z, *o, *g, *beta;
    int rc = verify && (T > GW_VERIFY_ROWS || !ls->ck_in) ? NB_EINVAL : 0;
    if (rc) snprintf(g_msg, sizeof g_msg, "a verify window of %d rows without its checkpoint", T);
    if (rc == 0) rc = cu_talloc(&t, &qkv, T * conv_dim);
    if (rc == 0) rc = cu_talloc(&t, &mixed, T * conv_dim);
    if (rc == 0) rc = cu_talloc(&t, &z, T * vdim);
    if (rc == 0) rc = cu_talloc(&t, &o, T * vdim);
    if (rc == 0) rc = cu_talloc(&t, &g, (int64_t)T * Hv);
    if (rc == 0) rc = cu_talloc(&t, &beta, (int64_t)T * Hv);
    if (rc == 0) rc = cu_matmul(be, c->qkv, x, C, T, qkv, conv_dim);
    if (rc == 0) rc = cu_matmul(be, c->z, x, C, T, z, vdim);
    if (rc == 0) rc = cu_matmul(be, c->beta, x, C, T, beta, Hv);
    if (rc == 0) rc = cu_matmul(be, c->alpha, x, C, T, g, Hv);
    cudaError_t e = cudaSuccess;
    if (rc == 0 && verify) { /* before the state moves: both states, and the conv's input rows */
        e = cu_dcopy_async(ls->ck_conv, ls->conv, model_gdn_conv_state_floats(hp), st);
        if (e == cudaSuccess) e = cu_dcopy_async(ls->ck_ssm, ls->ssm, model_gdn_ssm_state_floats(hp), st);
        if (e == cudaSuccess) e = cu_dcopy_async(ck.qkv, qkv, T * conv_dim, st);
        if (e != cudaSuccess) rc = cu_fail(e, "verify checkpoint (GDN state)", __LINE__);
    }
    if (rc == 0) {
        cu_conv_silu(nblk(conv_dim, 128), 128, st, c->gdn_conv, hp->ssm_conv_kernel, 1, conv_dim, ls->conv, qkv, T,
                     mixed);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_conv_silu", __LINE__);
    }
    if (rc == 0) {
        k_gdn_prep<<<dim3((unsigned)T, (unsigned)(Hk > Hv ? Hk : Hv)), nthr(Dk), 0, st>>>(
            mixed, conv_dim, Hk, Hv, Dk, 1.0f / sqrtf((float)Dk), g, beta, c->gdn_a, c->dt_bias);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_prep", __LINE__);
    }
    if (rc == 0 && verify) { /* the recurrence's inputs */
        e = cu_dcopy_async(ck.mixed, mixed, T * conv_dim, st);
        if (e == cudaSuccess) e = cu_dcopy_async(ck.g, g, (int64_t)T * Hv, st);
        if (e == cudaSuccess) e = cu_dcopy_async(ck.beta, beta, (int64_t)T * Hv, st);
        if (e != cudaSuccess) rc = cu_fail(e, "verify checkpoint (GDN inputs)", __LINE__);
    }
    if (rc == 0 && (T == 1 || verify)) {
        rc = cu_gdn_recurrence(be, T, mixed, conv_dim, g, beta, ls->ssm, o);
    } else if (rc == 0) {
        const float *q = mixed, *k = mixed + kdim, *v = mixed + 2 * kdim;
        const int ch = CPU_GDN_CHUNK, Dmax = Dk > Dv ? Dk : Dv;
        float *fs, *ds;
        rc = cu_talloc(&t, &fs, (int64_t)Hv * (ch * ch + ch * (Dk + Dv)));
        if (rc == 0) rc = cu_talloc(&t, &ds, (int64_t)Hv * 2 * ch * 2); /* doubles */
        if (rc == 0) {
            k_gdn_chunked<<<Hv, (Dmax + 31) / 32 * 32, 0, st>>>(Hk, Hv, Dk, Dv, T, ch, q, k, v, conv_dim, g, beta,
                                                                 ls->ssm, o, (double *)ds, fs);
            if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gdn_chunked", __LINE__);
        }
    }
    if (rc == 0) {
        k_gated_norm<<<(unsigned)(T * Hv), nthr(Dv), 0, st>>>(o, z, Dv, c->gdn_norm, hp->rms_eps, hp->ssm_gate_silu);
        if ((e = cudaGetLastError()) != cudaSuccess) rc = cu_fail(e, "k_gated_norm", __LINE__);
    }
    if (rc == 0) rc = cu_matmul(be, c->gdn_out, o, vdim, T, y, C);
    return cu_tdone(&t, rc);
}
