/* stream.cu — a prefill chunk's MoE layer expert by expert, the missed
 * experts copied from host memory into a device ring (issue 14 items 1-2;
 * engine/backend.h gw_expert_host, engine/moe_plan.h).
 *
 * An eval of more than gw_expert_host.min_rows rows on a backend with host copies
 * of experts (the RAM arena, mapped and page-locked by the gpu-worker) routes
 * on the device and brings the routes to the host, which plans the layer
 * (moe_plan_build): the T·k pairs sorted by expert, cut into batches of at
 * most GW_STREAM_PAIRS.  The streamed experts go GW_STREAM_GROUP at a time
 * into one half of a two-half ring on a copy stream while the compute stream
 * runs the previous group's batches from the other half.  A batch gathers its
 * pairs' input rows and runs the same pair kernels the resident experts use
 * (cu_matmul_pairs): once with the slot arrays (resident pairs), once with
 * the ring's matrices at the blob's part offsets, the blob size the stride
 * (streamed pairs); pairs of experts without a host copy (SSD tier) come from
 * the remote hook, called once for the layer before the batches.  Each pair's
 * output is weighted as k_scale_pairs weights it, and added to its row of y in
 * ascending expert id, starting from 0: the float additions of k_expert_sum
 * in its order.  So the logits are the bits of an all-resident layout, the
 * temporaries are bounded whatever the chunk, and each expert is read (and
 * copied) once per chunk.  The slot cache is not touched.
 *
 * Events: copy[h] — a group's blobs are in half h (group % 2); used[h] — the
 * compute stream is done with half h, so the group after next may overwrite
 * it.  The host issues copy(0), copy(1), batches of 0, copy(2), batches of
 * 1, …: a wait is always enqueued after the record it waits for.
 * engine/vram.c counts the ring and a batch's temporaries in the scratch
 * (gw_vram_stream_bytes). */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "engine/moe_plan.h"
}

/* out[i] = x[rows[i]] (C floats a row) */
__global__ void k_gather_rows(const float *x, const int32_t *rows, int n, int64_t C, float *out)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    out[idx] = x[(int64_t)rows[idx / C] * C + idx % C];
}

/* v[i] = i for i < n, v[n] = -1: the ring's slot table (a pair of another source names n) */
__global__ void k_iota(int32_t *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) v[i] = i < n ? i : -1;
}

/* d[i] = the remote result r[ridx[i]] (weighted by the hook) or w[i] · d[i] (k_scale_pairs' product) */
__global__ void k_pair_out(float *d, const float *w, const uint8_t *src, const int32_t *ridx, const float *r, int n, int64_t C)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    const int64_t i = idx / C;
    d[idx] = src[i] == MOE_SRC_REMOTE ? r[(int64_t)ridx[i] * C + idx % C] : w[i] * d[idx];
}

/* y[row[r]] += the batch's pairs of that row, one after the other in ascending expert id (one thread a value) */
__global__ void k_accumulate(const float *d, const int32_t *row, const int32_t *off, const int32_t *idx, int n_rows,
                             int64_t C, float *y)
{
    int64_t at = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (at >= (int64_t)n_rows * C) return;
    const int r = (int)(at / C);
    const int64_t c = at % C;
    float *yp = y + (int64_t)row[r] * C + c;
    float acc = *yp;
    for (int a = off[r]; a < off[r + 1]; a++) acc += d[(int64_t)idx[a] * C + c];
    *yp = acc;
}

static void host_free(cuda_backend *be)
{
    if (be->xh_pinned) cudaHostUnregister(be->xh_pinned);
    be->xh_pinned = NULL;
    free(be->xh_blob), free(be->xh_part), free(be->xh_bytes);
    be->xh_blob = NULL, be->xh_part = NULL, be->xh_bytes = NULL;
}

void cu_stream_free(cuda_backend *be)
{
    host_free(be);
    if (be->st_copy) cudaStreamDestroy(be->st_copy);
    for (int h = 0; h < 2; h++) {
        if (be->ev_copy[h]) cudaEventDestroy(be->ev_copy[h]);
        if (be->ev_used[h]) cudaEventDestroy(be->ev_used[h]);
    }
    if (be->ev_ring) cudaEventDestroy(be->ev_ring);
    be->st_copy = NULL, be->ev_copy[0] = be->ev_copy[1] = be->ev_used[0] = be->ev_used[1] = be->ev_ring = NULL;
    cudaFreeHost(be->h_stream);
    be->h_stream = NULL, be->h_stream_cap = 0;
}

