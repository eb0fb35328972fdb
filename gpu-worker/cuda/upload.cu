/* upload.cu — the dense weights onto the device, at creation.
 *
 * Matrices go as the file stores them where the device has a decoder
 * (dev_decodes: gpu-worker/cuda/cuda_types.h's rows), else widened to F32
 * one matrix at a time; small tensors (norms, conv kernels, biases) as fp32.
 * Every array comes from the dense block (cu_dev_alloc), whose size is
 * engine/vram.c's walk over these same uploads; a tensor shared by two
 * names (the MTP block's embedding and head) is copied once.  The routed
 * experts are not uploaded here: slots.cu lays them out. */
#include "gpu-worker/cuda/backend_cuda.h"

/* A matrix (2-D or 3-D expert tensor) on the device; absent tensors give d == NULL. */
int cu_up_mat(cuda_backend *be, const struct model_tensor *t, dmat *out)
{
    memset(out, 0, sizeof *out);
    if (!t->data) return 0;
    for (int i = 0; i < be->n_ups; i++)
        if (be->ups[i].host == t->data && be->ups[i].m.type == gw_vram_device_type(t->type) &&
            be->ups[i].m.n_in == t->ne[0] && be->ups[i].m.n_out == t->ne[1]) {
            *out = be->ups[i].m;
            return 0;
        }
    const int64_t n_mat = t->ne[2] * t->ne[3], rows = t->ne[1];
    dmat m;
    m.n_in = t->ne[0];
    m.n_out = rows;
    void *d;
    if (dev_decodes(t->type)) {
        m.type = t->type;
        m.row_bytes = t->row_bytes;
        m.mat_bytes = n_mat > 1 ? t->mat_bytes : rows * t->row_bytes;
        /* A view (fused gate_up) needs its matrices' rows only: the last one ends rows·row_bytes after its start. */
        size_t bytes = (size_t)(n_mat - 1) * t->mat_bytes + (size_t)rows * t->row_bytes;
        size_t dense = (size_t)n_mat * rows * t->row_bytes;
        TRY(cu_dev_alloc(be, &d, dense));
        if (m.mat_bytes == rows * t->row_bytes || n_mat == 1) {
            CK(cudaMemcpy(d, t->data, bytes, cudaMemcpyHostToDevice));
        } else { /* strided views become dense copies */
            for (int64_t e = 0; e < n_mat; e++)
                CK(cudaMemcpy((uint8_t *)d + (size_t)e * rows * t->row_bytes, t->data + (size_t)e * t->mat_bytes,
                              (size_t)rows * t->row_bytes, cudaMemcpyHostToDevice));
            m.mat_bytes = rows * t->row_bytes;
        }
    } else { /* widened to F32, one matrix at a time */
        m.type = QT_F32;
        m.row_bytes = (size_t)m.n_in * 4;
        m.mat_bytes = m.row_bytes * (size_t)rows;
        TRY(cu_dev_alloc(be, &d, m.mat_bytes * (size_t)n_mat));
        float *buf = (float *)malloc(m.mat_bytes);
        if (!buf) {
            snprintf(g_msg, sizeof g_msg, "out of host memory widening %s", t->name);
            return NB_ENOMEM;
        }
        int rc = 0;
        for (int64_t e = 0; e < n_mat && rc == 0; e++) {
            for (int64_t r = 0; r < rows; r++)
                t->qt->to_float(t->data + (size_t)e * t->mat_bytes + (size_t)r * t->row_bytes, buf + r * m.n_in, m.n_in);
            cudaError_t ce = cudaMemcpy((uint8_t *)d + (size_t)e * m.mat_bytes, buf, m.mat_bytes, cudaMemcpyHostToDevice);
            if (ce != cudaSuccess) rc = cu_fail(ce, "cudaMemcpy (widened weights)", __LINE__);
        }
        free(buf);
        TRY(rc);
    }
    m.d = (const uint8_t *)d;
    if (be->n_ups == be->cap_ups) {
        int cap = be->cap_ups ? 2 * be->cap_ups : 256;
        upload *u = (upload *)realloc(be->ups, (size_t)cap * sizeof *u);
        if (!u) {
            snprintf(g_msg, sizeof g_msg, "out of host memory");
            return NB_ENOMEM;
        }
        be->ups = u, be->cap_ups = cap;
    }
    be->ups[be->n_ups++] = upload{t->data, m};
    *out = m;
    return 0;
}

