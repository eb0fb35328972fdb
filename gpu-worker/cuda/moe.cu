/* moe.cu — the MoE layer on the device (engine/cpu/moe.c's twin): the
 * router's softmax and top-k, the resident pairs in their slots (slots.cu),
 * the shared expert, the misses handed to the remote hook (through the
 * mailbox inside the stream, mailbox.cu, or by the host behind an event),
 * and each token's k contributions added in ascending expert id, so
 * placement never changes the result. */
#include "gpu-worker/cuda/backend_cuda.h"
#include "gpu-worker/cuda/device.cuh"

/* g = silu(g) · u */
__global__ void k_swiglu(float *g, const float *u, int64_t n)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) g[i] = d_silu(g[i]) * u[i];
}

void cu_swiglu(cudaStream_t st, float *g, const float *u, int64_t n)
{
    k_swiglu<<<nblk(n, 256), 256, 0, st>>>(g, u, n);
}

/* Softmax of one token's E router logits (in place), top k (ties to the lower
 * expert), renormalised when asked.  One block per token, E floats of dynamic
 * shared memory. */
__global__ void k_route(float *probs, int E, int k, int norm, int32_t *ids, float *wts)
{
    extern __shared__ float sp[];
    __shared__ float bv[32];
    __shared__ int bi[32];
    float *x = probs + (int64_t)blockIdx.x * E;
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, x[e]);
    mx = block_max(mx);
    double sum = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) sum += exp((double)x[e] - mx);
    sum = block_sum(sum);
    for (int e = threadIdx.x; e < E; e += blockDim.x) sp[e] = x[e] = (float)(exp((double)x[e] - mx) / sum);
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int j = 0; j < k; j++) {
        float best = -INFINITY;
        int be = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (sp[e] >= 0 && (be < 0 || sp[e] > best)) best = sp[e], be = e; /* ascending e: first max kept */
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, best, o);
            int oe = __shfl_down_sync(0xffffffffu, be, o);
            if (oe >= 0 && (be < 0 || ov > best || (ov == best && oe < be))) best = ov, be = oe;
        }
        if (lane == 0) bv[warp] = best, bi[warp] = be;
        __syncthreads();
        if (threadIdx.x == 0) {
            float b = -INFINITY;
            int e = -1;
            for (int w = 0; w < nw; w++)
                if (bi[w] >= 0 && (e < 0 || bv[w] > b || (bv[w] == b && bi[w] < e))) b = bv[w], e = bi[w];
            ids[blockIdx.x * k + j] = e;
            wts[blockIdx.x * k + j] = b;
            sp[e] = -1.0f; /* taken (probabilities are ≥ 0) */
        }
        __syncthreads();
    }
    if (norm && threadIdx.x == 0) {
        double s = 0;
        for (int j = 0; j < k; j++) s += wts[blockIdx.x * k + j];
        for (int j = 0; j < k; j++) wts[blockIdx.x * k + j] = (float)(wts[blockIdx.x * k + j] / s);
    }
}

/* contrib[p] = wts[p] · d[p] for the resident pairs (remote ones are written by the host) */
__global__ void k_scale_pairs(const float *d, const float *wts, const int32_t *ids, const int32_t *slot, int P,
                              int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)P * C) return;
    int64_t p = idx / C;
    if (slot[ids[p]] < 0) return;
    contrib[idx] = wts[p] * d[idx];
}

/* The misses of a layer's P pairs (k per row), in ascending pair order: out[0]
 * = their count m; then out[1 …] rows, out[1+P …] expert ids, out[1+2P …]
 * pair indices (m of each), and ow[0 … m) their weights.  One block of
 * SPLIT_THREADS threads, each taking a contiguous run of pairs. */
#define SPLIT_THREADS 1024
__global__ void k_split(const int32_t *ids, const float *wts, const int32_t *slot, int P, int k, int32_t *out, float *ow)
{
    __shared__ int start[SPLIT_THREADS];
    const int per = (P + SPLIT_THREADS - 1) / SPLIT_THREADS, a = threadIdx.x * per, b = a + per < P ? a + per : P;
    int c = 0;
    for (int p = a; p < b; p++) c += slot[ids[p]] < 0;
    start[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0;
        for (int i = 0; i < SPLIT_THREADS; i++) {
            int n = start[i];
            start[i] = sum;
            sum += n;
        }
        out[0] = sum;
    }
    __syncthreads();
    int o = start[threadIdx.x];
    for (int p = a; p < b; p++)
        if (slot[ids[p]] < 0) {
            out[1 + o] = p / k, out[1 + P + o] = ids[p], out[1 + 2 * P + o] = p, ow[o] = wts[p];
            o++;
        }
}


