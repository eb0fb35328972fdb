/* slots.cu — the VRAM tier: the routed experts computed on the device, in
 * per-layer slot arrays.
 *
 * Only the experts the map marks local are uploaded, slot s at s · one
 * expert's bytes in ascending expert id, with a device table expert → slot
 * (-1: not resident, computed by the remote hook: moe.cu, mailbox.cu).  The
 * map comes with the parameters at creation or from the remote hook at the
 * first eval; a changed map is laid out again (the old slots freed first, so
 * only one map's experts are ever on the device), and the layout's
 * generation tells graph.cu that a captured step names the old slots. */
#include "gpu-worker/cuda/backend_cuda.h"

/* Expert e of t (3-D) as the device holds it, into dst (device): its rows,
 * or widened to F32 through buf (rows × n_in floats). */
static int put_expert(const struct model_tensor *t, int64_t e, uint8_t *dst, float *buf)
{
    const uint8_t *src = t->data + (size_t)e * t->mat_bytes;
    const int64_t rows = t->ne[1], n_in = t->ne[0];
    if (dev_decodes(t->type)) {
        CK(cudaMemcpy(dst, src, (size_t)rows * t->row_bytes, cudaMemcpyHostToDevice));
        return 0;
    }
    for (int64_t r = 0; r < rows; r++) t->qt->to_float(src + (size_t)r * t->row_bytes, buf + r * n_in, n_in);
    CK(cudaMemcpy(dst, buf, (size_t)(rows * n_in) * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

static dmat slot_mat(const struct model_tensor *t, void *mem)
{
    dmat m;
    m.d = (const uint8_t *)mem;
    m.n_in = t->ne[0], m.n_out = t->ne[1];
    m.type = gw_vram_device_type(t->type);
    m.row_bytes = dev_decodes(t->type) ? t->row_bytes : (size_t)m.n_in * 4;
    m.mat_bytes = m.row_bytes * (size_t)m.n_out;
    return m;
}

/* Uploads the experts `local` marks (NULL: all) into per-layer slot arrays
 * (ascending expert id → slot) and the expert → slot tables, after checking
 * the budget; the previous slots are freed first, so only the new map's
 * experts are ever on the device together with the dense weights. */
int cu_expert_layout(cuda_backend *be, const uint8_t *local)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const int n = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    struct gw_vram_parts parts;
    gw_vram_plan(m, local, be->n_ctx, &parts);
    parts.dense = be->dense_bytes, parts.mtp = be->mtp_bytes;
    char msg[sizeof g_msg];
    if (gw_vram_check(&parts, be->budget, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_ENOMEM;
    }
    CK(cudaStreamSynchronize(be->st));
    cu_adapt_drop(be); /* no slot copy still writes into the old slots */
    be->layout_gen++; /* captured graphs name the old slots */
    if (!be->layout && !(be->layout = (uint8_t *)malloc((size_t)n * E))) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    if (local) memcpy(be->layout, local, (size_t)n * E);
    else memset(be->layout, 1, (size_t)n * E);
    /* The previous slots go first; every view is cleared with them, so a failure below leaves none pointing at freed slots. */
    for (int il = 0; il < n; il++) {
        cu_layer *c = &be->L[il];
        memset(&c->gate_exps, 0, sizeof c->gate_exps), memset(&c->up_exps, 0, sizeof c->up_exps);
        memset(&c->down_exps, 0, sizeof c->down_exps);
        c->n_slots = 0;
    }
    cu_block_free(be, GW_PART_SLOTS, be->slots_blk, be->slots_bytes);
    be->slots_blk = NULL, be->slots_bytes = 0;
    /* one block, each layer's three arrays laid out by gw_vram_slot_layout (a layer without slots: none) */
    int32_t *slot = (int32_t *)malloc((size_t)E * sizeof *slot);
    uint64_t *at = (uint64_t *)malloc((size_t)n * sizeof *at);
    float *buf = NULL;
    size_t buf_floats = 0;
    int rc = slot && at ? 0 : NB_ENOMEM;
    if (rc) snprintf(g_msg, sizeof g_msg, "out of host memory");
    uint64_t total = 0;
    for (int il = 0; il < n && rc == 0; il++) {
        int64_t k = 0;
        for (int e = 0; e < E; e++) k += be->layout[(size_t)il * E + e] != 0;
        at[il] = total;
        total += gw_vram_slot_layout(m, il, k, NULL);
    }
    if (rc == 0 && (rc = cu_block_alloc(be, GW_PART_SLOTS, (void **)&be->slots_blk, total, "expert slots")) == 0)
        be->slots_bytes = total;
    for (int il = 0; il < n && rc == 0; il++) {
        const struct model_moe *w = &m->layers[il].moe;
        cu_layer *c = &be->L[il];
        const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
        dmat *ds[3] = {&c->gate_exps, &c->up_exps, &c->down_exps};
        int n_slots = 0;
        for (int e = 0; e < E; e++) slot[e] = be->layout[(size_t)il * E + e] ? n_slots++ : -1;
        uint64_t off[3];
        gw_vram_slot_layout(m, il, n_slots, off);
        for (int j = 0; j < 3 && rc == 0 && n_slots > 0; j++) {
            if (!ts[j]->data) continue;
            uint8_t *mem = (uint8_t *)be->slots_blk + at[il] + off[j];
            *ds[j] = slot_mat(ts[j], mem);
            const size_t need = (size_t)(ts[j]->ne[0] * ts[j]->ne[1]);
            if (!dev_decodes(ts[j]->type) && need > buf_floats) {
                free(buf);
                if (!(buf = (float *)malloc(need * sizeof(float)))) {
                    snprintf(g_msg, sizeof g_msg, "out of host memory"), rc = NB_ENOMEM;
                    break;
                }
                buf_floats = need;
            }
            for (int e = 0; e < E && rc == 0; e++)
                if (slot[e] >= 0) rc = put_expert(ts[j], e, mem + (size_t)slot[e] * ds[j]->mat_bytes, buf);
            if (rc == 0 && be->created) cu_copied(be, (uint64_t)n_slots * ds[j]->mat_bytes);
        }
        if (rc == 0) c->n_slots = n_slots;
        if (rc == 0) {
            cudaError_t ce = cudaMemcpy(c->slot_of, slot, (size_t)E * sizeof *slot, cudaMemcpyHostToDevice);
            if (ce != cudaSuccess) rc = cu_fail(ce, "expert slot table", __LINE__);
        }
    }
    free(at);
    free(slot);
    free(buf);
    if (rc == 0) {
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) rc = cu_fail(ce, "expert layout", __LINE__);
    }
    if (rc == 0) rc = cu_adapt_reset(be); /* adaptive slots start from this layout */
    if (rc) { /* nothing half-laid-out is used: the next eval lays out again */
        free(be->layout);
        be->layout = NULL;
    }
    cu_vram_note(be);
    return rc;
}

/* Before device work: the experts of the map in force (the remote hook's, or
 * all), laid out again only when it changed since the last layout. */
int cu_ensure_layout(cuda_backend *be)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const size_t n = (size_t)(hp->n_layer + hp->n_nextn) * hp->n_expert;
    const uint8_t *want = be->base.remote.fn ? be->base.remote.local : NULL;
    if (be->layout) {
        bool same = true;
        if (want) same = memcmp(want, be->layout, n) == 0;
        else
            for (size_t i = 0; i < n && same; i++) same = be->layout[i] != 0;
        if (same) return 0;
    }
    return cu_expert_layout(be, want);
}
