/* remote.c — which experts this gpu-worker computes, and the hook that sends
 * the others to the cpu-moe-worker.
 *
 * The placement (placement.json of nebula-prepare, docs/FILES.md, read by
 * core/prepared) gives each expert one tier; the VRAM tier is "local"
 * (gwp_placement_maps).  For every MoE layer with remote
 * pairs the backend calls gwp_moe_remote(), which cuts the batch into pieces
 * of at most max_tokens rows (one ring slot each), lays each row's routed
 * slots out as moe_proto.h says (remote expert id or MOE_LOCAL), and waits for
 * the answer of that piece before sending the next: one round trip per piece,
 * so the ring never holds more than one request of ours.  A dead peer, an
 * error response or a timeout fails the eval with a message saying which. */
#include "gpu-worker/proc/gw_proc.h"

#include "core/model/model.h"
#include "core/util/err.h"
#include "cpu-moe-worker/moe_proto.h"
#include "core/util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int gwp_placement_maps(const struct prepared_idx *x, const struct prepared_placement *p, const struct model *m,
                       uint8_t **local, uint64_t **ssd_blob, int64_t *n_remote, char *err, size_t errlen)
{
    /* Every block of qwen4exp (trunk and MTP) has a routed MoE. */
    const int n_blocks = m->hp.n_layer + m->hp.n_nextn, E = m->hp.n_expert;
    const size_t n = (size_t)n_blocks * (size_t)E;
    uint8_t *map = calloc(n ? n : 1, 1);
    uint64_t *blob = calloc(n ? n : 1, sizeof *blob);
    int64_t n_local = 0;
    int rc = map && blob ? 0 : nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (!rc && !x) memset(map, 1, n), n_local = (int64_t)n;
    if (!rc && x) rc = prepared_vram_map(x, p, n_blocks, E, map, &n_local, err, errlen);
    for (int i = 0; !rc && x && i < x->n_layers; i++) {
        const struct prepared_layer *L = &x->layers[i];
        for (int e = 0; e < E; e++)
            if (p->tier[i][e] == PREPARED_SSD) blob[(size_t)L->block * (size_t)E + (size_t)e] = L->blob_bytes;
    }
    if (rc) {
        free(map), free(blob);
        return rc;
    }
    *local = map, *ssd_blob = blob, *n_remote = (int64_t)n - n_local;
    return 0;
}

/* ---- the moe ring client ---- */

int gwp_moe_client_open(struct gwp_moe_client *c, const struct shm_region *reg, const struct model *m, char *err,
                        size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->k = m->hp.n_expert_used, c->n_embd = m->hp.n_embd, c->n_expert = m->hp.n_expert;
    if (!(c->seen = calloc((size_t)c->n_expert, 1))) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    c->timeout_ns = 60ull * 1000000000ull;
    int rc = ring_pair_attach(&c->rp, reg, 0, RING_CLIENT, NULL, err, errlen);
    if (rc) return free(c->seen), c->seen = NULL, rc;
    c->g = ring_get_geometry(c->rp.req);
    if ((int)c->g.max_experts < c->k ||
        c->g.payload_bytes < moe_payload_bytes(c->g.max_tokens, (uint32_t)c->k, (uint64_t)c->n_embd)) {
        ring_pair_detach(&c->rp);
        free(c->seen), c->seen = NULL;
        return nb_errf(err, errlen, NB_EINVAL, "moe ring too small: max_experts %u < k %d or payload %u bytes",
                       c->g.max_experts, c->k, c->g.payload_bytes);
    }
    return 0;
}

void gwp_moe_client_close(struct gwp_moe_client *c)
{
    ring_pair_detach(&c->rp);
    free(c->slot_of);
    free(c->row_fill);
    free(c->seen);
    memset(c, 0, sizeof *c);
}

/* slot_of[i] = the index of pair i among its row's pairs (its routed slot j). */
static int assign_slots(struct gwp_moe_client *c, int n_rows, int n_pairs, const int32_t *rows, char *err,
                        size_t errlen)
{
    if (n_rows > c->scratch_rows) {
        free(c->row_fill);
        if (!(c->row_fill = malloc((size_t)n_rows * sizeof *c->row_fill))) return nb_errf(err, errlen, NB_ENOMEM, "oom");
        c->scratch_rows = n_rows;
    }
    if (n_pairs > c->scratch_pairs) {
        free(c->slot_of);
        if (!(c->slot_of = malloc((size_t)n_pairs * sizeof *c->slot_of))) return nb_errf(err, errlen, NB_ENOMEM, "oom");
        c->scratch_pairs = n_pairs;
    }
    memset(c->row_fill, 0, (size_t)n_rows * sizeof *c->row_fill);
    for (int i = 0; i < n_pairs; i++) {
        if (rows[i] < 0 || rows[i] >= n_rows || c->row_fill[rows[i]] >= c->k)
            return nb_errf(err, errlen, NB_EINVAL, "remote pair %d: row %d out of range or over k", i, rows[i]);
        c->slot_of[i] = c->row_fill[rows[i]]++;
    }
    return 0;
}

int gwp_wait_tagged(ring *resp, uint64_t tag, uint64_t timeout_ns, const char *peer, struct ring_slot *s, char *err,
                    size_t errlen)
{
    for (;;) {
        int rc = ring_wait(resp, s, timeout_ns, err, errlen);
        if (rc == SHM_EPEER) return nb_errf(err, errlen, NB_EIO, "the %s died or detached mid-request", peer);
        if (rc == SHM_ETIMEDOUT) return nb_errf(err, errlen, NB_EIO, "no answer from the %s in %llu s", peer,
                                                (unsigned long long)(timeout_ns / 1000000000ull));
        if (rc) return rc;
        if (s->hdr->tag == tag) return 0;
        if ((rc = ring_release(resp, err, errlen))) return rc;
    }
}

