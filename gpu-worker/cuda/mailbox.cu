/* mailbox.cu — remote experts inside the stream: the device side of the
 * mailbox (gpu-worker/mailbox.h) and the backend's use of it.
 *
 * The key idea: the host's part of a layer with remote experts is not a wait
 * of the host thread in the middle of the step but a request in mapped pinned
 * memory (gpu-worker/mailbox.h): the stream posts it (k_mailbox_post), waits
 * for its answer (k_mailbox_wait) and reads the results (k_mailbox_scatter),
 * all as kernels, so an eval synchronises once and a decode step with remote
 * experts replays as one CUDA graph.  The backend's remote thread
 * (gpu-worker/mailbox.c) answers: while an eval is in flight
 * (cu_mailbox_begin … cu_mailbox_end) it spins on the head, calls the
 * gw_moe_remote hook (in the pipeline the ring round trip to the
 * cpu-moe-worker) on the mailbox's rows, pairs and results (mailbox_answer),
 * and stores the request's number into `done`; between evals it sleeps.
 * Evals of more than MAILBOX_ROWS rows (prefill chunks) keep the host path of
 * cu_moe_forward (moe.cu). */
#include "gpu-worker/cuda/backend_cuda.h"

/* ---------- the kernels ----------
 *
 * The mailbox is pinned host memory mapped into the device; its protocol is
 * gpu-worker/mailbox.h's, whose step functions these kernels run.
 * k_mailbox_post (one block) writes a layer's misses (k_split's list) and its
 * rows of x there, then — after a system-wide fence — the request's number
 * into `posted`; the backend's remote thread runs the gw_moe_remote hook into
 * `out` and stores the number into `done`; k_mailbox_wait (one thread) spins
 * on `done` inside the stream, so the host never waits between layers and a
 * step with remote experts can be a CUDA graph; k_mailbox_scatter then reads
 * the results over PCIe into their pairs' contribution rows.  A layer without
 * misses posts nothing and waits for nothing (want = 0). */
#define MAILBOX_POST_THREADS 1024
__global__ void k_mailbox_post(const int32_t *split, const float *splitw, const float *x, int T, int64_t C, int P,
                               int layer, mailbox_head *h, int32_t *mrows, int32_t *mexp, float *mw, float *mx,
                               unsigned int *seq, unsigned int *want)
{
    /* nothing missed, the eval failed already (its host side answers nothing
     * more) or the counts out of step: one decision for the whole block */
    __shared__ int open;
    const int n = split[0];
    if (threadIdx.x == 0) {
        open = mailbox_post_open(h, seq, n);
        if (!open) *want = 0;
    }
    __syncthreads();
    if (!open) return;
    for (int64_t i = threadIdx.x; i < (int64_t)T * C; i += MAILBOX_POST_THREADS) mx[i] = x[i];
    for (int i = threadIdx.x; i < n; i += MAILBOX_POST_THREADS)
        mrows[i] = split[1 + i], mexp[i] = split[1 + P + i], mw[i] = splitw[i];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) mailbox_post_publish(h, seq, want, layer, T, n);
}

/* Waits until the host answered request *want (none: returns at once); a
 * request the host cannot see or no thread takes fails at once (lost), one
 * whose hook does not return gives up after MAILBOX_WAIT_NS (timed_out), so the
 * eval fails instead of hanging the GPU. */
__global__ void k_mailbox_wait(mailbox_head *h, const unsigned int *want)
{
    mailbox_wait_answer(h, *want, MAILBOX_PICKUP_NS, MAILBOX_WAIT_NS);
}

/* contrib[pair of miss i] = out[i] for the split's n misses (split[1 + 2P + i]: the pair). */
__global__ void k_mailbox_scatter(const float *out, const int32_t *split, int P, int64_t C, float *contrib)
{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)split[0] * C) return;
    contrib[(int64_t)split[1 + 2 * P + idx / C] * C + idx % C] = ((const volatile float *)out)[idx];
}

