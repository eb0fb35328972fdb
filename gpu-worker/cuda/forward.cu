/* forward.cu — the trunk on the device and the eval entry points: the
 * embedding into the wide residual, one block (trunk layer or MTP) through
 * its PLE, attention or GDN, and MoE sublayers, the head with the logits'
 * argmax on the device, and an eval — a one-token step as a replayed graph
 * (graph.cu), a batch as plain launches, under a budget in pieces. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

/* X[t] stream i = row t of e, for every stream (the embedding in the wide residual) */
__global__ void k_broadcast_streams(const float *e, int T, int n, int64_t C, float *X)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * n * C) return;
    int64_t t = idx / (n * C), c = idx % C;
    X[idx] = e[t * C + c];
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

/* ---------- the trunk ---------- */

/* Logits of T rows of X through a head mixer and an output matrix, into host
 * memory (logits NULL: not copied), and each row's argmax (harg, NULL: not
 * asked) computed on the device, so greedy decoding copies one int a row
 * (sync false: the copies are only queued — a graph's pinned buffers).  The
 * rows go GW_VRAM_HEAD_ROWS at a time through one buffer (stream order keeps
 * a sub-batch's copies before the next one's matmul), so a prefill chunk asking
 * every row's logits holds a few rows × vocabulary floats, as the budget
 * counts them (engine/vram.c). */
int cu_head(cuda_backend *be, const cu_hc *mixer, const dmat &out_w, const float *X, int T, float *logits, bool sync,
            int32_t *harg)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t V = hp->n_vocab, wide = model_wide(hp);
    const int R = T < GW_VRAM_HEAD_ROWS ? T : GW_VRAM_HEAD_ROWS;
    tmp t = tmp_begin(be);
    float *h, *dl, *di = NULL;
    int rc = cu_talloc(&t, &h, (int64_t)R * hp->n_embd);
    if (rc == 0) rc = cu_talloc(&t, &dl, (int64_t)R * V);
    if (rc == 0 && harg) rc = cu_talloc(&t, &di, R);
    for (int r0 = 0; r0 < T && rc == 0; r0 += R) {
        const int n = T - r0 < R ? T - r0 : R;
        rc = cu_hc_mix(be, mixer, X + (int64_t)r0 * wide, n, h, NULL);
        if (rc == 0) rc = cu_matmul(be, out_w, h, hp->n_embd, n, dl, V);
        if (rc) break;
        cudaError_t ce = cudaSuccess;
        if (harg) {
            k_argmax<<<(unsigned)n, ARGMAX_THREADS, 0, be->st>>>(dl, V, (int32_t *)di);
            ce = cudaGetLastError();
            if (ce == cudaSuccess)
                ce = cudaMemcpyAsync(harg + r0, di, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, be->st);
        }
        if (ce == cudaSuccess && logits)
            ce = cudaMemcpyAsync(logits + (int64_t)r0 * V, dl, (size_t)((int64_t)n * V) * sizeof(float),
                                 cudaMemcpyDeviceToHost, be->st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "logits to the host", __LINE__);
    }
    if (rc == 0 && sync) {
        cudaError_t ce = cudaStreamSynchronize(be->st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "logits to the host", __LINE__);
    }
    return cu_tdone(&t, rc);
}

/* One block (trunk layer il, or the MTP block) over the T rows of X. */
int cu_block_forward(cuda_backend *be, cuda_seq *s, const struct gw_eval_args *a, int il, int64_t pos0, int T, float *X,
                     float *x, float *y, float *inj, int64_t mtp_slot0, const int64_t *dpos)
{
    const struct model *m = be->base.model;
    const struct model_layer *l = &m->layers[il];
    const cu_layer *c = &be->L[il];
    cu_lstate *ls = &s->ls[il];
    const bool verify = a && a->verify;
    if (l->has_ple) TRY(cu_ple_forward(be, s, c, ls, pos0, T, X, dpos != NULL, verify));
    TRY(cu_hc_mix(be, &c->hc_attn, X, T, x, inj));
    if (l->kind == MODEL_LAYER_GDN) TRY(cu_gdn_forward(be, c, ls, x, T, verify, y));
    else if (l->is_nextn) TRY(cu_attention(be, c, ls, ls->k, ls->v, x, T, pos0, mtp_slot0, 0, NULL, 0, verify, y));
    else TRY(cu_attention(be, c, ls, ls->k, ls->v, x, T, pos0, pos0, l->compress_ratio, dpos, s->cap, verify, y));
    TRY(cu_hc_add(be, X, y, inj, T));
    TRY(cu_hc_mix(be, &c->hc_ffn, X, T, x, inj));
    TRY(cu_moe_forward(be, c, il, x, T, y, a));
    return cu_hc_add(be, X, y, inj, T);
}

