/* ple.cu — the PLE n-gram layer on the device (engine/cpu/ple.c's
 * twin): the table rows of the token's n-grams (hashed on the host,
 * cpu_ple_rows; gathered on the device, or asked of the gw_ple_rows hook),
 * their key and value projections, the per-stream gate, the causal conv and
 * the add into the wide residual. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

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

/* ---------- the layer ---------- */

/* graph: a captured step or verify window, whose rows cu_decode_graph writes into
 * the pinned h_rows before each replay (no host work inside the capture) —
 * and, with the gw_ple_rows hook, their values into h_ple. */
int cu_ple_forward(cuda_backend *be, cuda_seq *s, const cu_layer *c, cu_lstate *ls, int64_t pos0, int T, float *X,
                   bool graph, bool verify)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int n = hp->hc_count, NH = hp->ple_n_heads, W = hp->ple_row_width;
    const int64_t P = hp->ple_embd, C = hp->n_embd, wide = model_wide(hp);
    cudaStream_t st = be->st;
    int64_t *rows = graph ? be->h_rows : (int64_t *)malloc((size_t)T * NH * sizeof *rows);
    float *he = NULL;
    if (!rows) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int r = 0; r < T && !graph; r++) cpu_ple_rows(hp, s->tokens, pos0 + r, rows + (int64_t)r * NH);
    tmp t = tmp_begin(be);
    float *e, *key, *value, *G, *Gn, *cv, *drows;
    int rc = cu_talloc(&t, &e, T * P);
    if (rc == 0) rc = cu_talloc(&t, &key, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &value, T * C);
    if (rc == 0) rc = cu_talloc(&t, &G, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &Gn, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &cv, T * wide);
    if (rc == 0 && be->base.ple_rows.fn && graph) { /* cu_decode_graph asked the hook before the replay */
        cudaError_t ce = cudaMemcpyAsync(e, be->h_ple, (size_t)(T * P) * sizeof(float), cudaMemcpyHostToDevice, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "PLE rows upload", __LINE__);
    } else if (rc == 0 && be->base.ple_rows.fn) {
        he = (float *)malloc((size_t)(T * P) * sizeof *he);
        char herr[256] = "";
        if (!he) {
            snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
        } else if ((rc = be->base.ple_rows.fn(be->base.ple_rows.ctx, T * NH, rows, he, herr, sizeof herr))) {
            snprintf(g_msg, sizeof g_msg, "PLE row hook: %s", herr);
        } else {
            cudaError_t ce = cudaMemcpyAsync(e, he, (size_t)(T * P) * sizeof *he, cudaMemcpyHostToDevice, st);
            cu_copied(be, (uint64_t)(T * P) * sizeof *he);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st); /* he is freed below */
            if (ce != cudaSuccess) rc = cu_fail(ce, "PLE rows upload", __LINE__);
        }
    } else if (rc == 0 && !be->ple_table.d) { /* gw_ple_host_detach took it, and the rows hook was removed */
        snprintf(g_msg, sizeof g_msg, "the n-gram table is not on the device and no PLE rows hook is set");
        rc = NB_EINVAL;
    } else if (rc == 0) {
        rc = cu_talloc(&t, &drows, (int64_t)T * NH * 2); /* int64 */
        cudaError_t ce = cudaSuccess;
        if (rc == 0) ce = cudaMemcpyAsync(drows, rows, (size_t)T * NH * sizeof *rows, cudaMemcpyHostToDevice, st);
        if (rc == 0 && !graph) cu_copied(be, (uint64_t)T * NH * sizeof *rows); /* graphs: at each replay */
        if (rc == 0 && ce == cudaSuccess && !graph) ce = cudaStreamSynchronize(st); /* rows is freed below */
        if (rc == 0 && ce == cudaSuccess) {
            cu_get_rows((unsigned)(T * NH), nthr(W), st, be->ple_table, (const int64_t *)drows, e, W);
            ce = cudaGetLastError();
        }
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "PLE rows", __LINE__);
    }
    if (!graph) free(rows);
    free(he);
    if (rc == 0) rc = cu_matmul(be, c->ple_key, e, P, T, key, wide);
    if (rc == 0) rc = cu_matmul(be, c->ple_value, e, P, T, value, C);
    if (rc == 0) rc = cu_rms_rows(st, key, wide, key, wide, T, C, n, c->ple_norm_key, C, hp->rms_eps);
    if (rc == 0) rc = cu_rms_rows(st, X, wide, Gn, wide, T, C, n, c->ple_norm_query, C, hp->rms_eps);
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        k_ple_gate<<<dim3((unsigned)T, (unsigned)n), nthr(C), 0, st>>>(key, Gn, value, n, C, G);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_ple_gate", __LINE__);
    }
    if (rc == 0) rc = cu_rms_rows(st, G, wide, Gn, wide, T, C, n, c->ple_norm_conv, C, hp->rms_eps);
    if (rc == 0 && verify) { /* a verify window: the conv state before it and its input rows (rollback.cu) */
        if (T > GW_VERIFY_ROWS || !ls->ck_ple_in) {
            snprintf(g_msg, sizeof g_msg, "a verify window of %d rows without its checkpoint", T);
            rc = NB_EINVAL;
        } else {
            ce = cudaMemcpyAsync(ls->ck_ple_conv, ls->ple_conv, (size_t)model_ple_conv_state_floats(hp) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, st);
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(ls->ck_ple_in, Gn, (size_t)(T * wide) * sizeof(float), cudaMemcpyDeviceToDevice, st);
            if (ce != cudaSuccess) rc = cu_fail(ce, "verify checkpoint (PLE)", __LINE__);
        }
    }
    if (rc == 0) {
        cu_conv_silu(nblk(wide, 128), 128, st, c->ple_conv, hp->ple_conv_kernel, hp->ple_dilation, wide, ls->ple_conv,
                     Gn, T, cv);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_conv_silu (PLE)", __LINE__);
    }
    if (rc == 0) {
        k_add2<<<nblk(T * wide, 256), 256, 0, st>>>(X, G, cv, T * wide);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_add2", __LINE__);
    }
    return cu_tdone(&t, rc);
}
