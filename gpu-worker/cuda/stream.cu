/* stream.cu — routed experts copied from host memory into a device ring and
 * computed there (issue 14 item 2; engine/backend.h gw_expert_host).
 *
 * An eval of more than GW_STREAM_MIN_ROWS rows (a prefill chunk) routes on
 * the device, and the host learns its misses (moe.cu: k_split behind an
 * event).  Those whose expert has a host blob (the RAM arena, mapped and
 * page-locked by the gpu-worker) are computed here instead of by the remote
 * hook: their experts, in ascending id, go GW_STREAM_GROUP at a time into one
 * half of a two-half ring on a copy stream, while the compute stream runs
 * the previous group from the other half.  A group's pairs are gathered
 * (their input rows packed), multiplied with the same pair kernels the
 * resident experts use (cu_matmul_pairs: the ring's matrices at the blob's
 * part offsets, the blob size as the stride between experts), and their
 * weighted outputs written to the pairs' contribution rows, which moe.cu sums
 * per token in ascending expert id with the rest.  Same kernels, same
 * inputs, same weights: the bits of an all-resident layout.  The slot cache
 * is not touched.
 *
 * Events: copy[h] — group g's blobs are in half h (g % 2); used[h] — the
 * compute stream is done with half h, so group g + 2 may overwrite it.  A
 * group's pairs are done GW_STREAM_PAIRS at a time, which bounds the
 * temporaries whatever the chunk; engine/vram.c counts the ring and them in
 * the scratch (gw_vram_stream_bytes). */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

#include <stdlib.h>
#include <string.h>

/* out[i] = x[rows[i]] (C floats a row) */
__global__ void k_gather_rows(const float *x, const int32_t *rows, int n, int64_t C, float *out)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    out[idx] = x[(int64_t)rows[idx / C] * C + idx % C];
}

/* contrib[pair[i]] = w[i] · d[i] (moe.cu's k_scale_pairs, for packed pairs) */
__global__ void k_scale_scatter(const float *d, const float *w, const int32_t *pair, int n, int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    const int64_t i = idx / C;
    contrib[(int64_t)pair[i] * C + idx % C] = w[i] * d[idx];
}

