/* mtp.cu — the MTP block on the device (engine/cpu/mtp.c's twin): the
 * draft tokens' embeddings and the trunk's wide rows, normed and projected
 * into the block's input, one block (forward.cu) over its own K/V, and its
 * head. */
#include "gpu-worker/cuda/backend_cuda.h"

static int mtp_body(cuda_seq *s, const struct gw_mtp_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model_hparams *hp = &be->base.model->hp;
    const int il = hp->n_layer, T = a->n_rows, n = hp->hc_count;
    const cu_layer *c = &be->L[il];
    const int64_t C = hp->n_embd, wide = model_wide(hp);
    cudaStream_t st = be->st;
    int64_t n_ctx = 0; /* entries before a->pos survive */
    while (n_ctx < s->mtp_n && s->mtp_pos[n_ctx] < a->pos) n_ctx++;
    s->mtp_n = n_ctx;
    TRY(cu_mtp_reserve(s, n_ctx + T));
    TRY(cu_rope_reserve(be, a->pos + T));
    TRY(cu_ensure_layout(be));
    tmp t = tmp_begin(be);
    float *X, *x, *y, *inj, *tokf, *e, *cat, *win;
    int rc = cu_talloc(&t, &X, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &x, T * C);
    if (rc == 0) rc = cu_talloc(&t, &y, T * C);
    if (rc == 0) rc = cu_talloc(&t, &inj, (int64_t)T * n);
    if (rc == 0) rc = cu_talloc(&t, &tokf, T);
    if (rc == 0) rc = cu_talloc(&t, &e, T * C);
    if (rc == 0) rc = cu_talloc(&t, &cat, (int64_t)T * n * 2 * C);
    if (rc == 0) rc = cu_talloc(&t, &win, T * wide);
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        ce = cudaMemcpyAsync(tokf, a->tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, st);
        if (ce == cudaSuccess) ce = cudaMemcpyAsync(win, a->wide_in, (size_t)(T * wide) * sizeof(float), cudaMemcpyHostToDevice, st);
        cu_copied(be, (uint64_t)T * sizeof(int32_t) + (uint64_t)(T * wide) * sizeof(float));
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
        if (ce == cudaSuccess) {
            cu_get_rows((unsigned)T, nthr(C), st, c->embed, (const int32_t *)tokf, e, C);
            ce = cudaGetLastError();
        }
        if (ce != cudaSuccess) rc = cu_fail(ce, "MTP input", __LINE__);
    }
    /* cat row (t, s) = [RMS(e_t)·enorm ; RMS(h_t,s)·hnorm_s] */
    for (int sI = 0; sI < n && rc == 0; sI++) {
        rc = cu_rms_rows(st, e, C, cat + (int64_t)sI * 2 * C, (int64_t)n * 2 * C, T, C, 1, c->enorm, 0, hp->rms_eps);
        if (rc == 0)
            rc = cu_rms_rows(st, win + (int64_t)sI * C, wide, cat + (int64_t)sI * 2 * C + C, (int64_t)n * 2 * C, T, C,
                             1, c->hnorm + (int64_t)sI * C, 0, hp->rms_eps);
    }
    if (rc == 0) rc = cu_matmul(be, c->eh_proj, cat, 2 * C, T * n, X, C);
    struct gw_eval_args tap; /* the block's routing, for the hotlist: only the route tap is read */
    memset(&tap, 0, sizeof tap);
    tap.route_tap = a->route_tap, tap.route_ctx = a->route_ctx;
    if (rc == 0) rc = cu_block_forward(be, s, a->route_tap ? &tap : NULL, il, a->pos, T, X, x, y, inj, n_ctx, NULL);
    if (rc == 0 && a->logits) rc = cu_head(be, &c->head, c->head_out, X, T, a->logits);
    if (rc == 0 && a->wide_out) {
        ce = cudaMemcpyAsync(a->wide_out, X, (size_t)(T * wide) * sizeof(float), cudaMemcpyDeviceToHost, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "MTP wide rows to the host", __LINE__);
    }
    if (rc == 0 && (ce = cudaStreamSynchronize(st)) != cudaSuccess) rc = cu_fail(ce, "MTP step", __LINE__);
    if (rc == 0) {
        for (int r = 0; r < T; r++) s->mtp_pos[n_ctx + r] = a->pos + r;
        s->mtp_n = n_ctx + T;
    }
    return cu_tdone(&t, rc);
}

int cuda_mtp_eval(gw_seq *gs, const struct gw_mtp_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    int rc = cu_mailbox_begin(cbe(gs->be), a->n_rows);
    if (rc == 0) rc = mtp_body(s, a);
    rc = cu_mailbox_end(cbe(gs->be), rc);
    cu_vram_note(cbe(gs->be));
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "MTP step of %d rows: %s", a->n_rows, g_msg);
    }
    return 0;
}
