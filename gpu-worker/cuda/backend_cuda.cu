/* backend_cuda.cu — the CUDA backend ("cuda" kind) behind engine/backend.h:
 * its creation, its release, the RoPE tables, the device probe and the ops
 * table.  backend_cuda.h says which file holds the rest.
 *
 * The whole forward pass runs on the GPU, layer by layer like the CPU
 * reference (engine/cpu/backend_cpu.c), whose arithmetic it follows step
 * for step (device.cuh says how closely) with the "ref" matrix kernels, or
 * within fp32 rounding of it with "fast" (matvec.cu).  At creation the dense
 * weights are copied to the device as the file stores them (formats without
 * a device decoder are widened to F32 on the way), and the small tensors
 * (norms, conv kernels, biases) as fp32 (upload.cu).  A sequence keeps all
 * its state on the device (seq.cu): GDN conv and recurrent state, K/V, raw
 * indexer keys and block keys, the PLE conv state, the MTP K/V; the token
 * history stays on the host, where the PLE n-gram rows are hashed
 * (cpu_ple_rows) before the rows are gathered on the device, or asked of the
 * gw_ple_rows hook.
 *
 * Routed experts (the VRAM tier): only the experts computed here are
 * uploaded, into per-layer slot arrays with a device table expert → slot
 * (slots.cu; the map comes with the parameters or from the remote hook, and
 * a changed map is laid out again).  All (token, expert) pairs of a batch
 * run at once; pairs without a slot are listed on the device (k_split),
 * handed to the host with x — through the mailbox inside the stream for
 * evals of at most MAILBOX_ROWS rows (mailbox.cu), else copied behind an event —
 * and computed by the gw_moe_remote hook while the device runs the resident
 * pairs and the shared expert (moe.cu); their results are scattered back
 * into their pairs' contribution rows, and every token's k contributions
 * are then added in ascending expert order, so placement never changes the
 * result.  Without hooks or taps an eval synchronises once, to copy the
 * logits (or only their argmax) out, and a one-token eval replays a CUDA
 * graph of the whole step (graph.cu).  The peak device memory is measured
 * (cu_vram_note) and the budget checked at the layout (engine/vram.c).
 *
 * Temporaries come from the stream-ordered allocator (cudaMallocAsync), so
 * nothing is sized ahead for the largest batch.  Any CUDA failure marks the
 * sequence broken (as the CPU backend does after a failed call) and is
 * reported with the call, cudaGetErrorString and the file and line. */
#include "gpu-worker/cuda/backend_cuda.h"

static void cuda_free(gw_backend *gb)
{
    cuda_backend *be = cbe(gb);
    if (be->st) cudaStreamSynchronize(be->st);
    cudaFree(be->dense_blk);
    cudaFree(be->rope_blk);
    cudaFree(be->slots_blk);
    free(be->layout);
    cudaFreeHost(be->h_split), cudaFreeHost(be->h_splitw), cudaFreeHost(be->h_x), cudaFreeHost(be->h_rout);
    cudaFreeHost(be->h_wts), cudaFreeHost(be->h_ids);
    if (be->ev_host) cudaEventDestroy(be->ev_host);
    cu_block_free(be, GW_PART_SCRATCH, be->arena, be->arena_cap);
    cudaFreeHost(be->h_pos);
    cudaFreeHost(be->h_tok);
    cudaFreeHost(be->h_rows);
    cudaFreeHost(be->h_out);
    cudaFreeHost(be->h_arg);
    cudaFreeHost(be->h_ple);
    cu_mailbox_stop(be);
    if (be->st) cudaStreamSynchronize(be->st); /* no streamed copy still reads a blob */
    cu_adapt_free(be);
    cu_stream_free(be);
    if (be->own_pool) cudaMemPoolDestroy(be->pool);
    if (be->st) cudaStreamDestroy(be->st);
    free(be->ups);
    free(be->L);
    free(be->inv_freq);
    free(be);
}

/* cos/sin tables for positions < need (CPU: inv_freq = 1/powf(θ, 2i/d), angle = (float)pos·inv_freq),
 * one block (engine/vram.c: gw_vram_rope_bytes at gw_vram_capacity's positions). */