int cuda_set_expert_host(gw_backend *gb, const struct gw_expert_host *h, char *err, size_t errlen)
{
    cuda_backend *be = cbe(gb);
    const struct model_hparams *hp = &gb->model->hp;
    const int n = hp->n_layer + hp->n_nextn, E = hp->n_expert;
    cudaError_t ce = cudaStreamSynchronize(be->st); /* no copy of the old blobs is still in flight */
    if (ce == cudaSuccess && be->st_copy) ce = cudaStreamSynchronize(be->st_copy);
    cu_adapt_quiesce(be); /* nor a slot's copy (adapt.cu) */
    if (ce != cudaSuccess) return nb_errf(err, errlen, NB_EIO, "host experts: %s", cudaGetErrorString(ce));
    host_free(be);
    if (!h) return 0;
    be->xh_blob = (const uint8_t **)malloc((size_t)n * E * sizeof *be->xh_blob);
    be->xh_part = (uint64_t *)malloc((size_t)n * 3 * sizeof *be->xh_part);
    be->xh_bytes = (uint64_t *)malloc((size_t)n * sizeof *be->xh_bytes);
    if (!be->xh_blob || !be->xh_part || !be->xh_bytes) {
        host_free(be);
        return nb_errf(err, errlen, NB_ENOMEM, "out of host memory");
    }
    memcpy(be->xh_blob, h->blob, (size_t)n * E * sizeof *be->xh_blob);
    memcpy(be->xh_part, h->part_off, (size_t)n * 3 * sizeof *be->xh_part);
    memcpy(be->xh_bytes, h->blob_bytes, (size_t)n * sizeof *be->xh_bytes);
    be->xh_min_rows = gw_stream_min_rows(h->min_rows);
    if (!be->st_copy) {
        ce = cudaStreamCreateWithFlags(&be->st_copy, cudaStreamNonBlocking);
        for (int i = 0; i < 2 && ce == cudaSuccess; i++) {
            ce = cudaEventCreateWithFlags(&be->ev_copy[i], cudaEventDisableTiming);
            if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&be->ev_used[i], cudaEventDisableTiming);
        }
        if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&be->ev_ring, cudaEventDisableTiming);
        if (ce != cudaSuccess) {
            host_free(be);
            return nb_errf(err, errlen, NB_EIO, "host experts: the copy stream: %s", cudaGetErrorString(ce));
        }
    }
    /* Page-locked, the copies run at the link's speed; pageable, the driver
     * stages them (slower, still correct): a refusal is not an error. */
    if (h->pin && h->pin_bytes) {
        ce = cudaHostRegister((void *)h->pin, (size_t)h->pin_bytes, cudaHostRegisterPortable);
        if (ce == cudaSuccess) be->xh_pinned = (void *)h->pin;
        else {
            cudaGetLastError(); /* not sticky: clear it */
            fprintf(stderr, "host experts: %.1f MiB could not be page-locked (%s): copies go through the driver's staging\n",
                    (double)h->pin_bytes / 1048576.0, cudaGetErrorString(ce));
        }
    }
    return 0;
}

bool cu_streamable(const cuda_backend *be, int il, int e)
{
    if (!be->xh_blob || !be->xh_blob[(size_t)il * be->base.model->hp.n_expert + e]) return false;
    const struct model_moe *w = &be->base.model->layers[il].moe;
    return dev_decodes(w->gate_exps.type) && dev_decodes(w->up_exps.type) && dev_decodes(w->down_exps.type);
}


/* The pinned staging of one layer's plan: `words` 4-byte words. */
static int stream_pin(cuda_backend *be, int64_t words)
{
    if (words <= be->h_stream_cap) return 0;
    CK(cudaStreamSynchronize(be->st)); /* the previous layer's list may still be read */
    cudaFreeHost(be->h_stream);
    be->h_stream = NULL, be->h_stream_cap = 0;
    CK(cudaMallocHost(&be->h_stream, (size_t)words * sizeof(int32_t)));
    be->h_stream_cap = words;
    return 0;
}

/* A part of the ring's experts as a matrix: t's shape and type, rows at the blob's part offset, blob_bytes apart. */
static dmat ring_mat(const struct model_tensor *t, const uint8_t *half, uint64_t part_off, uint64_t blob_bytes)
{
    dmat m;
    m.d = half + part_off;
    m.type = t->type;
    m.n_in = t->ne[0], m.n_out = t->ne[1];
    m.row_bytes = t->row_bytes;
    m.mat_bytes = (size_t)blob_bytes;
    return m;
}

/* The remote pairs of the plan (sources without a slot or a host copy) through the hook, their weighted outputs
 * into *dres (device, one row each in plan order; ridx[i] the row of plan pair i). */