/* contrib[slot[i]] = remote[i] */
__global__ void k_scatter_rows(const float *src, const int32_t *slot, int n, int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * C) return;
    contrib[(int64_t)slot[idx / C] * C + idx % C] = src[idx];
}

/* y[t][c] = Σ of the k contributions in ascending expert order (float adds, from 0). */
__global__ void k_expert_sum(const float *contrib, const int32_t *ids, int T, int k, int64_t C, float *y)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    int64_t t = idx / C, c = idx % C;
    int order[GW_CUDA_MAX_EXPERT_USED];
    for (int j = 0; j < k; j++) order[j] = j;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && ids[t * k + order[b]] < ids[t * k + order[b - 1]]; b--) {
            int tmp = order[b];
            order[b] = order[b - 1], order[b - 1] = tmp;
        }
    float s = 0;
    for (int j = 0; j < k; j++) s += contrib[(t * k + order[j]) * C + c];
    y[idx] = s;
}

/* sc[t] = sigmoid(w · x_t) */
__global__ void k_shexp_gate(const float *w, const float *x, int64_t C, float *sc)
{
    const float *xt = x + (int64_t)blockIdx.x * C;
    double d = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) d += (double)w[i] * xt[i];
    d = block_sum(d);
    if (threadIdx.x == 0) sc[blockIdx.x] = d_sigmoid((float)d);
}

/* y[t][c] += sc[t] · d[t][c] */
__global__ void k_add_scaled(float *y, const float *d, const float *sc, int T, int64_t C)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx < (int64_t)T * C) y[idx] += sc[idx / C] * d[idx];
}
/* ---------- the host side ---------- */

int cu_route(cuda_backend *be, const cu_layer *c, const float *x, int T, float *probs, int32_t *ids, float *wts)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int E = hp->n_expert, k = hp->n_expert_used;
    TRY(cu_matmul(be, c->router, x, hp->n_embd, T, probs, E));
    k_route<<<(unsigned)T, 256, (size_t)E * sizeof(float), be->st>>>(probs, E, k, hp->expert_weights_norm, ids, wts);
    CKL("k_route");
    return 0;
}

int cu_shared_expert(cuda_backend *be, const cu_layer *c, const float *x, int T, float *gs, float *us, float *ds, float *sc)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int64_t C = hp->n_embd, Is = hp->n_ff_shexp;
    k_shexp_gate<<<(unsigned)T, nthr(C), 0, be->st>>>(c->shexp_gate, x, C, sc);
    CKL("k_shexp_gate");
    TRY(cu_matmul(be, c->gate_sh, x, C, T, gs, Is));
    TRY(cu_matmul(be, c->up_sh, x, C, T, us, Is));
    k_swiglu<<<nblk(T * Is, 256), 256, 0, be->st>>>(gs, us, T * Is);
    CKL("k_swiglu (shared)");
    return cu_matmul(be, c->down_sh, gs, Is, T, ds, C);
}

int cu_add_shared(cuda_backend *be, float *y, const float *ds, const float *sc, int T)
{
    const int64_t C = be->base.model->hp.n_embd;
    k_add_scaled<<<nblk(T * C, 256), 256, 0, be->st>>>(y, ds, sc, T, C);
    CKL("k_add_scaled");
    return 0;
}

/* The pinned staging of the remote pairs (P pairs of T rows). */
int cu_pin_reserve(cuda_backend *be, int64_t P, int64_t T)
{
    const int64_t C = be->base.model->hp.n_embd;
    if (P <= be->pin_pairs && T <= be->pin_rows) return 0;
    CK(cudaStreamSynchronize(be->st)); /* earlier copies may still read or fill them */
    P = P > be->pin_pairs ? P : be->pin_pairs, T = T > be->pin_rows ? T : be->pin_rows;
    cudaFreeHost(be->h_split), cudaFreeHost(be->h_splitw), cudaFreeHost(be->h_x), cudaFreeHost(be->h_rout);
    cudaFreeHost(be->h_wts), cudaFreeHost(be->h_ids);
    be->h_split = NULL, be->h_splitw = be->h_x = be->h_rout = be->h_wts = NULL, be->h_ids = NULL;
    be->pin_pairs = be->pin_rows = 0;
    CK(cudaMallocHost(&be->h_split, (size_t)(1 + 3 * P) * sizeof(int32_t)));
    CK(cudaMallocHost(&be->h_splitw, (size_t)P * sizeof(float)));
    CK(cudaMallocHost(&be->h_x, (size_t)(T * C) * sizeof(float)));
    CK(cudaMallocHost(&be->h_rout, (size_t)(P * C) * sizeof(float)));
    CK(cudaMallocHost(&be->h_wts, (size_t)P * sizeof(float)));
    CK(cudaMallocHost(&be->h_ids, (size_t)P * sizeof(int32_t)));
    be->pin_pairs = P, be->pin_rows = T;
    return 0;
}

