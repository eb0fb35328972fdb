/* seq.cu — the CUDA backend's sequences: their state on the device.
 *
 * A sequence holds three kinds of blocks, laid out by engine/vram.c:
 * the fixed-size state (GDN conv and recurrent state, PLE conv state), K/V
 * with the raw indexer keys and block keys for `cap` positions, and the MTP
 * block's K/V; the token history stays on the host (PLE's n-gram hashing).
 * A block grows by a new one with the live entries copied over (with a
 * budget: at its planned capacity at once, so nothing grows in steps). */
#include "gpu-worker/cuda/backend_cuda.h"

static void seq_release(cuda_seq *s)
{
    cuda_backend *be = cbe(s->base.be);
    cu_block_free(be, GW_PART_KV, s->state_blk, s->state_bytes);
    cu_block_free(be, GW_PART_KV, s->kv_blk, s->kv_bytes);
    cu_block_free(be, GW_PART_KV, s->mtp_blk, s->mtp_bytes);
    cu_verify_free(s);
    free(s->ls);
    free(s->tokens);
    free(s->mtp_pos);
}

void cuda_seq_free(gw_seq *gs)
{
    cuda_seq *s = (cuda_seq *)gs;
    cudaStreamSynchronize(cbe(gs->be)->st);
    if (s->exec) cudaGraphExecDestroy(s->exec);
    for (int T = 0; T <= GW_VERIFY_ROWS; T++)
        if (s->wexec[T]) cudaGraphExecDestroy(s->wexec[T]);
    seq_release(s);
    free(s);
}

int cuda_seq_create(gw_backend *gb, gw_seq **out, char *err, size_t errlen)
{
    const struct model *m = gb->model;
    const struct model_hparams *hp = &m->hp;
    cuda_seq *s = (cuda_seq *)calloc(1, sizeof *s);
    if (!s) return nb_errf(err, errlen, NB_ENOMEM, "sequence");
    s->base.be = gb;
    s->ls = (cu_lstate *)calloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *s->ls);
    uint64_t(*off)[3] = (uint64_t(*)[3])malloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1) * sizeof *off);
    int rc = s->ls && off ? 0 : NB_ENOMEM;
    if (rc == 0) {
        const uint64_t bytes = gw_vram_state_layout(m, off);
        rc = cu_block_alloc(cbe(gb), GW_PART_KV, &s->state_blk, bytes, "sequence state");
        if (rc == 0) s->state_bytes = bytes;
        if (rc == 0 && bytes && cudaMemset(s->state_blk, 0, bytes) != cudaSuccess)
            rc = cu_fail(cudaGetLastError(), "sequence state", __LINE__);
    }
    for (int i = 0; i < hp->n_layer && rc == 0; i++) {
        cu_lstate *st = &s->ls[i];
        st->conv = cu_at_off(s->state_blk, off[i][0]), st->ssm = cu_at_off(s->state_blk, off[i][1]);
        st->ple_conv = cu_at_off(s->state_blk, off[i][2]);
    }
    free(off);
    if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess) rc = cu_fail(cudaGetLastError(), "sequence state", __LINE__);
    if (rc) {
        cuda_seq_free(&s->base);
        return nb_errf(err, errlen, rc, "sequence state: %s", rc == NB_ENOMEM ? "out of host memory" : g_msg);
    }
    *out = &s->base;
    return 0;
}

void cuda_seq_reset(gw_seq *gs)
{
    cuda_seq *s = (cuda_seq *)gs;
    cuda_backend *be = cbe(gs->be);
    const struct model_hparams *hp = &gs->be->model->hp;
    bool ok = cudaStreamSynchronize(be->st) == cudaSuccess;
    if (s->state_blk) ok &= cudaMemset(s->state_blk, 0, s->state_bytes) == cudaSuccess; /* GDN and PLE conv state */
    for (int i = 0; i < hp->n_layer; i++) s->ls[i].n_blk = 0;
    ok &= cudaDeviceSynchronize() == cudaSuccess;
    gs->n_pos = 0;
    s->mtp_n = 0;
    s->ck_T = 0;
    s->broken = !ok; /* a device that cannot clear state keeps refusing work */
}

/* n floats of src to dst (device, legacy stream), when there are any. */
static int dcopy(float *dst, const float *src, int64_t n)
{
    if (dst && src && n > 0) CK(cudaMemcpy(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice));
    return 0;
}

/* K/V and indexer keys for `need` positions: a new block at the capacity
 * gw_vram_capacity gives (with the context fixed: the planned one at once,
 * so no old and new block are ever held together), the live entries copied
 * over, the old block freed. */