/* A small tensor as fp32 on the device (NULL when absent). */
static int up_f32(cuda_backend *be, const struct model_tensor *t, float **out)
{
    *out = NULL;
    if (!t->data) return 0;
    float *h = cpu_dequant_all(t);
    if (!h) {
        snprintf(g_msg, sizeof g_msg, "out of host memory for %s", t->name);
        return NB_ENOMEM;
    }
    size_t bytes = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]) * sizeof(float);
    void *d;
    int rc = cu_dev_alloc(be, &d, bytes);
    if (rc == 0) {
        cudaError_t ce = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) rc = cu_fail(ce, "cudaMemcpy (small tensor)", __LINE__);
    }
    free(h);
    *out = (float *)d;
    return rc;
}

int cu_up_hc(cuda_backend *be, const struct model_hc *h, cu_hc *o)
{
    TRY(cu_up_mat(be, &h->down, &o->down));
    TRY(cu_up_mat(be, &h->up, &o->up));
    TRY(cu_up_mat(be, &h->inject, &o->inject));
    return up_f32(be, &h->norm, &o->norm);
}

int cu_up_layer(cuda_backend *be, const struct model *m, const struct model_layer *l, cu_layer *c)
{
    TRY(cu_up_hc(be, &l->hc_attn, &c->hc_attn));
    TRY(cu_up_hc(be, &l->hc_ffn, &c->hc_ffn));
    TRY(cu_up_mat(be, &l->gdn.qkv, &c->qkv));
    TRY(cu_up_mat(be, &l->gdn.gate, &c->z));
    TRY(cu_up_mat(be, &l->gdn.alpha, &c->alpha));
    TRY(cu_up_mat(be, &l->gdn.beta, &c->beta));
    TRY(cu_up_mat(be, &l->gdn.out, &c->gdn_out));
    TRY(up_f32(be, &l->gdn.conv, &c->gdn_conv));
    TRY(up_f32(be, &l->gdn.dt_bias, &c->dt_bias));
    TRY(up_f32(be, &l->gdn.a, &c->gdn_a));
    TRY(up_f32(be, &l->gdn.norm, &c->gdn_norm));
    TRY(cu_up_mat(be, &l->attn.q, &c->q));
    TRY(cu_up_mat(be, &l->attn.k, &c->k));
    TRY(cu_up_mat(be, &l->attn.v, &c->v));
    TRY(cu_up_mat(be, &l->attn.o, &c->o));
    TRY(cu_up_mat(be, &l->attn.idx_q, &c->idx_q));
    TRY(cu_up_mat(be, &l->attn.idx_k, &c->idx_k));
    TRY(up_f32(be, &l->attn.q_norm, &c->q_norm));
    TRY(up_f32(be, &l->attn.k_norm, &c->k_norm));
    TRY(up_f32(be, &l->attn.idx_q_norm, &c->idx_q_norm));
    TRY(up_f32(be, &l->attn.idx_k_norm, &c->idx_k_norm));
    TRY(cu_up_mat(be, &l->moe.router, &c->router));
    /* the routed experts go into slots later (cu_expert_layout) */
    TRY(cu_up_mat(be, &l->moe.gate_shexp, &c->gate_sh));
    TRY(cu_up_mat(be, &l->moe.up_shexp, &c->up_sh));
    TRY(cu_up_mat(be, &l->moe.down_shexp, &c->down_sh));
    TRY(up_f32(be, &l->moe.shexp_gate, &c->shexp_gate));
    TRY(cu_up_mat(be, &l->ple.key, &c->ple_key));
    TRY(cu_up_mat(be, &l->ple.value, &c->ple_value));
    TRY(up_f32(be, &l->ple.norm_key, &c->ple_norm_key));
    TRY(up_f32(be, &l->ple.norm_query, &c->ple_norm_query));
    TRY(up_f32(be, &l->ple.norm_conv, &c->ple_norm_conv));
    TRY(up_f32(be, &l->ple.conv, &c->ple_conv));
    if (l->is_nextn) {
        TRY(cu_up_mat(be, &l->nextn.eh_proj, &c->eh_proj));
        TRY(up_f32(be, &l->nextn.enorm, &c->enorm));
        TRY(up_f32(be, &l->nextn.hnorm, &c->hnorm));
        TRY(cu_up_hc(be, &l->nextn.head, &c->head));
        TRY(cu_up_mat(be, l->nextn.embed_tokens.data ? &l->nextn.embed_tokens : &m->tok_embd, &c->embed));
        TRY(cu_up_mat(be, l->nextn.shared_head.data ? &l->nextn.shared_head : &m->output, &c->head_out));
    }
    return 0;
}