static int remote_pairs(cuda_backend *be, tmp *t, int il, const float *x, int T, const struct moe_plan *pl, int n_r,
                        int32_t *ridx, float **dres)
{
    const struct gw_moe_remote *rem = &be->base.remote;
    const int64_t C = be->base.model->hp.n_embd;
    if (!rem->fn) {
        snprintf(g_msg, sizeof g_msg, "layer %d: %d pairs of experts neither resident nor in host memory, and no remote hook", il, n_r);
        return NB_EINVAL;
    }
    TRY(cu_pin_reserve(be, n_r, T));
    CK(cudaMemcpyAsync(be->h_x, x, (size_t)(T * C) * sizeof(float), cudaMemcpyDeviceToHost, be->st));
    CK(cudaStreamSynchronize(be->st));
    int32_t *rows = be->h_split, *exps = rows + n_r; /* 1 + 3·P words: room for 2·n_r */
    for (int i = 0, j = 0; i < pl->n_pairs; i++)
        if (pl->src[i] == MOE_SRC_REMOTE) rows[j] = pl->row[i], exps[j] = pl->expert[i], be->h_splitw[j] = pl->weight[i], ridx[i] = j++;
    char herr[256] = "";
    if (rem->fn(rem->ctx, il, T, be->h_x, n_r, rows, exps, be->h_splitw, be->h_rout, herr, sizeof herr)) {
        snprintf(g_msg, sizeof g_msg, "remote experts of layer %d: %s", il, herr);
        return NB_EIO;
    }
    TRY(cu_talloc(t, dres, (int64_t)n_r * C));
    CK(cudaMemcpyAsync(*dres, be->h_rout, (size_t)n_r * C * sizeof(float), cudaMemcpyHostToDevice, be->st));
    cu_copied(be, (uint64_t)n_r * C * sizeof(float));
    return 0;
}

