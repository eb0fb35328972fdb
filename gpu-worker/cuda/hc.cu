/* hc.cu — hyper-connections on the device (engine/cpu/hc.c's twin): the
 * mixer that reads a sublayer's input x (and the injection weights) from the
 * wide residual X of hc_count streams, and the combine that adds the
 * sublayer's output back into every stream. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

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

/* ---------- the mixer and the combine ---------- */

/* hc mixer: x (T × C) and inj (T × n; NULL for the head mixer) from X. */
int cu_hc_mix(cuda_backend *be, const cu_hc *h, const float *X, int T, float *x, float *inj)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp), r = hp->hc_rank;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *xn, *lo, *gate;
    int rc = cu_talloc(&t, &xn, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &lo, T * r);
    if (rc == 0) rc = cu_talloc(&t, &gate, T * wide);
    if (rc == 0) rc = cu_rms_rows(st, X, wide, xn, wide, T, C, n, h->norm, C, hp->rms_eps);
    if (rc == 0) rc = cu_matmul(be, h->down, xn, wide, T, lo, r);
    if (rc == 0) {
        k_silu_div<<<nblk(T * r, 256), 256, 0, st>>>(lo, T * r, (float)n);
        rc = LCHK("k_silu_div");
    }
    if (rc == 0) rc = cu_matmul(be, h->up, lo, r, T, gate, wide);
    if (rc == 0) {
        k_hc_mean<<<nblk(T * C, 256), 256, 0, st>>>(xn, gate, T, n, C, x);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) rc = cu_fail(e, "k_hc_mean", __LINE__);
    }
    if (rc == 0 && inj) {
        rc = cu_matmul(be, h->inject, xn, wide, T, inj, n);
        if (rc == 0) {
            k_inject<<<nblk((int64_t)T * n, 256), 256, 0, st>>>(inj, (int64_t)T * n, (float)n);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) rc = cu_fail(e, "k_inject", __LINE__);
        }
    }
    return cu_tdone(&t, rc);
}

int cu_hc_add(cuda_backend *be, float *X, const float *y, const float *inj, int T)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t N = (int64_t)T * model_wide(hp);
    k_hc_add<<<nblk(N, 256), 256, 0, be->st>>>(X, y, inj, T, hp->hc_count, hp->n_embd);
    CKL("k_hc_add");
    return 0;
}