/* ---------- the host side ---------- */

static size_t mailbox_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Offsets of the mailbox's arrays: rows, experts, weights (pairs), x (MAILBOX_ROWS · C), out (pairs · C). */
static void mailbox_layout(int64_t pairs, int64_t C, size_t off[6])
{
    off[0] = mailbox_align(sizeof(mailbox_head));
    off[1] = off[0] + mailbox_align((size_t)pairs * sizeof(int32_t));
    off[2] = off[1] + mailbox_align((size_t)pairs * sizeof(int32_t));
    off[3] = off[2] + mailbox_align((size_t)pairs * sizeof(float));
    off[4] = off[3] + mailbox_align((size_t)(MAILBOX_ROWS * C) * sizeof(float));
    off[5] = off[4] + mailbox_align((size_t)(pairs * C) * sizeof(float)); /* the end */
}

/* The remote thread's answer to the request in h: the hook on the mailbox's arrays. */
static int mailbox_answer(void *ctx, const mailbox_head *h, char *err, size_t errlen)
{
    cuda_backend *be = (cuda_backend *)ctx;
    const struct model_hparams *hp = &be->base.model->hp;
    const struct gw_moe_remote *rem = &be->base.remote;
    size_t off[6];
    mailbox_layout(be->mailbox_pairs, hp->n_embd, off);
    const int layer = h->layer, T = h->n_rows, n = h->n_miss;
    if (n < 1 || n > be->mailbox_pairs || T < 1 || T > MAILBOX_ROWS || layer < 0 ||
        layer >= hp->n_layer + hp->n_nextn || !rem->fn)
        return nb_errf(err, errlen, NB_EINVAL, "bad mailbox request (%d pairs of %d rows, layer %d)", n, T, layer);
    char herr[256] = "";
    int rc =
        rem->fn(rem->ctx, layer, T, (const float *)(be->mailbox_host + off[3]), n,
                (const int32_t *)(be->mailbox_host + off[0]), (const int32_t *)(be->mailbox_host + off[1]),
                (const float *)(be->mailbox_host + off[2]), (float *)(be->mailbox_host + off[4]), herr, sizeof herr);
    if (rc) return nb_errf(err, errlen, rc, "remote experts of layer %d: %s", layer, herr);
    cu_copied(be, (uint64_t)n * (uint64_t)hp->n_embd * sizeof(float)); /* the results, read over PCIe */
    if (layer < hp->n_layer) __atomic_add_fetch(&be->mailbox_remote, (uint64_t)n, __ATOMIC_RELAXED);
    return 0;
}

/* Before an eval of T rows.  With a remote hook: no request of an earlier
 * eval may still be pending (the host path below would call the hook beside
 * the thread); and for T ≤ MAILBOX_ROWS the mailbox (made at the first such eval)
 * is opened and its thread set spinning (a prefill chunk takes the host
 * path: no core spins while the cpu-moe-worker needs them all). */