int cu_moe_expert_major(cuda_backend *be, const cu_layer *c, int il, const float *x, int T, float *y,
                        const struct gw_eval_args *a)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const struct model_moe *w = &m->layers[il].moe;
    const int E = hp->n_expert, k = hp->n_expert_used, I = hp->n_ff_exp, P = T * k, G = GW_STREAM_GROUP;
    const int64_t C = hp->n_embd, Is = hp->n_ff_shexp;
    const uint64_t bb = be->xh_bytes[il];
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *probs, *dids, *dwts, *gs, *us, *ds, *sc, *dplan = NULL, *dres = NULL, *ring = NULL, *iota = NULL;
    float *X = NULL, *Gm = NULL, *U = NULL, *D = NULL;
    int rc = cu_talloc(&t, &probs, (int64_t)T * E);
    if (rc == 0) rc = cu_talloc(&t, &dids, P);
    if (rc == 0) rc = cu_talloc(&t, &dwts, P);
    if (rc == 0) rc = cu_talloc(&t, &gs, T * Is);
    if (rc == 0) rc = cu_talloc(&t, &us, T * Is);
    if (rc == 0) rc = cu_talloc(&t, &ds, T * C);
    if (rc == 0) rc = cu_talloc(&t, &sc, T);
    if (rc == 0) rc = cu_route(be, c, x, T, probs, (int32_t *)dids, dwts);
    if (rc == 0) rc = cu_shared_expert(be, c, x, T, gs, us, ds, sc); /* queued: the device works while the host plans */
    /* the routes to the host, then the plan */
    const int64_t words = 11 * (int64_t)P + 16;
    if (rc == 0) rc = stream_pin(be, words);
    if (rc) return cu_tdone(&t, rc);
    int32_t *h_ids = be->h_stream, *hp_ = h_ids + 2 * P;
    float *h_w = (float *)(h_ids + P);
    cudaError_t ce = cudaMemcpyAsync(h_ids, dids, (size_t)P * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(h_w, dwts, (size_t)P * sizeof(float), cudaMemcpyDeviceToHost, st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
    if (ce != cudaSuccess) return cu_tdone(&t, cu_fail(ce, "routes to the host", __LINE__));
    if (a && a->route_tap) a->route_tap(a->route_ctx, il, T, k, h_ids, h_w);
    uint8_t *src = (uint8_t *)malloc((size_t)E);
    struct moe_plan pl = {0};
    if (!src) return cu_tdone(&t, NB_ENOMEM);
    for (int e = 0; e < E; e++)
        src[e] = cu_resident(be, il, e) ? MOE_SRC_RESIDENT
                 : cu_streamable(be, il, e)                                   ? MOE_SRC_STREAM
                                                                              : MOE_SRC_REMOTE;
    rc = moe_plan_build(&pl, T, k, E, h_ids, h_w, src, G, GW_STREAM_PAIRS);
    free(src);
    if (rc) {
        snprintf(g_msg, sizeof g_msg, "layer %d: planning its %d pairs failed", il, P);
        return cu_tdone(&t, rc);
    }
    /* the plan's device arrays, one copy: per pair row, expert, ring position (G: not streamed), remote row,
     * weight; per batch row the accumulation CSR; the sources as bytes */
    int32_t *h_row = hp_, *h_exp = h_row + P, *h_pos = h_exp + P, *h_ridx = h_pos + P, *h_acc = h_ridx + 2 * P;
    float *h_wt = (float *)(h_ridx + P);
    const int R = pl.n_batches ? pl.batch[pl.n_batches - 1].r1 : 0;
    int n_r = 0;
    for (int i = 0; i < P; i++) {
        h_row[i] = pl.row[i], h_exp[i] = pl.expert[i], h_pos[i] = pl.ring_pos[i] >= 0 ? pl.ring_pos[i] : G;
        h_ridx[i] = 0, h_wt[i] = pl.weight[i], n_r += pl.src[i] == MOE_SRC_REMOTE;
    }
    int32_t *h_accrow = h_acc, *h_accoff = h_accrow + R, *h_accidx = h_accoff + R + 1;
    memcpy(h_accrow, pl.acc_row, (size_t)R * sizeof *h_accrow);
    memcpy(h_accoff, pl.acc_off, (size_t)(R + 1) * sizeof *h_accoff);
    memcpy(h_accidx, pl.acc_idx, (size_t)P * sizeof *h_accidx);
    uint8_t *h_src = (uint8_t *)(h_accidx + P);
    memcpy(h_src, pl.src, (size_t)P);
    const int64_t plan_words = ((int64_t)((h_src + P) - (uint8_t *)hp_) + 3) / 4;
    if (n_r > 0) rc = remote_pairs(be, &t, il, x, T, &pl, n_r, h_ridx, &dres);
    if (rc == 0) rc = cu_talloc(&t, &dplan, plan_words);
    if (rc == 0 && pl.n_load > 0) rc = cu_talloc(&t, &ring, (int64_t)((2 * (uint64_t)G * bb + 3) / 4));
    if (rc == 0) rc = cu_talloc(&t, &iota, G + 1);
    const int64_t chunk = P < GW_STREAM_PAIRS ? P : GW_STREAM_PAIRS;
    if (rc == 0) rc = cu_talloc(&t, &X, chunk * C);
    if (rc == 0) rc = cu_talloc(&t, &Gm, chunk * I);
    if (rc == 0) rc = cu_talloc(&t, &U, chunk * I);
    if (rc == 0) rc = cu_talloc(&t, &D, chunk * C);
    if (rc == 0) {
        ce = cudaMemcpyAsync(dplan, hp_, (size_t)plan_words * sizeof(int32_t), cudaMemcpyHostToDevice, st);
        cu_copied(be, (uint64_t)plan_words * sizeof(int32_t));
        if (ce == cudaSuccess) ce = cudaMemsetAsync(y, 0, (size_t)(T * C) * sizeof(float), st);
        if (ce == cudaSuccess) {
            k_iota<<<1, G + 1, 0, st>>>((int32_t *)iota, G);
            ce = cudaGetLastError();
        }
        /* the ring is a stream-ordered allocation of the compute stream: the copy stream waits for it */
        if (ce == cudaSuccess) ce = cudaEventRecord(be->ev_ring, st);
        if (ce == cudaSuccess) ce = cudaStreamWaitEvent(be->st_copy, be->ev_ring, 0);
        if (ce != cudaSuccess) rc = cu_fail(ce, "the layer's plan", __LINE__);
    }
    const int32_t *d_row = (const int32_t *)dplan, *d_exp = d_row + P, *d_pos = d_exp + P, *d_ridx = d_pos + P;
    const float *d_wt = (const float *)(d_ridx + P);
    const int32_t *d_accrow = d_ridx + 2 * P, *d_accoff = d_accrow + R, *d_accidx = d_accoff + R + 1;
    const uint8_t *d_src = (const uint8_t *)(d_accidx + P);
    uint8_t *halves[2] = {(uint8_t *)ring, (uint8_t *)ring + (size_t)G * bb};
    /* group g's experts into half g % 2, after the compute stream is done with group g - 2's */
    auto copy_group = [&](int g) -> cudaError_t {
        const int h = g & 1;
        cudaError_t e = cudaSuccess;
        if (pl.load_off[g + 1] == pl.load_off[g]) return e;
        if (g >= 2 && (e = cudaStreamWaitEvent(be->st_copy, be->ev_used[h], 0)) != cudaSuccess) return e;
        for (int l = pl.load_off[g]; l < pl.load_off[g + 1] && e == cudaSuccess; l++) {
            e = cudaMemcpyAsync(halves[h] + (size_t)(l - pl.load_off[g]) * bb, be->xh_blob[(size_t)il * E + pl.load[l]],
                                (size_t)bb, cudaMemcpyHostToDevice, be->st_copy);
            cu_copied(be, bb);
        }
        return e == cudaSuccess ? cudaEventRecord(be->ev_copy[h], be->st_copy) : e;
    };
    for (int g = 0; g < 2 && g < pl.n_groups && rc == 0; g++)
        if ((ce = copy_group(g)) != cudaSuccess) rc = cu_fail(ce, "streamed experts", __LINE__);
    for (int g = 0, b = 0; g < pl.n_groups && rc == 0; g++) {
        const int h = g & 1;
        const bool loads = pl.load_off[g + 1] > pl.load_off[g];
        if (loads && (ce = cudaStreamWaitEvent(st, be->ev_copy[h], 0)) != cudaSuccess) {
            rc = cu_fail(ce, "streamed experts", __LINE__);
            break;
        }
        const dmat rg = ring_mat(&w->gate_exps, halves[h], be->xh_part[3 * il + 0], bb);
        const dmat ru = ring_mat(&w->up_exps, halves[h], be->xh_part[3 * il + 1], bb);
        const dmat rd = ring_mat(&w->down_exps, halves[h], be->xh_part[3 * il + 2], bb);
        for (; b < pl.n_batches && pl.batch[b].group == g && rc == 0; b++) {
            const struct moe_batch *B = &pl.batch[b];
            const int p0 = B->p0, np = B->p1 - B->p0;
            bool has[3] = {false, false, false};
            for (int i = p0; i < B->p1; i++) has[pl.src[i]] = true;
            k_gather_rows<<<nblk((int64_t)np * C, 256), 256, 0, st>>>(x, d_row + p0, np, C, X);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
            if (has[MOE_SRC_RESIDENT]) {
                rc = cu_matmul_pairs(be, c->gate_exps, X, C, np, d_exp + p0, 1, c->slot_of, Gm);
                if (rc == 0) rc = cu_matmul_pairs(be, c->up_exps, X, C, np, d_exp + p0, 1, c->slot_of, U);
            }
            if (rc == 0 && has[MOE_SRC_STREAM]) {
                rc = cu_matmul_pairs(be, rg, X, C, np, d_pos + p0, 1, (const int32_t *)iota, Gm);
                if (rc == 0) rc = cu_matmul_pairs(be, ru, X, C, np, d_pos + p0, 1, (const int32_t *)iota, U);
            }
            if (rc) break;
            cu_swiglu(st, Gm, U, (int64_t)np * I);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
            if (has[MOE_SRC_RESIDENT]) rc = cu_matmul_pairs(be, c->down_exps, Gm, I, np, d_exp + p0, 1, c->slot_of, D);
            if (rc == 0 && has[MOE_SRC_STREAM]) rc = cu_matmul_pairs(be, rd, Gm, I, np, d_pos + p0, 1, (const int32_t *)iota, D);
            if (rc) break;
            k_pair_out<<<nblk((int64_t)np * C, 256), 256, 0, st>>>(D, d_wt + p0, d_src + p0, d_ridx + p0, dres, np, C);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
            const int nr = B->r1 - B->r0;
            k_accumulate<<<nblk((int64_t)nr * C, 256), 256, 0, st>>>(D, d_accrow + B->r0, d_accoff + B->r0, d_accidx, nr, C, y);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
        }
        if (rc == 0 && ce == cudaSuccess && loads) ce = cudaEventRecord(be->ev_used[h], st);
        if (rc == 0 && ce == cudaSuccess && g + 2 < pl.n_groups) ce = copy_group(g + 2);
        if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "streamed experts", __LINE__);
    }
    /* the pairs run here, counted as they are dispatched (trunk layers only) */
    if (rc == 0 && il < hp->n_layer) __atomic_add_fetch(&be->base.experts_computed, (uint64_t)(P - n_r), __ATOMIC_RELAXED);
    if (rc == 0) rc = cu_add_shared(be, y, ds, sc, T);
    moe_plan_free(&pl);
    return cu_tdone(&t, rc);
}