/* The device work of one eval.  Outside a capture (dpos NULL) it may
 * synchronise and copy to the caller's buffers; captured (dpos = the
 * backend's d_pos: a step or a verify window) it only queues: the tokens
 * come from the pinned h_tok, the logits and wide rows go to the pinned h_out. */
int cu_eval_dev(cuda_seq *s, const struct gw_eval_args *a, const int64_t *dpos)
{
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int T = a->n_tokens, n = hp->hc_count;
    const int64_t C = hp->n_embd, wide = model_wide(hp), V = hp->n_vocab;
    const int64_t pos0 = dpos ? 0 : s->base.n_pos;
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *X, *x, *y, *inj, *tokf = NULL, *e;
    int rc = cu_talloc(&t, &X, T * wide);
    if (rc == 0) rc = cu_talloc(&t, &x, T * C);
    if (rc == 0) rc = cu_talloc(&t, &y, T * C);
    if (rc == 0) rc = cu_talloc(&t, &inj, (int64_t)T * n);
    if (rc == 0 && !dpos) rc = cu_talloc(&t, &tokf, T);
    if (rc == 0) rc = cu_talloc(&t, &e, T * C);
    const int32_t *dtok = dpos ? be->d_tok : (const int32_t *)tokf;
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        if (dpos) {
            ce = cudaMemcpyAsync(be->d_tok, be->h_tok, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, st);
            if (ce == cudaSuccess) ce = cudaMemcpyAsync(be->d_pos, be->h_pos, sizeof(int64_t), cudaMemcpyHostToDevice, st);
        } else {
            ce = cudaMemcpyAsync(tokf, a->tokens, (size_t)T * sizeof(int32_t), cudaMemcpyHostToDevice, st);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
            cu_copied(be, (uint64_t)T * sizeof(int32_t));
        }
        if (ce == cudaSuccess) {
            cu_get_rows((unsigned)T, nthr(C), st, be->tok_embd, dtok, e, C);
            k_broadcast_streams<<<nblk(T * wide, 256), 256, 0, st>>>(e, T, n, C, X);
            ce = cudaGetLastError();
        }
        if (ce != cudaSuccess) rc = cu_fail(ce, "embedding", __LINE__);
    }
    float *htap = NULL;
    if (rc == 0 && a->tap && !(htap = (float *)malloc((size_t)(T * wide) * sizeof *htap)))
        rc = NB_ENOMEM, snprintf(g_msg, sizeof g_msg, "out of host memory");
    for (int il = 0; il < hp->n_layer && rc == 0; il++) {
        rc = cu_block_forward(be, s, a, il, pos0, T, X, x, y, inj, 0, dpos);
        if (rc == 0 && a->tap) {
            ce = cudaMemcpyAsync(htap, X, (size_t)(T * wide) * sizeof *htap, cudaMemcpyDeviceToHost, st);
            if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
            if (ce != cudaSuccess) rc = cu_fail(ce, "layer tap", __LINE__);
            else a->tap(a->tap_ctx, il, T, htap);
        }
    }
    free(htap);
    const int first = a->logits_rows == GW_ROWS_LAST ? T - 1 : 0;
    if (rc == 0 && a->logits_rows != GW_ROWS_NONE)
        rc = cu_head(be, &be->output_hc, be->output, X + first * wide, T - first,
                     dpos ? (a->logits ? be->h_out : NULL) : a->logits, !dpos,
                     dpos ? (a->argmax ? be->h_arg : NULL) : a->argmax);
    if (rc == 0 && a->wide_rows != GW_ROWS_NONE) {
        const int w0 = a->wide_rows == GW_ROWS_LAST ? T - 1 : 0;
        ce = cudaMemcpyAsync(dpos ? be->h_out + (int64_t)be->step_rows * V : a->wide, X + w0 * wide,
                             (size_t)((T - w0) * wide) * sizeof(float),
                             cudaMemcpyDeviceToHost, st);
        if (ce != cudaSuccess) rc = cu_fail(ce, "wide rows to the host", __LINE__);
    }
    if (rc == 0 && !dpos && (ce = cudaStreamSynchronize(st)) != cudaSuccess) rc = cu_fail(ce, "eval", __LINE__);
    return cu_tdone(&t, rc);
}

static int eval_body(cuda_seq *s, const struct gw_eval_args *a)
{
    cuda_backend *be = cbe(s->base.be);
    const int T = a->n_tokens;
    const int64_t pos0 = s->base.n_pos;
    TRY(cu_ensure_layout(be));
    /* Taps are host calls in the middle of the step: those evals run plain.
     * The hooks are not: remote experts go through the mailbox, PLE rows are
     * asked before the replay.  A decode step and a verify window (of one
     * row too: its checkpoint copies are in its own graph) replay graphs;
     * other batches (prefill, MTP) run plain, and so does a window in
     * coverage mode, whose layers ask the host which misses to drop. */
    const bool coverage = a->verify && a->coverage > 0;
    if ((T == 1 || (a->verify && T <= GW_VERIFY_ROWS)) && be->graphs && !a->tap && !a->route_tap && !coverage &&
        (!be->base.remote.fn || gw_mailbox_active(&be->mailbox)))
        return cu_decode_graph(s, a);
    TRY(cu_seq_reserve(s, pos0 + T));
    TRY(cu_rope_reserve(be, pos0 + T));
    if (a->verify) TRY(cu_verify_reserve(s));
    memcpy(s->tokens + pos0, a->tokens, (size_t)T * sizeof *s->tokens);
    return cu_eval_dev(s, a, NULL);
}