/* ---------- the layer ---------- */

/* Coverage mode (gw_eval_args.coverage) on the host's copy of a layer's
 * n_miss misses (hs: k_split's lists) and of its routing (wts: T × k): a row
 * whose slots carry at least τ of its weight drops its misses, the others
 * keep them all and are marked in a->handoff (the sums as the cpu backend's
 * coverage_skips makes them, so both decide alike).  keep[i]: whether miss i
 * stays.  Returns the misses dropped, -1 without memory. */
static int cover_misses(const struct gw_eval_args *a, int T, int k, int P, const int32_t *hs, const float *wts, int n_miss,
                        uint8_t *keep)
{
    uint8_t *missed = (uint8_t *)calloc((size_t)P, 1), *covered = (uint8_t *)malloc((size_t)T);
    if (!missed || !covered) return free(missed), free(covered), -1;
    for (int i = 0; i < n_miss; i++) missed[hs[1 + 2 * P + i]] = 1;
    for (int t = 0; t < T; t++) {
        double all = 0, here = 0;
        for (int j = 0; j < k; j++) all += wts[t * k + j], here += missed[t * k + j] ? 0 : wts[t * k + j];
        covered[t] = here >= (double)a->coverage * all;
    }
    int dropped = 0;
    for (int i = 0; i < n_miss; i++) {
        const int r = hs[1 + i];
        keep[i] = !covered[r];
        dropped += covered[r];
        if (!covered[r] && a->handoff) a->handoff[r] = 1;
    }
    free(missed), free(covered);
    return dropped;
}

/* The remote hook on the misses coverage mode keeps (all of them in exact
 * mode), its results into be->h_rout at each miss's place (zero for a
 * dropped one); the pairs dropped are counted. */
static int call_remote(cuda_backend *be, const struct gw_eval_args *a, int il, int T, int k, int P, int n_miss, bool cover)
{
    const struct gw_moe_remote *rem = &be->base.remote;
    const int64_t C = be->base.model->hp.n_embd;
    const int32_t *hs = be->h_split;
    char herr[256] = "";
    int rc = 0;
    if (!cover) {
        if ((rc = rem->fn(rem->ctx, il, T, be->h_x, n_miss, hs + 1, hs + 1 + P, be->h_splitw, be->h_rout, herr, sizeof herr)))
            snprintf(g_msg, sizeof g_msg, "remote experts of layer %d: %s", il, herr);
        return rc;
    }
    uint8_t *keep = (uint8_t *)malloc((size_t)n_miss);
    int32_t *rows = (int32_t *)malloc((size_t)n_miss * sizeof *rows), *exps = (int32_t *)malloc((size_t)n_miss * sizeof *exps);
    float *w = (float *)malloc((size_t)n_miss * sizeof *w), *out = (float *)malloc((size_t)n_miss * C * sizeof *out);
    const int dropped = keep && rows && exps && w && out ? cover_misses(a, T, k, P, hs, be->h_wts, n_miss, keep) : -1;
    if (dropped < 0) rc = NB_ENOMEM, snprintf(g_msg, sizeof g_msg, "coverage mode of layer %d: out of memory", il);
    int n = 0;
    for (int i = 0; rc == 0 && i < n_miss; i++)
        if (keep[i]) rows[n] = hs[1 + i], exps[n] = hs[1 + P + i], w[n++] = be->h_splitw[i];
    if (rc == 0 && n > 0 && (rc = rem->fn(rem->ctx, il, T, be->h_x, n, rows, exps, w, out, herr, sizeof herr)))
        snprintf(g_msg, sizeof g_msg, "remote experts of layer %d: %s", il, herr);
    for (int i = 0, j = 0; rc == 0 && i < n_miss; i++) {
        float *dst = be->h_rout + (int64_t)i * C;
        if (keep[i]) memcpy(dst, out + (int64_t)j++ * C, (size_t)C * sizeof *dst);
        else memset(dst, 0, (size_t)C * sizeof *dst);
    }
    if (rc == 0) __atomic_add_fetch(&be->base.experts_skipped, (uint64_t)dropped, __ATOMIC_RELAXED);
    free(keep), free(rows), free(exps), free(w), free(out);
    return rc;
}