int cu_seq_reserve(cuda_seq *s, int64_t need)
{
    if (need <= s->cap) return 0;
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int64_t cap = gw_vram_capacity(GW_GROW_KV, s->cap, need, be->n_ctx, be->ctx_fixed);
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim, n = s->base.n_pos;
    int32_t *tok = (int32_t *)realloc(s->tokens, (size_t)cap * sizeof *tok);
    if (!tok) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    s->tokens = tok;
    uint64_t(*off)[4] = (uint64_t(*)[4])malloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1) * sizeof *off);
    if (!off) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    const uint64_t bytes = gw_vram_kv_layout(m, cap, off);
    void *blk = NULL;
    cudaError_t ce = cudaStreamSynchronize(be->st);
    int rc = ce == cudaSuccess ? cu_block_alloc(be, GW_PART_KV, &blk, bytes, "K/V") : cu_fail(ce, "K/V", __LINE__);
    cu_lstate *nl = rc == 0 ? (cu_lstate *)calloc((size_t)hp->n_layer, sizeof *nl) : NULL;
    if (rc == 0 && !nl) snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
    for (int i = 0; i < hp->n_layer && rc == 0; i++) {
        const cu_lstate *o = &s->ls[i];
        cu_lstate *q = &nl[i];
        q->k = cu_at_off(blk, off[i][0]), q->v = cu_at_off(blk, off[i][1]);
        q->idx_k = cu_at_off(blk, off[i][2]), q->blk_k = cu_at_off(blk, off[i][3]);
        rc = dcopy(q->k, o->k, n * kvw);
        if (rc == 0) rc = dcopy(q->v, o->v, n * kvw);
        if (rc == 0) rc = dcopy(q->idx_k, o->idx_k, n * Di);
        if (rc == 0) rc = dcopy(q->blk_k, o->blk_k, o->n_blk * Di);
    }
    free(off);
    if (rc == 0 && (ce = cudaDeviceSynchronize()) != cudaSuccess) /* the copies ran on the legacy stream, which `st` does not wait for */
        rc = cu_fail(ce, "K/V", __LINE__);
    if (rc) {
        free(nl);
        cu_block_free(be, GW_PART_KV, blk, bytes);
        return rc;
    }
    for (int i = 0; i < hp->n_layer; i++) {
        cu_lstate *st = &s->ls[i];
        st->k = nl[i].k, st->v = nl[i].v, st->idx_k = nl[i].idx_k, st->blk_k = nl[i].blk_k;
    }
    free(nl);
    cu_block_free(be, GW_PART_KV, s->kv_blk, s->kv_bytes);
    s->kv_blk = blk, s->kv_bytes = bytes, s->cap = cap;
    return 0;
}

/* The MTP block's K/V for `need` entries, the same way (one block: K, then V at half). */
int cu_mtp_reserve(cuda_seq *s, int64_t need)
{
    if (need <= s->mtp_cap) return 0;
    cuda_backend *be = cbe(s->base.be);
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    cu_lstate *st = &s->ls[hp->n_layer];
    const int64_t cap = gw_vram_capacity(GW_GROW_MTP, s->mtp_cap, need, be->n_ctx, be->ctx_fixed);
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t *pos = (int64_t *)realloc(s->mtp_pos, (size_t)cap * sizeof *pos);
    if (!pos) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    s->mtp_pos = pos;
    const uint64_t bytes = gw_vram_mtp_kv_bytes(m, cap);
    void *blk = NULL;
    CK(cudaStreamSynchronize(be->st));
    TRY(cu_block_alloc(be, GW_PART_KV, &blk, bytes, "MTP K/V"));
    float *k = (float *)blk, *v = (float *)((char *)blk + bytes / 2);
    int rc = dcopy(k, st->k, s->mtp_n * kvw);
    if (rc == 0) rc = dcopy(v, st->v, s->mtp_n * kvw);
    cudaError_t ce = cudaSuccess;
    if (rc == 0 && (ce = cudaDeviceSynchronize()) != cudaSuccess) rc = cu_fail(ce, "MTP K/V", __LINE__);
    if (rc) {
        cu_block_free(be, GW_PART_KV, blk, bytes);
        return rc;
    }
    cu_block_free(be, GW_PART_KV, s->mtp_blk, s->mtp_bytes);
    s->mtp_blk = blk, s->mtp_bytes = bytes, st->k = k, st->v = v, s->mtp_cap = cap;
    return 0;
}

int cuda_seq_truncate(gw_seq *gs, int64_t n_keep, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    const struct model *m = gs->be->model;
    if (gw_recurrent_layer(m) >= 0) { /* GDN / PLE state: only back into the last verify window (rollback.cu) */
        int rc = cu_rollback(s, n_keep, err, errlen);
        if (rc) return rc;
    }
    for (int i = 0; i < m->hp.n_layer; i++) s->ls[i].n_blk = gw_blocks_kept(m, i, s->ls[i].n_blk, n_keep);
    gs->n_pos = n_keep;
    return 0;
}