/* Under a VRAM budget: the positions are those the budget reserved K/V for,
 * and a batch larger than the scratch estimate's GW_VRAM_BATCH_ROWS runs in
 * pieces of that many rows (with host copies of experts, of as many rows as
 * the budget's room holds: gw_vram_stream_rows) (each piece's asked rows of logits, argmax and
 * wide state go to their places in the caller's buffers). */
static int cuda_eval_piece(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen);

int cuda_eval(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    cuda_backend *be = cbe(gs->be);
    const int T = a->n_tokens;
    if (a->verify && T > GW_VERIFY_ROWS)
        return nb_errf(err, errlen, NB_EINVAL, "a verify window of %d rows: at most %d (the pending token and 16 drafts)", T,
                       GW_VERIFY_ROWS);
    if (be->budget && gs->n_pos + T > be->n_ctx)
        return nb_errf(err, errlen, NB_EINVAL,
                       "eval of %d tokens at position %lld: past the %lld positions the VRAM budget reserved K/V for "
                       "(the gpu-worker's --ctx)", T, (long long)gs->n_pos, (long long)be->n_ctx);
    /* With host copies of experts a piece's MoE runs expert by expert (stream.cu), its temporaries bounded:
     * pieces as large as what the budget leaves beside the blocks held, so an expert is copied once a piece. */
    int64_t rows = GW_VRAM_BATCH_ROWS;
    if (be->budget && be->xh_blob && T > rows) {
        uint64_t held = 0;
        for (int p = 0; p < 5; p++) held += be->used[p];
        const uint64_t left = be->budget > held ? (be->budget - held) / 10 * 9 : 0; /* a tenth for the driver's rounding */
        const int64_t fit = gw_vram_stream_rows(be->base.model, be->n_ctx, left);
        if (fit > rows) rows = fit;
    }
    if (!be->budget || T <= rows || s->broken) return cuda_eval_piece(gs, a, err, errlen);
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t V = hp->n_vocab, wide = model_wide(hp);
    for (int r0 = 0; r0 < T; r0 += (int)rows) {
        const int n = T - r0 < rows ? T - r0 : (int)rows;
        const bool last = r0 + n == T;
        struct gw_eval_args p = *a;
        p.tokens = a->tokens + r0, p.n_tokens = n;
        if (a->logits_rows == GW_ROWS_ALL) {
            p.logits = a->logits ? a->logits + (int64_t)r0 * V : NULL;
            p.argmax = a->argmax ? a->argmax + r0 : NULL;
        } else if (!last) {
            p.logits_rows = GW_ROWS_NONE, p.logits = NULL, p.argmax = NULL;
        }
        if (a->wide_rows == GW_ROWS_ALL) p.wide = a->wide + (int64_t)r0 * wide;
        else if (!last) p.wide_rows = GW_ROWS_NONE, p.wide = NULL;
        int rc = cuda_eval_piece(gs, &p, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int cuda_eval_piece(gw_seq *gs, const struct gw_eval_args *a, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    if (s->broken) return nb_errf(err, errlen, NB_EINVAL, "sequence state is inconsistent after a failed call: reset it");
    const int64_t pos0 = gs->n_pos;
    s->ck_T = 0; /* any eval ends the last verify window's rollback; a verify window starts its own */
    int rc = cu_adapt_begin(cbe(gs->be)); /* slots whose copies completed enter the tables */
    if (rc == 0) rc = cu_mailbox_begin(cbe(gs->be), a->n_tokens);
    if (rc == 0) rc = eval_body(s, a);
    rc = cu_mailbox_end(cbe(gs->be), rc);
    if (rc == 0) rc = cu_adapt_end(cbe(gs->be), a->n_tokens); /* its routes counted; a due round's copies queued */
    cu_vram_note(cbe(gs->be));
    if (rc) {
        s->broken = true;
        return nb_errf(err, errlen, rc, "eval of %d tokens at position %lld: %s", a->n_tokens, (long long)pos0, g_msg);
    }
    gs->n_pos = pos0 + a->n_tokens;
    if (a->verify) s->ck_pos0 = pos0, s->ck_T = a->n_tokens;
    return 0;
}

cudaError_t cu_kernel_attributes(cudaFuncAttributes *fa) { return cudaFuncGetAttributes(fa, k_argmax); }
