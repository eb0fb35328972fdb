/* ple_pager.c — the PLE table on SSD: the backend's row hook answered by the
 * ssd-pager.
 *
 * When the placement says `request.ple_tier: "ssd"` the gpu-worker does not
 * read the n-gram table from the model it maps: for each eval the backend
 * hands gwp_ple_rows() every row the batch needs, which sends them to the
 * pager on the gpu-worker's own `pager-gw` ring pair as PAGER_PLE_ROWS
 * requests (pager_proto.h) into the gpu-worker's own staging slots, one piece
 * at a time (as many rows as the ring slot and the slots hold), and
 * dequantizes each row from staging with the table type's to_float.  ple.bin
 * holds the GGUF's row bytes unchanged, so the rows are the ones the backend
 * would have read itself, bit for bit.  A piece's answer is matched by tag (a
 * restarted pager may answer its predecessor's last request again; tags
 * start at pid << 32, so a restarted gpu-worker never takes its
 * predecessor's answer for its own). */
#include "gpu-worker/proc/gw_proc.h"

#include "core/model/model.h"
#include "core/quant/quant.h"
#include "core/util/err.h"
#include "ssd-pager/pager_proto.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gwp_ple_client_open(struct gwp_ple_client *c, const struct gwp_ple_config *cfg, const struct model *m,
                        const struct gw_ple_host *host, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const struct model_tensor *t = &m->ple_table;
    const bool have = host ? host->data != NULL : t->data != NULL;
    if (!have) return nb_errf(err, errlen, NB_EINVAL, "the placement puts the PLE table on SSD but the model has none");
    int rc = prepared_ple_load(cfg->prepared, &c->ple, err, errlen);
    if (rc) return rc;
    /* the tensor's shape and type stay in m when the data went to host (gw_ple_host_detach) */
    if (c->ple.type != (uint32_t)t->type || c->ple.row_len != (uint32_t)t->ne[0] || c->ple.row_bytes != t->row_bytes ||
        c->ple.rows != (uint64_t)t->ne[1])
        return nb_errf(err, errlen, NB_EFORMAT, "%s/ple.bin does not hold this model's table (type %u, %u × %llu)",
                       cfg->prepared, c->ple.type, c->ple.row_len, (unsigned long long)c->ple.rows);
    c->to_float = t->qt->to_float;
    c->staging = cfg->staging->base + (size_t)cfg->first * cfg->slot_bytes;
    c->first = cfg->first;
    c->capacity_rows = cfg->count * cfg->slot_bytes / c->ple.row_bytes;
    if (cfg->count == 0 || (uint64_t)(cfg->first + cfg->count) * cfg->slot_bytes > cfg->staging->bytes ||
        c->capacity_rows == 0)
        return nb_errf(err, errlen, NB_EINVAL, "PLE staging slots %u+%u of %llu bytes do not hold a row", cfg->first,
                       cfg->count, (unsigned long long)cfg->slot_bytes);
    c->timeout_ns = 60ull * 1000000000ull;
    c->next_tag = (uint64_t)getpid() << 32; /* a predecessor's unanswered request never has our tag */
    if ((rc = ring_pair_attach(&c->rp, cfg->rings, 0, RING_CLIENT, NULL, err, errlen))) return rc;
    c->g = ring_get_geometry(c->rp.req);
    if (c->g.max_experts < 2 || c->g.max_tokens == 0) {
        ring_pair_detach(&c->rp);
        return nb_errf(err, errlen, NB_EINVAL, "pager-gw ring: max_experts %u < 2", c->g.max_experts);
    }
    return 0;
}

void gwp_ple_client_close(struct gwp_ple_client *c)
{
    ring_pair_detach(&c->rp);
    memset(c, 0, sizeof *c);
}

/* Rows [0, n) of the piece into staging, then dequantized into out. */
static int page_piece(struct gwp_ple_client *c, int n, const int64_t *rows, float *out, char *err, size_t errlen)
{
    struct ring_slot s;
    int rc = ring_reserve(c->rp.req, &s, c->timeout_ns, err, errlen);
    if (rc == SHM_EPEER || rc == SHM_ETIMEDOUT) return nb_errf(err, errlen, NB_EIO, "the ssd-pager is not serving pager-gw");
    if (rc) return rc;
    const uint32_t stride = c->g.max_experts;
    uint64_t tag = ++c->next_tag;
    *s.hdr = (struct ring_slot_header){.n_tokens = (uint32_t)n, .n_experts = 1, .flags = PAGER_PLE_ROWS, .tag = tag};
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || (uint64_t)rows[i] >= c->ple.rows)
            return nb_errf(err, errlen, NB_EINVAL, "PLE row %lld outside the table", (long long)rows[i]);
        s.expert_ids[(size_t)i * stride] = (int32_t)rows[i];
    }
    s.expert_ids[stride - 1] = (int32_t)c->first;
    if ((rc = ring_publish(c->rp.req, err, errlen)) || (rc = gwp_wait_tagged(c->rp.resp, tag, c->timeout_ns, "ssd-pager", &s, err, errlen))) return rc;
    if (s.hdr->flags & RING_FLAG_ERROR) {
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)(s.hdr->payload_bytes < 255 ? s.hdr->payload_bytes : 255), (const char *)s.payload);
        ring_release(c->rp.resp, err, errlen);
        return nb_errf(err, errlen, NB_EIO, "ssd-pager failed %d PLE rows: %s", n, msg);
    }
    for (int i = 0; i < n; i++)
        c->to_float(c->staging + (size_t)i * c->ple.row_bytes, out + (size_t)i * c->ple.row_len, c->ple.row_len);
    return ring_release(c->rp.resp, err, errlen);
}

int gwp_ple_rows(void *ctx, int n_rows, const int64_t *rows, float *out, char *err, size_t errlen)
{
    struct gwp_ple_client *c = ctx;
    uint64_t per = c->g.max_tokens < c->capacity_rows ? c->g.max_tokens : c->capacity_rows;
    int rc = 0;
    for (int at = 0; !rc && at < n_rows; at += (int)per) {
        int n = (uint64_t)(n_rows - at) < per ? n_rows - at : (int)per;
        rc = page_piece(c, n, rows + at, out + (size_t)at * c->ple.row_len, err, errlen);
    }
    if (c->stats && !rc) shm_stats_add(c->stats, c->stats_block, SHM_STAT_PLE_ROWS, (uint64_t)n_rows);
    return rc;
}