static int seq_copy_body(cuda_seq *d, const cuda_seq *s)
{
    const struct model_hparams *hp = &d->base.be->model->hp;
    const int64_t kvw = (int64_t)hp->n_head_kv * hp->head_dim, Di = hp->idx_head_dim;
    CK(cudaStreamSynchronize(cbe(d->base.be)->st));
    d->base.n_pos = 0, d->mtp_n = 0, d->ck_T = 0; /* nothing of dst is kept while growing */
    TRY(cu_seq_reserve(d, s->cap));
    TRY(cu_mtp_reserve(d, s->mtp_cap));
    for (int i = 0; i < hp->n_layer + hp->n_nextn; i++) {
        const cu_lstate *a = &s->ls[i];
        cu_lstate *b = &d->ls[i];
        int64_t n = i < hp->n_layer ? s->base.n_pos : s->mtp_n;
        TRY(dcopy(b->conv, a->conv, model_gdn_conv_state_floats(hp)));
        TRY(dcopy(b->ssm, a->ssm, model_gdn_ssm_state_floats(hp)));
        TRY(dcopy(b->ple_conv, a->ple_conv, model_ple_conv_state_floats(hp)));
        TRY(dcopy(b->k, a->k, n * kvw));
        TRY(dcopy(b->v, a->v, n * kvw));
        TRY(dcopy(b->idx_k, a->idx_k, n * Di));
        TRY(dcopy(b->blk_k, a->blk_k, a->n_blk * Di));
        b->n_blk = a->n_blk;
    }
    CK(cudaDeviceSynchronize());
    if (s->base.n_pos) memcpy(d->tokens, s->tokens, (size_t)s->base.n_pos * sizeof *d->tokens);
    if (s->mtp_n) memcpy(d->mtp_pos, s->mtp_pos, (size_t)s->mtp_n * sizeof *d->mtp_pos);
    d->base.n_pos = s->base.n_pos;
    d->mtp_n = s->mtp_n;
    d->broken = s->broken;
    d->ck_T = 0; /* the copy does not take the source's last verify window: it cannot roll back into it */
    return 0;
}

int cuda_seq_copy(gw_seq *gd, const gw_seq *gsrc, char *err, size_t errlen)
{
    cuda_seq *d = (cuda_seq *)gd;
    int rc = seq_copy_body(d, (const cuda_seq *)gsrc);
    if (rc) {
        d->broken = true;
        return nb_errf(err, errlen, rc, "sequence copy: %s", g_msg);
    }
    return 0;
}

/* gw_seq_save / gw_seq_load's view (engine/seq_state.c): the device arrays,
 * copied one by one with cudaMemcpy (host ↔ device, the legacy stream, after
 * the backend's stream is drained).  A load first grows the blocks for the
 * state's positions (nothing of the old state kept, as a copy does). */
int cuda_seq_parts(gw_seq *gs, bool load, int64_t n_pos, int64_t mtp_n, struct gw_seq_parts *p, char *err, size_t errlen)
{
    cuda_seq *s = (cuda_seq *)gs;
    const struct model_hparams *hp = &gs->be->model->hp;
    if (cudaStreamSynchronize(cbe(gs->be)->st) != cudaSuccess)
        return nb_errf(err, errlen, cu_fail(cudaGetLastError(), "sequence state", __LINE__), "%s", g_msg);
    if (load) {
        gs->n_pos = 0, s->mtp_n = 0, s->broken = false, s->ck_T = 0; /* no rollback into the old last verify window */
        int rc = cu_seq_reserve(s, n_pos);
        if (rc == 0) rc = cu_mtp_reserve(s, mtp_n);
        if (rc) {
            s->broken = true;
            return nb_errf(err, errlen, rc, "sequence state of %lld positions: %s", (long long)n_pos, g_msg);
        }
    }
    p->tokens = s->tokens, p->mtp_pos = s->mtp_pos, p->mtp_n = &s->mtp_n, p->broken = &s->broken;
    for (int i = 0; i < hp->n_layer + hp->n_nextn; i++) {
        cu_lstate *st = &s->ls[i];
        p->layers[i] = (struct gw_seq_layer){st->conv, st->ssm, st->ple_conv, st->k, st->v, st->idx_k, st->blk_k,
                                             i < hp->n_layer ? &st->n_blk : NULL};
    }
    return 0;
}

int cuda_state_copy(gw_backend *be, void *dst, const void *src, uint64_t bytes, bool to_dev, char *err, size_t errlen)
{
    cudaError_t e = cudaMemcpy(dst, src, (size_t)bytes, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return nb_errf(err, errlen, cu_fail(e, "sequence state copy", __LINE__), "%s", g_msg);
    if (to_dev) __atomic_fetch_add(&be->bytes_copied, bytes, __ATOMIC_RELAXED);
    return 0;
}