int cu_mailbox_begin(cuda_backend *be, int T)
{
    if (!be->base.remote.fn) return 0;
    char msg[512];
    if (be->mailbox_host && gw_mailbox_idle(&be->mailbox, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_EIO;
    }
    if (T > MAILBOX_ROWS) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    if (!be->mailbox_host) {
        const int64_t pairs = (int64_t)MAILBOX_ROWS * hp->n_expert_used;
        size_t off[6];
        mailbox_layout(pairs, hp->n_embd, off);
        void *hm = NULL, *dm = NULL;
        CK(cudaHostAlloc(&hm, off[5], cudaHostAllocMapped));
        memset(hm, 0, off[5]);
        cudaError_t ce = cudaHostGetDevicePointer(&dm, hm, 0);
        /* the counters cleared in the stream that reads them (not the legacy stream, which `st` does not wait for) */
        if (ce == cudaSuccess) ce = cudaMemsetAsync(be->d_mailbox_seq, 0, 2 * sizeof(unsigned int), be->st);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(be->st);
        if (ce != cudaSuccess) {
            cudaFreeHost(hm);
            return cu_fail(ce, "the remote-expert mailbox", __LINE__);
        }
        be->mailbox_host = (char *)hm, be->mailbox_dev = (char *)dm, be->mailbox_pairs = pairs;
        be->mailbox.head = (mailbox_head *)hm, be->mailbox.answer = mailbox_answer, be->mailbox.ctx = be;
    }
    if (be->mailbox_resync) { /* both sides' counts from 0 again (no hook runs: gw_mailbox_idle above) */
        CK(cudaMemsetAsync(be->d_mailbox_seq, 0, 2 * sizeof(unsigned int), be->st));
        CK(cudaStreamSynchronize(be->st));
        be->mailbox.head->posted = be->mailbox.head->done = be->mailbox.head->taken = 0;
        be->mailbox_resync = false;
    }
    __atomic_store_n(&be->mailbox_remote, 0, __ATOMIC_RELAXED);
    if (gw_mailbox_begin(&be->mailbox, msg, sizeof msg)) {
        snprintf(g_msg, sizeof g_msg, "%s", msg);
        return NB_EIO;
    }
    return 0;
}

/* After an eval (rc: its result so far): the stream drained (an eval that
 * failed half-way may have queued a post without its wait), a request the
 * thread has taken answered (so the hook never runs after the eval, beside
 * the host path of the next one), the thread put to sleep, a break of the
 * protocol, a hook failure, a timed-out answer or a count of requests
 * posted ≠ answers given turned into the eval's error (mailbox.c), and the
 * pairs the hook computed taken off the device's count. */
int cu_mailbox_end(cuda_backend *be, int rc)
{
    if (!gw_mailbox_active(&be->mailbox)) return rc;
    cudaError_t ce = cudaStreamSynchronize(be->st);
    char msg[512];
    const int mrc = gw_mailbox_end(&be->mailbox, msg, sizeof msg);
    if (be->mailbox.head->lost) be->mailbox_resync = true;
    __atomic_sub_fetch(&be->base.experts_computed, __atomic_load_n(&be->mailbox_remote, __ATOMIC_RELAXED),
                       __ATOMIC_RELAXED);
    if (rc) return rc;
    if (ce != cudaSuccess) return cu_fail(ce, "eval", __LINE__);
    if (mrc) snprintf(g_msg, sizeof g_msg, "%s", msg);
    return mrc;
}

void cu_mailbox_stop(cuda_backend *be)
{
    gw_mailbox_stop(&be->mailbox);
    if (be->mailbox_host) cudaFreeHost(be->mailbox_host);
}

cudaError_t cu_mailbox_post(cuda_backend *be, const int32_t *split, const float *splitw, const float *x, int T,
                            int64_t C, int P, int il)
{
    size_t off[6];
    mailbox_layout(be->mailbox_pairs, C, off);
    char *d = be->mailbox_dev;
    k_mailbox_post<<<1, MAILBOX_POST_THREADS, 0, be->st>>>(
        split, splitw, x, T, C, P, il, (mailbox_head *)d, (int32_t *)(d + off[0]), (int32_t *)(d + off[1]),
        (float *)(d + off[2]), (float *)(d + off[3]), be->d_mailbox_seq, be->d_mailbox_seq + 1);
    return cudaGetLastError();
}

cudaError_t cu_mailbox_wait(cuda_backend *be, const int32_t *split, int P, int64_t C, float *contrib)
{
    size_t off[6];
    mailbox_layout(be->mailbox_pairs, C, off);
    k_mailbox_wait<<<1, 1, 0, be->st>>>((mailbox_head *)be->mailbox_dev, be->d_mailbox_seq + 1);
    k_mailbox_scatter<<<nblk(P * C, 256), 256, 0, be->st>>>((const float *)(be->mailbox_dev + off[4]), split, P, C,
                                                            contrib);
    return cudaGetLastError();
}