__global__ void k_iota(int32_t *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = i;
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

/* The pinned list of one call's packed pairs: rows, ring positions, pair indices, weights (4 words a pair). */
static int stream_pin(cuda_backend *be, int64_t n)
{
    if (n <= be->h_stream_cap) return 0;
    CK(cudaStreamSynchronize(be->st)); /* the previous call's list may still be read */
    cudaFreeHost(be->h_stream);
    be->h_stream = NULL, be->h_stream_cap = 0;
    CK(cudaMallocHost(&be->h_stream, (size_t)(4 * n) * sizeof(int32_t)));
    be->h_stream_cap = n;
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

int cu_stream_pairs(cuda_backend *be, int il, const float *x, int n, const int32_t *rows, const int32_t *experts,
                    const int32_t *pairs, const float *wts, float *contrib, int *n_streamed)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    const struct model_moe *w = &m->layers[il].moe;
    const int E = hp->n_expert, I = hp->n_ff_exp;
    const int64_t C = hp->n_embd;
    const uint64_t bb = be->xh_bytes[il];
    cudaStream_t st = be->st;
    *n_streamed = 0;
    if (n <= 0) return 0;
    /* the pairs by expert, ascending (a counting sort; pairs of one expert keep their order) */
    int *start = (int *)calloc((size_t)E + 1, sizeof *start), *order = (int *)malloc((size_t)n * sizeof *order);
    if (!start || !order) {
        free(start), free(order);
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int i = 0; i < n; i++) start[experts[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    {
        int *fill = (int *)malloc((size_t)E * sizeof *fill);
        if (!fill) {
            free(start), free(order);
            snprintf(g_msg, sizeof g_msg, "out of host memory");
            return NB_ENOMEM;
        }
        memcpy(fill, start, (size_t)E * sizeof *fill);
        for (int i = 0; i < n; i++) order[fill[experts[i]]++] = i;
        free(fill);
    }
    int rc = stream_pin(be, n);
    /* the packed list, group by group: row, ring position in its half, pair index, weight */
    int32_t *hr = be->h_stream, *hq = hr + n, *hpair = hq + n;
    float *hw = (float *)(hpair + n);
    int n_exp = 0;
    for (int e = 0, j = 0; e < E && rc == 0; e++) {
        if (start[e + 1] == start[e]) continue;
        for (int a = start[e]; a < start[e + 1]; a++, j++) {
            const int i = order[a];
            hr[j] = rows[i], hq[j] = n_exp % GW_STREAM_GROUP, hpair[j] = pairs[i], hw[j] = wts[i];
        }
        n_exp++;
    }
    tmp t = tmp_begin(be);
    float *dlist = NULL, *ring = NULL, *iota = NULL, *X = NULL, *G = NULL, *U = NULL, *D = NULL;
    const int64_t chunk = n < GW_STREAM_PAIRS ? n : GW_STREAM_PAIRS;
    if (rc == 0) rc = cu_talloc(&t, &dlist, 4 * (int64_t)n);
    if (rc == 0) rc = cu_talloc(&t, &ring, (int64_t)((2 * GW_STREAM_GROUP * bb + 3) / 4));
    if (rc == 0) rc = cu_talloc(&t, &iota, GW_STREAM_GROUP);
    if (rc == 0) rc = cu_talloc(&t, &X, chunk * C);
    if (rc == 0) rc = cu_talloc(&t, &G, chunk * I);
    if (rc == 0) rc = cu_talloc(&t, &U, chunk * I);
    if (rc == 0) rc = cu_talloc(&t, &D, chunk * C);
    cudaError_t ce = cudaSuccess;
    if (rc == 0) {
        ce = cudaMemcpyAsync(dlist, be->h_stream, (size_t)(4 * n) * sizeof(int32_t), cudaMemcpyHostToDevice, st);
        cu_copied(be, (uint64_t)(4 * n) * sizeof(int32_t));
        if (ce == cudaSuccess) {
            k_iota<<<1, GW_STREAM_GROUP, 0, st>>>((int32_t *)iota, GW_STREAM_GROUP);
            ce = cudaGetLastError();
        }
        /* the ring exists on the compute stream (a stream-ordered allocation): the copy stream waits for it */
        if (ce == cudaSuccess) ce = cudaEventRecord(be->ev_ring, st);
        if (ce == cudaSuccess) ce = cudaStreamWaitEvent(be->st_copy, be->ev_ring, 0);
        if (ce != cudaSuccess) rc = cu_fail(ce, "streamed experts: the pair list", __LINE__);
    }
    const int32_t *drow = (const int32_t *)dlist, *dq = drow + n, *dpair = dq + n;
    const float *dw = (const float *)(dpair + n);
    uint8_t *halves[2] = {(uint8_t *)ring, (uint8_t *)ring + GW_STREAM_GROUP * bb};
    int e = 0, p0 = 0; /* the next expert to look at; the first pair of the group */
    for (int g = 0; rc == 0 && g * GW_STREAM_GROUP < n_exp; g++) {
        const int h = g & 1;
        /* copy: group g's experts into half h, once the compute stream is done with group g - 2's */
        if (g >= 2 && (ce = cudaStreamWaitEvent(be->st_copy, be->ev_used[h], 0)) != cudaSuccess) break;
        int got = 0, p1 = p0;
        for (; e < E && got < GW_STREAM_GROUP; e++) {
            if (start[e + 1] == start[e]) continue;
            ce = cudaMemcpyAsync(halves[h] + (size_t)got * bb, be->xh_blob[(size_t)il * E + e], (size_t)bb,
                                 cudaMemcpyHostToDevice, be->st_copy);
            if (ce != cudaSuccess) break;
            cu_copied(be, bb);
            p1 += start[e + 1] - start[e];
            got++;
        }
        if (ce != cudaSuccess || (ce = cudaEventRecord(be->ev_copy[h], be->st_copy)) != cudaSuccess) break;
        if ((ce = cudaStreamWaitEvent(st, be->ev_copy[h], 0)) != cudaSuccess) break;
        /* compute: the group's pairs, chunk by chunk */
        const dmat wg = ring_mat(&w->gate_exps, halves[h], be->xh_part[3 * il + 0], bb);
        const dmat wu = ring_mat(&w->up_exps, halves[h], be->xh_part[3 * il + 1], bb);
        const dmat wd = ring_mat(&w->down_exps, halves[h], be->xh_part[3 * il + 2], bb);
        for (int a = p0; a < p1 && rc == 0; a += (int)chunk) {
            const int np = p1 - a < chunk ? p1 - a : (int)chunk;
            k_gather_rows<<<nblk((int64_t)np * C, 256), 256, 0, st>>>(x, drow + a, np, C, X);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
            rc = cu_matmul_pairs(be, wg, X, C, np, dq + a, 1, (const int32_t *)iota, G);
            if (rc == 0) rc = cu_matmul_pairs(be, wu, X, C, np, dq + a, 1, (const int32_t *)iota, U);
            if (rc) break;
            cu_swiglu(st, G, U, (int64_t)np * I);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
            if ((rc = cu_matmul_pairs(be, wd, G, I, np, dq + a, 1, (const int32_t *)iota, D))) break;
            k_scale_scatter<<<nblk((int64_t)np * C, 256), 256, 0, st>>>(D, dw + a, dpair + a, np, C, contrib);
            if ((ce = cudaGetLastError()) != cudaSuccess) break;
        }
        if (rc == 0 && ce == cudaSuccess) ce = cudaEventRecord(be->ev_used[h], st);
        p0 = p1;
    }
    if (rc == 0 && ce != cudaSuccess) rc = cu_fail(ce, "streamed experts", __LINE__);
    free(start), free(order);
    if (rc == 0) *n_streamed = n;
    return cu_tdone(&t, rc);
}
