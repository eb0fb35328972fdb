/* adapt.cu — the adaptive slot cache (issue 15 item 3): the slots of the
 * expert layout (slots.cu) follow the router.
 *
 * engine/slot_policy.c decides (decayed per-(layer, expert) counts of the
 * decode steps' selections; every slots.adapt_every tokens the hottest misses
 * replace the coldest residents); this file moves the bytes without ever
 * making a step wait for them:
 *   - cu_moe_forward copies each trunk layer's routed ids of a decode step or
 *     verify window (≤ GW_SLOT_ROWS rows) into pinned memory (cu_adapt_record:
 *     one small copy in the stream, captured with the decode graph);
 *   - after the eval (cu_adapt_end) the host counts the hits (now, and what
 *     the static layout would have had), feeds the policy and, when a round is
 *     due, for each swap first marks the leaving expert not resident (its
 *     table entry −1, a 4-byte copy queued on the main stream: the next step
 *     hands its pairs to the remote hook, which has the same expert in the
 *     RAM arena), then queues the arriving expert's three matrices from its
 *     pinned host blob (the RAM arena, gw_backend_set_expert_host) into the
 *     freed slot on a copy stream of its own, behind an event of the main
 *     stream (the slot's last reader has finished);
 *   - before the next evals (cu_adapt_begin) every copy whose event has
 *     completed gets its table entry (expert → slot, again a 4-byte copy on
 *     the main stream); one still in flight is simply left for later.
 * So the main stream never waits for the copy stream, and where an expert is
 * computed never changes a result (moe.cu adds every token's k contributions
 * in ascending expert id).  Only experts with a host blob of device-decoded
 * types move (cu_streamable: they can be copied in, and the cpu-moe-worker
 * holds them when they leave); the MTP block's slots stay as laid out.
 * gw_slot_stats.waited counts steps that did wait for a copy: a new layout or
 * new host blobs while copies are in flight (it should stay 0). */
#include "gpu-worker/cuda/backend_cuda.h"

struct cu_fill {
    int layer, slot, expert;
    cudaEvent_t done;
};

static size_t routes_per_layer(const cuda_backend *be) { return (size_t)GW_SLOT_ROWS * (size_t)be->base.model->hp.n_expert_used; }