int cu_rope_reserve(cuda_backend *be, int64_t need)
{
    if (need <= be->rope_cap) return 0;
    const struct model *m = be->base.model;
    const int half = m->hp.rope_dim / 2;
    const int64_t cap = gw_vram_capacity(GW_GROW_ROPE, be->rope_cap, need, be->n_ctx, be->ctx_fixed);
    const uint64_t bytes = gw_vram_rope_bytes(m, cap);
    float *hc = (float *)malloc((size_t)(cap * half) * sizeof(float) * 2 + 1);
    if (!hc) {
        snprintf(g_msg, sizeof g_msg, "out of host memory for RoPE tables");
        return NB_ENOMEM;
    }
    float *hs = hc + cap * half;
    for (int64_t p = 0; p < cap; p++)
        for (int i = 0; i < half; i++) {
            float angle = (float)p * be->inv_freq[i];
            hc[p * half + i] = cosf(angle);
            hs[p * half + i] = sinf(angle);
        }
    void *blk = NULL;
    const uint64_t held = bytes ? bytes : GW_VRAM_ALIGN; /* no rotated dims: a block all the same */
    int rc = cu_block_alloc(be, GW_PART_KV, &blk, held, "RoPE tables");
    float *dc = (float *)blk, *ds = (float *)((char *)blk + bytes / 2);
    cudaError_t e = cudaSuccess;
    if (rc == 0) e = cudaStreamSynchronize(be->st); /* the old tables may be in use */
    if (rc == 0 && e == cudaSuccess) e = cudaMemcpy(dc, hc, (size_t)(cap * half) * sizeof(float), cudaMemcpyHostToDevice);
    if (rc == 0 && e == cudaSuccess) e = cudaMemcpy(ds, hs, (size_t)(cap * half) * sizeof(float), cudaMemcpyHostToDevice);
    if (rc == 0 && e == cudaSuccess) e = cudaDeviceSynchronize(); /* legacy-stream copies: done before `st` reads them */
    free(hc);
    if (rc) return rc;
    if (e != cudaSuccess) {
        cu_block_free(be, GW_PART_KV, blk, held);
        return cu_fail(e, "RoPE tables", __LINE__);
    }
    cu_block_free(be, GW_PART_KV, be->rope_blk, be->rope_bytes);
    be->rope_blk = blk, be->rope_bytes = held, be->d_cos = dc, be->d_sin = ds, be->rope_cap = cap;
    return 0;
}

static int cuda_setup(cuda_backend *be)
{
    const struct model *m = be->base.model;
    const struct model_hparams *hp = &m->hp;
    CK(cudaSetDevice(be->device));
    CK(cudaStreamCreateWithFlags(&be->st, cudaStreamNonBlocking));
    TRY(cu_linalg_init());
    /* The temporaries' pool: the backend's own (its memory is this backend's
     * alone, measured and given back with it), else the device's. */
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = be->device;
    if (cudaMemPoolCreate(&be->pool, &pp) == cudaSuccess) {
        be->own_pool = true;
    } else {
        (void)cudaGetLastError();
        CK(cudaDeviceGetDefaultMemPool(&be->pool, be->device));
    }
    uint64_t keep = UINT64_MAX; /* keep freed temporaries in the pool between evals */
    CK(cudaMemPoolSetAttribute(be->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    /* one block for every weight upload, the slot tables and the step's words, sized by the walk that plans it */
    uint64_t dense = 0, mtp = 0;
    char derr[256];
    if (gw_vram_dense_bytes(m, &dense, &mtp, derr, sizeof derr)) {
        snprintf(g_msg, sizeof g_msg, "%s", derr);
        return NB_ENOMEM;
    }
    TRY(cu_block_alloc(be, GW_PART_DENSE, (void **)&be->dense_blk, dense + mtp, "the dense weights"));
    be->dense_cap = dense + mtp;
    const int n = hp->n_layer + hp->n_nextn;
    be->L = (cu_layer *)calloc((size_t)n, sizeof *be->L);
    be->inv_freq = (float *)calloc((size_t)(hp->rope_dim / 2 + 1), sizeof(float));
    if (!be->L || !be->inv_freq) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int i = 0; i < hp->rope_dim / 2; i++)
        be->inv_freq[i] = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)hp->rope_dim);
    TRY(cu_up_mat(be, &m->tok_embd, &be->tok_embd));
    TRY(cu_up_mat(be, &m->output, &be->output));
    TRY(cu_up_hc(be, &m->output_hc, &be->output_hc));
    TRY(cu_up_mat(be, &m->ple_table, &be->ple_table));
    for (int i = 0; i < n; i++) {
        be->acct_mtp = m->layers[i].is_nextn;
        TRY(cu_up_layer(be, m, &m->layers[i], &be->L[i]));
        void *so;
        be->acct_mtp = false; /* the slot tables: dense (gw_vram_dense_bytes counts them so) */
        TRY(cu_dev_alloc(be, &so, (size_t)hp->n_expert * sizeof(int32_t)));
        be->L[i].slot_of = (int32_t *)so;
    }
    be->acct_mtp = false;
    CK(cudaEventCreateWithFlags(&be->ev_host, cudaEventDisableTiming));
    TRY(cu_rope_reserve(be, 1024));
    void *w;
    TRY(cu_dev_alloc(be, &w, sizeof(int64_t)));
    be->d_pos = (int64_t *)w;
    TRY(cu_dev_alloc(be, &w, GW_VERIFY_ROWS * sizeof(int32_t))); /* within its GW_VRAM_ALIGN word */
    be->d_tok = (int32_t *)w;
    TRY(cu_dev_alloc(be, &w, 2 * sizeof(unsigned int)));
    be->d_mailbox_seq = (unsigned int *)w;
    TRY(cu_step_pin(be, 1));
    CK(cudaDeviceSynchronize());
    return 0;
}