/* y = MoE(x) for T rows of layer il (trunk or MTP); a: the eval (route tap) or NULL.
 *
 * The order overlaps the remote experts with the device's work: the router
 * and top-k run on the device, k_split lists the misses (experts without a
 * slot) there, and they are copied with x to pinned host memory, marked by
 * an event; then the resident pairs and the shared expert are queued, and
 * only then does the host wait — for the event, not for those kernels — and
 * call the hook, whose results are uploaded and scattered into their pairs'
 * contribution rows behind them.  Every token's k contributions are added
 * in ascending expert id whatever ran where, so placement never changes the
 * result. */
int cu_moe_forward(cuda_backend *be, const cu_layer *c, int il, const float *x, int T, float *y,
                   const struct gw_eval_args *a)
{
    /* a prefill chunk beside host copies of experts: expert by expert, streaming the missed ones (stream.cu) */
    if (be->xh_blob && T > be->xh_min_rows) return cu_moe_expert_major(be, c, il, x, T, y, a);
    const struct model_hparams *hp = &be->base.model->hp;
    const int E = hp->n_expert, k = hp->n_expert_used, I = hp->n_ff_exp, P = T * k;
    const int64_t C = hp->n_embd, Is = hp->n_ff_shexp;
    const struct gw_moe_remote *rem = &be->base.remote;
    const bool remote = rem->fn != NULL;
    const bool tap = a && a->route_tap;
    /* coverage mode (gw_eval_args.coverage): the host decides which misses to drop, from every row's weights */
    const bool cover = remote && a && a->verify && a->coverage > 0 && il < hp->n_layer;
    const bool via_mailbox = remote && !tap && !cover && T <= MAILBOX_ROWS && gw_mailbox_active(&be->mailbox);
    cudaStream_t st = be->st;
    tmp t = tmp_begin(be);
    float *probs, *wts, *idsf, *G, *U, *Dn, *contrib, *sc, *gs, *us, *ds, *splitf = NULL, *splitw = NULL, *dout = NULL;
    int rc = cu_talloc(&t, &probs, (int64_t)T * E);
    if (rc == 0) rc = cu_talloc(&t, &wts, P);
    if (rc == 0) rc = cu_talloc(&t, &idsf, P);
    if (rc == 0) rc = cu_talloc(&t, &G, (int64_t)P * I);
    if (rc == 0) rc = cu_talloc(&t, &U, (int64_t)P * I);
    if (rc == 0) rc = cu_talloc(&t, &Dn, P * C);
    if (rc == 0) rc = cu_talloc(&t, &contrib, P * C);
    if (rc == 0) rc = cu_talloc(&t, &sc, T);
    if (rc == 0) rc = cu_talloc(&t, &gs, T * Is);
    if (rc == 0) rc = cu_talloc(&t, &us, T * Is);
    if (rc == 0) rc = cu_talloc(&t, &ds, T * C);
    if (rc == 0 && remote) rc = cu_talloc(&t, &splitf, 1 + 3 * (int64_t)P);
    if (rc == 0 && remote) rc = cu_talloc(&t, &splitw, P);
    if (rc == 0 && ((remote && !via_mailbox) || tap)) rc = cu_pin_reserve(be, P, T);
    if (rc) return cu_tdone(&t, rc);
    int32_t *ids = (int32_t *)idsf, *split = (int32_t *)splitf;
    cudaError_t ce = cudaSuccess;
    if ((rc = cu_route(be, c, x, T, probs, ids, wts))) return cu_tdone(&t, rc);
    /* what the host needs, copied (or posted) before the expert work is queued */
    if (remote) {
        k_split<<<1, SPLIT_THREADS, 0, st>>>(ids, wts, c->slot_of, P, k, split, splitw);
        ce = cudaGetLastError();
        if (ce == cudaSuccess && via_mailbox) ce = cu_mailbox_post(be, split, splitw, x, T, C, P, il);
        if (ce == cudaSuccess && !via_mailbox)
            ce = cudaMemcpyAsync(be->h_split, split, (size_t)(1 + 3 * P) * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess && !via_mailbox)
            ce = cudaMemcpyAsync(be->h_splitw, splitw, (size_t)P * sizeof(float), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess && !via_mailbox)
            ce = cudaMemcpyAsync(be->h_x, x, (size_t)(T * C) * sizeof(float), cudaMemcpyDeviceToHost, st);
    }
    if (ce == cudaSuccess && (tap || cover)) {
        ce = cudaMemcpyAsync(be->h_ids, ids, (size_t)P * sizeof(int32_t), cudaMemcpyDeviceToHost, st);
        if (ce == cudaSuccess) ce = cudaMemcpyAsync(be->h_wts, wts, (size_t)P * sizeof(float), cudaMemcpyDeviceToHost, st);
    }
    if (ce == cudaSuccess) ce = cu_adapt_record(be, il, ids, P); /* the slot cache's counts (adapt.cu) */
    if (ce == cudaSuccess && ((remote && !via_mailbox) || tap)) ce = cudaEventRecord(be->ev_host, st);
    if (ce != cudaSuccess) return cu_tdone(&t, cu_fail(ce, "routes to the host", __LINE__));
    /* the resident pairs (a layer without slots has none: every pair is remote) and the shared expert, queued */
    if (c->n_slots > 0) {
        rc = cu_matmul_pairs(be, c->gate_exps, x, C, P, ids, k, c->slot_of, G);
        if (rc == 0) rc = cu_matmul_pairs(be, c->up_exps, x, C, P, ids, k, c->slot_of, U);
        if (rc == 0) {
            k_swiglu<<<nblk((int64_t)P * I, 256), 256, 0, st>>>(G, U, (int64_t)P * I);
            if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_swiglu", __LINE__);
        }
        if (rc == 0) rc = cu_matmul_pairs(be, c->down_exps, G, I, P, ids, 1, c->slot_of, Dn);
        if (rc == 0) {
            k_scale_pairs<<<nblk(P * C, 256), 256, 0, st>>>(Dn, wts, ids, c->slot_of, P, C, contrib);
            if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_scale_pairs", __LINE__);
        }
    }
    if (rc == 0) rc = cu_shared_expert(be, c, x, T, gs, us, ds, sc);
    /* the host's part, while the device works: through the mailbox, inside the stream */
    if (rc == 0 && via_mailbox && (ce = cu_mailbox_wait(be, split, P, C, contrib)) != cudaSuccess)
        rc = cu_fail(ce, "k_mailbox_wait", __LINE__);
    /* or by the host thread, behind the event */
    if (rc == 0 && ((remote && !via_mailbox) || tap) && (ce = cudaEventSynchronize(be->ev_host)) != cudaSuccess)
        rc = cu_fail(ce, "routes to the host", __LINE__);
    if (rc == 0 && tap) a->route_tap(a->route_ctx, il, T, k, be->h_ids, be->h_wts);
    /* (through the mailbox: cu_mailbox_end takes its misses off) */
    const int n_miss = remote && !via_mailbox && rc == 0 ? be->h_split[0] : 0;
    if (n_miss > 0) {
        rc = call_remote(be, a, il, T, k, P, n_miss, cover);
        if (rc == 0) rc = cu_talloc(&t, &dout, (int64_t)n_miss * C);
        if (rc == 0) {
            ce = cudaMemcpyAsync(dout, be->h_rout, (size_t)n_miss * C * sizeof(float), cudaMemcpyHostToDevice, st);
            cu_copied(be, (uint64_t)n_miss * C * sizeof(float));
            if (ce == cudaSuccess) {
                k_scatter_rows<<<nblk((int64_t)n_miss * C, 256), 256, 0, st>>>(dout, split + 1 + 2 * P, n_miss, C, contrib);
                ce = cudaGetLastError();
            }
            if (ce != cudaSuccess) rc = cu_fail(ce, "remote expert results", __LINE__);
        }
    }
    /* The pairs run here, counted as they are dispatched (trunk layers only,
     * gw_backend_experts_computed); a captured step counts at each replay. */
    if (rc == 0 && il < hp->n_layer && !be->arena_on)
        __atomic_add_fetch(&be->base.experts_computed, (uint64_t)(P - n_miss), __ATOMIC_RELAXED);
    if (rc == 0) {
        k_expert_sum<<<nblk(T * C, 256), 256, 0, st>>>(contrib, ids, T, k, C, y);
        if ((ce = cudaGetLastError()) != cudaSuccess) rc = cu_fail(ce, "k_expert_sum", __LINE__);
    }
    if (rc == 0) rc = cu_add_shared(be, y, ds, sc, T);
    return cu_tdone(&t, rc);
}