/* Waits for the copies in flight (counted as a step that waited when there were any), then forgets the state. */
void cu_adapt_drop(cuda_backend *be)
{
    if (be->n_fills > 0 && be->st_adapt) {
        cudaStreamSynchronize(be->st_adapt);
        __atomic_add_fetch(&be->base.slot_stats.waited, 1, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < be->cap_fills; i++)
        if (be->fills[i].done) cudaEventDestroy(be->fills[i].done);
    free(be->fills), be->fills = NULL, be->n_fills = be->cap_fills = 0;
    if (be->pol) gw_slot_policy_free(be->pol);
    free(be->pol), be->pol = NULL;
    cudaFreeHost(be->h_slot_of), cudaFreeHost(be->h_routes);
    be->h_slot_of = NULL, be->h_routes = NULL;
    free(be->can_in), free(be->can_out);
    be->can_in = be->can_out = NULL;
}

void cu_adapt_free(cuda_backend *be)
{
    if (be->st_adapt) cudaStreamSynchronize(be->st_adapt); /* teardown: no eval waits */
    be->n_fills = 0;
    cu_adapt_drop(be);
    if (be->ev_adapt) cudaEventDestroy(be->ev_adapt);
    if (be->ev_routes) cudaEventDestroy(be->ev_routes);
    if (be->st_adapt) cudaStreamDestroy(be->st_adapt);
    be->ev_adapt = be->ev_routes = NULL, be->st_adapt = NULL;
}

void cu_adapt_quiesce(cuda_backend *be)
{
    if (be->n_fills > 0 && be->st_adapt) {
        cudaStreamSynchronize(be->st_adapt);
        __atomic_add_fetch(&be->base.slot_stats.waited, 1, __ATOMIC_RELAXED);
    }
}

/* After a layout (be->layout, slots in ascending expert id): the policy starts from it. */
int cu_adapt_reset(cuda_backend *be)
{
    cu_adapt_drop(be);
    if (!be->adapt) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    const int L = hp->n_layer, E = hp->n_expert;
    const size_t n = (size_t)L * (size_t)E;
    if (!be->st_adapt) {
        CK(cudaStreamCreateWithFlags(&be->st_adapt, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&be->ev_adapt, cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&be->ev_routes, cudaEventDisableTiming));
    }
    CK(cudaMallocHost(&be->h_slot_of, n * sizeof *be->h_slot_of));
    CK(cudaMallocHost(&be->h_routes, (size_t)L * routes_per_layer(be) * sizeof *be->h_routes));
    be->cap_fills = L * be->adapt_p.swaps;
    be->fills = (cu_fill *)calloc((size_t)be->cap_fills, sizeof *be->fills);
    be->pol = (gw_slot_policy *)calloc(1, sizeof *be->pol);
    be->can_in = (uint8_t *)malloc(n), be->can_out = (uint8_t *)malloc(n);
    if (!be->fills || !be->pol || !be->can_in || !be->can_out) {
        cu_adapt_drop(be);
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (int i = 0; i < be->cap_fills; i++) CK(cudaEventCreateWithFlags(&be->fills[i].done, cudaEventDisableTiming));
    for (int il = 0; il < L; il++)
        for (int e = 0, s = 0; e < E; e++)
            be->h_slot_of[(size_t)il * E + e] = be->layout[(size_t)il * E + e] && be->L[il].n_slots > 0 ? s++ : -1;
    uint8_t *res = (uint8_t *)malloc(n);
    if (!res) {
        cu_adapt_drop(be);
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) res[i] = be->h_slot_of[i] >= 0;
    char err[256];
    int rc = gw_slot_policy_init(be->pol, L, E, res, NULL, &be->adapt_p, err, sizeof err);
    free(res);
    if (rc) {
        free(be->pol), be->pol = NULL;
        cu_adapt_drop(be);
        snprintf(g_msg, sizeof g_msg, "adaptive slots: %s", err);
        return rc;
    }
    be->pol->can_in = be->can_in, be->pol->can_out = be->can_out;
    return 0;
}

cudaError_t cu_adapt_record(cuda_backend *be, int il, const int32_t *ids, int P)
{
    if (!be->pol || il >= be->base.model->hp.n_layer || (size_t)P > routes_per_layer(be)) return cudaSuccess;
    return cudaMemcpyAsync(be->h_routes + (size_t)il * routes_per_layer(be), ids, (size_t)P * sizeof(int32_t),
                           cudaMemcpyDeviceToHost, be->st);
}

/* The 4-byte table entry of (il, e), from the host mirror, queued on the main stream. */
static int put_entry(cuda_backend *be, int il, int e)
{
    const size_t at = (size_t)il * be->base.model->hp.n_expert + e;
    cudaError_t ce = cudaMemcpyAsync(be->L[il].slot_of + e, be->h_slot_of + at, sizeof(int32_t), cudaMemcpyHostToDevice, be->st);
    return ce == cudaSuccess ? 0 : cu_fail(ce, "adaptive slots: a table entry", __LINE__);
}

int cu_adapt_begin(cuda_backend *be)
{
    for (int i = 0; be->pol && i < be->n_fills;) {
        cu_fill *f = &be->fills[i];
        cudaError_t ce = cudaEventQuery(f->done);
        if (ce == cudaErrorNotReady) {
            i++;
            continue;
        }
        if (ce != cudaSuccess) return cu_fail(ce, "adaptive slots: a slot's copy", __LINE__);
        be->h_slot_of[(size_t)f->layer * be->base.model->hp.n_expert + f->expert] = f->slot;
        TRY(put_entry(be, f->layer, f->expert));
        cu_fill done = *f; /* the last one takes its place; the events stay with the array */
        *f = be->fills[--be->n_fills];
        be->fills[be->n_fills] = done;
    }
    return 0;
}

/* One round's swap: (il, out) leaves its slot now, (il, in) arrives there once copied. */
static int queue_swap(cuda_backend *be, const gw_slot_swap *sw, bool *marked)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int E = hp->n_expert, il = sw->layer;
    const size_t at = (size_t)il * E + sw->out;
    const int slot = be->h_slot_of[at];
    if (slot < 0 || be->n_fills >= be->cap_fills) { /* cannot happen (can_out, the fills' bound): refuse loudly */
        snprintf(g_msg, sizeof g_msg, "adaptive slots: layer %d expert %d has no slot to give", il, sw->out);
        return NB_EINVAL;
    }
    be->h_slot_of[at] = -1;
    TRY(put_entry(be, il, sw->out));
    if (!*marked) { /* the slots' last readers are queued before this point of the main stream */
        CK(cudaEventRecord(be->ev_adapt, be->st));
        CK(cudaStreamWaitEvent(be->st_adapt, be->ev_adapt, 0));
        *marked = true;
    }
    const struct model_moe *w = &be->base.model->layers[il].moe;
    const cu_layer *c = &be->L[il];
    const struct model_tensor *ts[3] = {&w->gate_exps, &w->up_exps, &w->down_exps};
    const dmat *ds[3] = {&c->gate_exps, &c->up_exps, &c->down_exps};
    const uint8_t *blob = be->xh_blob[(size_t)il * E + sw->in];
    uint64_t bytes = 0;
    for (int j = 0; j < 3; j++) {
        const size_t n = (size_t)ts[j]->ne[1] * ts[j]->row_bytes;
        CK(cudaMemcpyAsync((uint8_t *)ds[j]->d + (size_t)slot * ds[j]->mat_bytes, blob + be->xh_part[3 * il + j], n,
                           cudaMemcpyHostToDevice, be->st_adapt));
        bytes += n;
    }
    cu_fill *f = &be->fills[be->n_fills++];
    f->layer = il, f->slot = slot, f->expert = sw->in;
    CK(cudaEventRecord(f->done, be->st_adapt));
    __atomic_add_fetch(&be->base.slot_stats.swaps, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&be->base.slot_stats.bytes, bytes, __ATOMIC_RELAXED);
    return 0;
}

/* The policy's maps before a round: what may come in (a host blob the device decodes), what may leave (the same,
 * and not arriving still). */
static void set_maps(cuda_backend *be)
{
    const struct model_hparams *hp = &be->base.model->hp;
    const int L = hp->n_layer, E = hp->n_expert;
    for (int il = 0; il < L; il++)
        for (int e = 0; e < E; e++) {
            const size_t at = (size_t)il * E + e;
            be->can_in[at] = be->can_out[at] = be->L[il].n_slots > 0 && cu_streamable(be, il, e);
        }
    for (int i = 0; i < be->n_fills; i++) be->can_out[(size_t)be->fills[i].layer * E + be->fills[i].expert] = 0;
}

/* gw_slot_policy_feed's side: a round's maps, room and swaps (none without host blobs: nothing to copy from) */
struct feed {
    cuda_backend *be;
    bool marked; /* the main stream's point behind which this eval's copies start is recorded */
};
static void feed_maps(void *ctx) { set_maps(((feed *)ctx)->be); }
static int feed_room(void *ctx)
{
    const cuda_backend *be = ((feed *)ctx)->be;
    return be->xh_blob ? be->cap_fills - be->n_fills : 0;
}
static int feed_apply(void *ctx, const gw_slot_swap *sw) { return queue_swap(((feed *)ctx)->be, sw, &((feed *)ctx)->marked); }

int cu_adapt_end(cuda_backend *be, int T)
{
    if (!be->pol || T > GW_SLOT_ROWS) return 0;
    const struct model_hparams *hp = &be->base.model->hp;
    const int L = hp->n_layer, E = hp->n_expert, k = hp->n_expert_used;
    const size_t per = routes_per_layer(be);
    CK(cudaEventRecord(be->ev_routes, be->st));
    CK(cudaEventSynchronize(be->ev_routes)); /* the eval's results came back already: its routes did too */
    uint64_t n[3] = {0, 0, 0};
    gw_slot_count(be->h_routes, per, L, E, T * k, be->h_slot_of, be->layout, n);
    gw_slot_stats_add(&be->base.slot_stats, n);
    gw_slot_swap *sw = (gw_slot_swap *)malloc((size_t)be->adapt_p.swaps * sizeof *sw);
    if (!sw) {
        snprintf(g_msg, sizeof g_msg, "out of host memory");
        return NB_ENOMEM;
    }
    struct feed f = {be, false};
    const gw_slot_round_ops ops = {&f, feed_maps, feed_room, feed_apply};
    const int rc = gw_slot_policy_feed(be->pol, be->h_routes, per, T, k, &ops, sw);
    free(sw);
    return rc;
}

/* Whether expert e of layer il is in a slot the next step uses (the host's view; stream.cu plans by it). */
bool cu_resident(const cuda_backend *be, int il, int e)
{
    const int E = be->base.model->hp.n_expert;
    if (be->L[il].n_slots == 0 || !be->layout) return false;
    if (be->pol && il < be->base.model->hp.n_layer) return be->h_slot_of[(size_t)il * E + e] >= 0;
    return be->layout[(size_t)il * E + e] != 0;
}