static int cuda_create(const struct model *m, const struct gw_backend_params *p, gw_backend **out, char *err,
                       size_t errlen)
{
    const char *kern = p ? p->kernels : NULL;
    enum gw_kernels kernels = GW_KERNELS_FAST; /* within 1e-6 of the CPU, greedy-identical (docs/BENCHMARKS.md) */
    if (kern && *kern && gw_kernels_parse(kern, &kernels))
        return nb_errf(err, errlen, NB_EINVAL, "cuda backend: kernels \"%s\": want ref or fast", kern);
    if (m->hp.n_expert_used > GW_CUDA_MAX_EXPERT_USED)
        return nb_errf(err, errlen, NB_ENOTSUP, "cuda backend: %d experts per token; the kernels handle at most %d",
                       (int)m->hp.n_expert_used, GW_CUDA_MAX_EXPERT_USED);
    if (m->hp.ssm_k_head_dim > 1024 || m->hp.ssm_v_head_dim > 1024) /* one GDN thread per state column */
        return nb_errf(err, errlen, NB_ENOTSUP, "cuda backend: GDN head sizes dk %d, dv %d; the kernels handle at most 1024",
                       m->hp.ssm_k_head_dim, m->hp.ssm_v_head_dim);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return nb_errf(err, errlen, NB_ENOTSUP, "no CUDA device: %s",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
    cuda_backend *be = (cuda_backend *)calloc(1, sizeof *be);
    if (!be) return nb_errf(err, errlen, NB_ENOMEM, "cuda backend");
    be->base.ops = &gw_cuda_ops;
    be->base.model = m;
    be->device = 0;
    be->graphs = !(p && p->no_graphs);
    be->fast = kernels == GW_KERNELS_FAST;
    be->budget = p ? p->vram_budget : 0;
    be->n_ctx = p && p->n_ctx > 0 ? p->n_ctx : gw_vram_default_ctx(m);
    be->adapt = p && p->slots_adaptive;
    be->adapt_p = p && p->slots.every ? p->slots
                                      : gw_slot_params{GW_SLOT_EVERY, GW_SLOT_DECAY, GW_SLOT_SWAPS, GW_SLOT_HYSTERESIS};
    if (be->adapt && gw_slot_params_check(&be->adapt_p, err, errlen)) {
        free(be);
        return NB_EINVAL;
    }
    /* Under a budget the position-indexed blocks get the capacities the plan
     * reserved at once (gw_vram_capacity): held anyway, never grown in steps
     * (an old and a new block side by side). */
    be->ctx_fixed = p && p->vram_budget;
    size_t tot = 0;
    /* Yield while the host waits for the stream: during a step the cores belong
     * to the cpu-moe-worker (and the remote thread), not to a spinning wait. */
    if ((e = cudaSetDevice(0)) == cudaSuccess) e = cudaSetDeviceFlags(cudaDeviceScheduleYield | cudaDeviceMapHost);
    if (e == cudaErrorSetOnActiveProcess) e = cudaSuccess, (void)cudaGetLastError(); /* a context exists (a second backend): its flags */
    if (e == cudaSuccess) e = cudaFree(0); /* the context first: its memory is not ours */
    if (e == cudaSuccess) e = cudaMemGetInfo(&be->free0, &tot);
    if (e != cudaSuccess) {
        free(be);
        return nb_errf(err, errlen, NB_ENOTSUP, "no usable CUDA device: %s", cudaGetErrorString(e));
    }
    int rc = cuda_setup(be);
    if (rc == 0) cu_vram_note(be);
    if (rc == 0 && p && p->local) rc = cu_expert_layout(be, p->local);
    be->created = true;
    if (rc) {
        cuda_free(&be->base);
        return nb_errf(err, errlen, rc, "cuda backend: %s", g_msg);
    }
    *out = &be->base;
    return 0;
}

/* Device 0 usable by this build: a driver, a device, and kernels for its
 * architecture (the library holds sm_86/89/90 code: cudaFuncGetAttributes
 * on one kernel fails for a device it cannot run on). */
extern "C" int gw_cuda_probe(char *msg, size_t len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return nb_errf(msg, len, NB_ENOTSUP, "no CUDA device: %s",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return nb_errf(msg, len, NB_ENOTSUP, "CUDA device 0: %s", cudaGetErrorString(e));
    cudaFuncAttributes fa;
    if ((e = cu_kernel_attributes(&fa)) != cudaSuccess)
        return nb_errf(msg, len, NB_ENOTSUP, "%s (compute capability %d.%d): this build has no kernels for it (%s)",
                       prop.name, prop.major, prop.minor, cudaGetErrorString(e));
    return nb_errf(msg, len, 0, "%s, %.1f GiB, compute capability %d.%d", prop.name,
                   (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor);
}

extern "C" const struct gw_backend_ops gw_cuda_ops = {
    "cuda",        cuda_create, cuda_free,     cuda_seq_create,      cuda_seq_free, cuda_seq_reset, cuda_seq_truncate,
    cuda_seq_copy, cuda_eval,   cuda_mtp_eval, cuda_set_expert_host, true, cuda_seq_parts, cuda_state_copy,
};