static int wait_response(struct gwp_moe_client *c, uint64_t tag, struct ring_slot *s, char *err, size_t errlen)
{
    uint64_t t0 = nb_now_ns();
    int rc = gwp_wait_tagged(c->rp.resp, tag, c->timeout_ns, "cpu-moe-worker", s, err, errlen);
    if (c->stats) shm_stats_add(c->stats, c->stats_block, SHM_STAT_RING_WAIT_NS, nb_now_ns() - t0);
    return rc;
}

/* The SSD-tier blobs a piece makes the cpu-moe-worker page in: each distinct
 * SSD-tier expert of the piece once (it asks the pager once per expert and
 * request), for the check of the pager's byte counter. */
static void count_ssd_blobs(struct gwp_moe_client *c, int layer, int r0, int nr, int n_pairs, const int32_t *rows,
                            const int32_t *experts)
{
    if (!c->stats || !c->ssd_blob || !c->seen) return;
    const uint64_t *blob = c->ssd_blob + (size_t)layer * (size_t)c->n_expert;
    uint64_t bytes = 0;
    memset(c->seen, 0, (size_t)c->n_expert);
    for (int i = 0; i < n_pairs; i++)
        if (rows[i] >= r0 && rows[i] < r0 + nr && !c->seen[experts[i]]) c->seen[experts[i]] = 1, bytes += blob[experts[i]];
    shm_stats_add(c->stats, c->stats_block, SHM_STAT_SSD_BLOB_BYTES, bytes);
}

/* One piece: rows [r0, r0+nr) and the pairs that fall in it. */
static int send_piece(struct gwp_moe_client *c, int layer, int r0, int nr, const float *x, int n_pairs,
                      const int32_t *rows, const int32_t *experts, const float *weights, float *out, char *err,
                      size_t errlen)
{
    struct ring_slot s;
    int rc = ring_reserve(c->rp.req, &s, c->timeout_ns, err, errlen);
    if (rc == SHM_EPEER || rc == SHM_ETIMEDOUT) return nb_errf(err, errlen, NB_EIO, "the cpu-moe-worker is not serving the moe ring");
    if (rc) return rc;
    size_t C = (size_t)c->n_embd, stride = c->g.max_experts;
    uint64_t tag = ++c->next_tag;
    *s.hdr = (struct ring_slot_header){.layer = (uint32_t)layer, .n_tokens = (uint32_t)nr, .n_experts = (uint32_t)c->k,
                                       .payload_bytes = (uint32_t)((size_t)nr * C * sizeof(float)), .tag = tag};
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < c->k; j++) s.expert_ids[(size_t)r * stride + j] = MOE_LOCAL, s.expert_weights[(size_t)r * stride + j] = 0;
    for (int i = 0; i < n_pairs; i++) {
        if (rows[i] < r0 || rows[i] >= r0 + nr) continue;
        size_t at = (size_t)(rows[i] - r0) * stride + (size_t)c->slot_of[i];
        s.expert_ids[at] = experts[i], s.expert_weights[at] = weights[i];
    }
    memcpy(s.payload, x + (size_t)r0 * C, (size_t)nr * C * sizeof(float));
    count_ssd_blobs(c, layer, r0, nr, n_pairs, rows, experts);
    if ((rc = ring_publish(c->rp.req, err, errlen))) return rc;
    if ((rc = wait_response(c, tag, &s, err, errlen))) return rc;
    if (s.hdr->flags & RING_FLAG_ERROR) {
        char msg[512];
        snprintf(msg, sizeof msg, "%.*s", (int)(s.hdr->payload_bytes < 511 ? s.hdr->payload_bytes : 511), (const char *)s.payload);
        ring_release(c->rp.resp, err, errlen);
        return nb_errf(err, errlen, NB_EIO, "cpu-moe-worker failed layer %d: %s", layer, msg);
    }
    const float *res = s.payload;
    for (int i = 0; i < n_pairs; i++) {
        if (rows[i] < r0 || rows[i] >= r0 + nr) continue;
        size_t at = ((size_t)(rows[i] - r0) * (size_t)c->k + (size_t)c->slot_of[i]) * C;
        memcpy(out + (size_t)i * C, res + at, C * sizeof(float));
    }
    if (c->stats) shm_stats_add(c->stats, c->stats_block, SHM_STAT_RING_MESSAGES, 2);
    return ring_release(c->rp.resp, err, errlen);
}

int gwp_moe_remote(void *ctx, int layer, int n_rows, const float *x, int n_pairs, const int32_t *rows,
                   const int32_t *experts, const float *weights, float *out, char *err, size_t errlen)
{
    struct gwp_moe_client *c = ctx;
    int rc = assign_slots(c, n_rows, n_pairs, rows, err, errlen);
    int piece = (int)c->g.max_tokens;
    for (int r0 = 0; !rc && r0 < n_rows; r0 += piece) {
        int nr = n_rows - r0 < piece ? n_rows - r0 : piece, any = 0;
        for (int i = 0; i < n_pairs && !any; i++) any = rows[i] >= r0 && rows[i] < r0 + nr;
        if (any) rc = send_piece(c, layer, r0, nr, x, n_pairs, rows, experts, weights, out, err, errlen);
    }
    return rc;
}
