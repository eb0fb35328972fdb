/* nebula-ssd-pager — serves the `pager` ring pair (the cpu-moe-worker's) and,
 * when the instance has one, the `pager-gw` pair (the gpu-worker's PLE rows):
 * reads cold expert blobs of experts.bin and n-gram pages of ple.bin into the
 * shared staging slots.  Each pair has one client; one thread serves both,
 * waiting on them in turn in 1 ms slices (a thread per pair would cut that
 * wait; the rings are single-producer/single-consumer either way).
 *
 * The key idea: a request names only (layer, expert, slot) or (row ids, first
 * slot); the pager resolves the file offsets from experts.idx / ple.bin's
 * header, reads whole 4 KiB-aligned blobs or pages with io_uring on O_DIRECT
 * files (one read per expert), and publishes the response only after every
 * byte is in staging.  Requests are served strictly in order, so a client
 * that reuses a staging slot after a later response knows no earlier read
 * can still land in it.  Control (hello/configure/ready/heartbeat/shutdown)
 * is core/ctl/worker.h; byte and read counts go to the stats region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ctl/worker.h"
#include "core/prepared/prepared.h"
#include "core/util/log.h"
#include "shm/shm.h"
#include "ssd-pager/pager_io.h"
#include "ssd-pager/pager_proto.h"
#include "core/util/clock.h"
#include "core/util/opts.h"

#define BOUNCE_PAGES 64 /* ple pages read per batch before their rows are copied out */

struct pager {
    struct ctl_configure conf;
    struct prepared_idx idx;
    struct prepared_ple ple;
    bool has_ple;
    int fd_experts, fd_ple;
    struct pager_io io;
    struct shm_region staging, rings, gw_rings, stats_reg;
    struct ring_pair pairs[2]; /* `pager`, then `pager-gw` if the instance has it */
    int n_pairs, next_pair;
    shm_stats *stats;
    uint8_t *bounce; /* BOUNCE_PAGES pages, 4 KiB aligned */
};

static int serve_expert(struct pager *p, const struct ring_slot *q, uint64_t *bytes, char *err, size_t errlen)
{
    uint32_t layer = q->hdr->layer, expert = (uint32_t)q->expert_ids[0], slot = (uint32_t)q->expert_ids[1];
    if ((int)layer >= p->idx.n_layers || expert >= p->idx.layers[layer].n_expert || slot >= p->conf.staging_slots ||
        p->idx.layers[layer].blob_bytes > p->conf.staging_slot_bytes)
        return nb_errf(err, errlen, NB_EINVAL, "expert request (layer %u, expert %u, slot %u) out of range", layer,
                       expert, slot);
    struct pager_read r = {p->staging.base + slot * p->conf.staging_slot_bytes, p->idx.layers[layer].blob_bytes,
                           prepared_blob_offset(&p->idx, (int)layer, expert)};
    *bytes = r.bytes;
    return pager_io_read(&p->io, p->fd_experts, &r, 1, err, errlen);
}

/* Rows are read page by page into the bounce buffer, then copied into
 * staging back to back (row_bytes each), in request order. */
static int serve_ple(struct pager *p, const struct ring_slot *q, uint32_t max_experts, uint64_t *bytes, char *err,
                     size_t errlen)
{
    uint32_t n = q->hdr->n_tokens * q->hdr->n_experts, first = (uint32_t)q->expert_ids[max_experts - 1];
    uint32_t ppr = p->ple.rows_per_page ? 1 : p->ple.pages_per_row;
    if (!p->has_ple) return nb_errf(err, errlen, NB_ENOTSUP, "no ple.bin in the prepared directory");
    if (q->hdr->n_experts >= max_experts || ppr > BOUNCE_PAGES || first >= p->conf.staging_slots ||
        n * p->ple.row_bytes > (p->conf.staging_slots - first) * p->conf.staging_slot_bytes)
        return nb_errf(err, errlen, NB_EINVAL, "ple request of %u rows from slot %u does not fit", n, first);
    uint8_t *dst = p->staging.base + first * p->conf.staging_slot_bytes;
    struct pager_read r[BOUNCE_PAGES];
    uint32_t in_page[BOUNCE_PAGES];
    for (uint32_t at = 0; at < n;) {
        uint32_t m = 0;
        for (; at + m < n && (m + 1) * ppr <= BOUNCE_PAGES; m++) {
            int32_t row = q->expert_ids[(at + m) / q->hdr->n_experts * max_experts + (at + m) % q->hdr->n_experts];
            if (row < 0 || (uint64_t)row >= p->ple.rows)
                return nb_errf(err, errlen, NB_EINVAL, "ple row %d out of range", row);
            r[m] = (struct pager_read){p->bounce + m * ppr * PREPARED_PAGE, ppr * PREPARED_PAGE, 0};
            prepared_ple_row(&p->ple, (uint64_t)row, &r[m].offset, &in_page[m]);
        }
        int rc = pager_io_read(&p->io, p->fd_ple, r, (int)m, err, errlen);
        if (rc) return rc;
        for (uint32_t i = 0; i < m; i++, at++)
            memcpy(dst + (uint64_t)at * p->ple.row_bytes, (uint8_t *)r[i].buf + in_page[i], p->ple.row_bytes);
        *bytes += (uint64_t)m * ppr * PREPARED_PAGE;
    }
    return 0;
}

/* One request → one response (published before the request is released). */
static int serve_one(struct pager *p, struct ring_pair *rp, const struct ring_slot *q, char *err, size_t errlen)
{
    uint64_t t0 = nb_now_ns(), bytes = 0;
    char msg[256];
    uint32_t kind = q->hdr->flags & PAGER_KIND_MASK, max_experts = ring_get_geometry(rp->req).max_experts;
    int rc = kind == PAGER_EXPERT     ? serve_expert(p, q, &bytes, msg, sizeof msg)
             : kind == PAGER_PLE_ROWS ? serve_ple(p, q, max_experts, &bytes, msg, sizeof msg)
                                      : nb_errf(msg, sizeof msg, NB_EINVAL, "unknown request kind 0x%x", kind);
    struct ring_slot a;
    int wrc = ring_reserve(rp->resp, &a, 5000000000ull, err, errlen);
    if (wrc) return wrc;
    a.hdr->tag = q->hdr->tag;
    a.hdr->layer = q->hdr->layer;
    if (rc) {
        nb_log("request %lu failed: %s", (unsigned long)q->hdr->tag, msg);
        a.hdr->flags = RING_FLAG_ERROR;
        a.hdr->payload_bytes = (uint32_t)snprintf(a.payload, ring_get_geometry(rp->resp).payload_bytes, "%s", msg) + 1;
        shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_ERRORS, 1);
    } else {
        memcpy(a.payload, &bytes, sizeof bytes);
        a.hdr->payload_bytes = sizeof bytes;
        shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_BYTES_READ, bytes);
        shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_STEPS, 1);
        if (kind == PAGER_PLE_ROWS) {
            shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_PLE_BYTES_READ, bytes);
            shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_PLE_ROWS, (uint64_t)q->hdr->n_tokens * q->hdr->n_experts);
        }
        if (kind == PAGER_EXPERT) shm_stats_add_layer(p->stats, p->conf.stats_worker, p->idx.layers[q->hdr->layer].block, nb_now_ns() - t0);
    }
    shm_stats_add(p->stats, p->conf.stats_worker, SHM_STAT_BUSY_NS, nb_now_ns() - t0);
    wrc = ring_publish(rp->resp, err, errlen);
    return wrc ? wrc : ring_release(rp->req, err, errlen);
}

static int setup(void *ctx, char *err, size_t errlen)
{
    struct pager *p = ctx;
    struct ctl_configure *c = &p->conf;
    char path[CTL_PATH_MAX + 32];
    bool direct = false;
    int rc = prepared_idx_load(c->prepared, &p->idx, err, errlen);
    if (!rc) rc = prepared_ple_load(c->prepared, &p->ple, err, errlen);
    p->has_ple = rc == 0;
    if (rc == NB_ENOENT) rc = 0;
    if (!rc) rc = shm_region_open(c->instance, "staging", &p->staging, err, errlen);
    if (!rc && p->staging.bytes < (uint64_t)c->staging_slots * c->staging_slot_bytes)
        rc = nb_errf(err, errlen, NB_EINVAL, "staging region smaller than %u slots", c->staging_slots);
    if (!rc && c->staging_slot_bytes % PREPARED_PAGE)
        rc = nb_errf(err, errlen, NB_EINVAL, "staging slot bytes not a multiple of 4096");
    if (!rc) rc = shm_region_open(c->instance, "pager", &p->rings, err, errlen);
    if (!rc) rc = shm_region_open(c->instance, "stats", &p->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_open(&p->stats, &p->stats_reg, err, errlen);
    if (!rc) rc = shm_stats_claim(p->stats, c->stats_worker, "ssd-pager", 3, err, errlen);
    if (!rc) rc = ring_pair_attach(&p->pairs[0], &p->rings, c->pager_offset, RING_SERVER, NULL, err, errlen);
    p->n_pairs = rc ? 0 : 1;
    if (!rc && shm_region_open(c->instance, "pager-gw", &p->gw_rings, err, errlen) == 0) /* optional */
        rc = ring_pair_attach(&p->pairs[p->n_pairs++], &p->gw_rings, 0, RING_SERVER, NULL, err, errlen);
    for (int i = 0; !rc && i < p->n_pairs; i++)
        if (ring_get_geometry(p->pairs[i].req).max_experts < 2)
            rc = nb_errf(err, errlen, NB_EINVAL, "pager ring %d: max_experts must be ≥ 2", i);
    snprintf(path, sizeof path, "%s/experts.bin", c->prepared);
    if (!rc) rc = pager_io_open(path, &direct, &p->fd_experts, err, errlen);
    snprintf(path, sizeof path, "%s/ple.bin", c->prepared);
    if (!rc && p->has_ple) rc = pager_io_open(path, &direct, &p->fd_ple, err, errlen);
    if (!rc && !(p->bounce = aligned_alloc(PREPARED_PAGE, BOUNCE_PAGES * PREPARED_PAGE)))
        rc = nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    if (!rc) pager_io_init(&p->io);
    return rc;
}

static void teardown(void *ctx)
{
    struct pager *p = ctx;
    for (int i = 0; i < p->n_pairs; i++) ring_pair_detach(&p->pairs[i]);
    pager_io_free(&p->io);
    if (p->fd_experts >= 0) close(p->fd_experts);
    if (p->fd_ple >= 0) close(p->fd_ple);
    if (p->stats) shm_stats_close(p->stats);
    shm_region_close(&p->stats_reg);
    shm_region_close(&p->rings);
    if (p->gw_rings.base) shm_region_close(&p->gw_rings);
    shm_region_close(&p->staging);
    prepared_idx_free(&p->idx);
    free(p->bounce);
}

static void log_ready(void *ctx)
{
    const struct pager *p = ctx;
    nb_log("ready: %d expert layers, ple %s, %u staging slots of %lu bytes, %d ring pairs", p->idx.n_layers,
           p->has_ple ? "yes" : "no", p->conf.staging_slots, (unsigned long)p->conf.staging_slot_bytes, p->n_pairs);
}

/* One turn of the serving loop (ctl_worker_serve): a wait on the next pair. */
static int turn(void *ctx, char *err, size_t errlen)
{
    struct pager *p = ctx;
    struct ring_pair *rp = &p->pairs[p->next_pair];
    struct ring_slot q;
    p->next_pair = (p->next_pair + 1) % p->n_pairs;
    int rc = ring_wait(rp->req, &q, p->n_pairs > 1 ? 1000000ull : 100000000ull, err, errlen);
    if (rc == SHM_EPEER) usleep(p->n_pairs > 1 ? 1000 : 10000); /* no client attached (yet, or being restarted) */
    if (rc == SHM_ETIMEDOUT || rc == SHM_EPEER) return 0;
    return rc ? rc : serve_one(p, rp, &q, err, errlen);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: nebula-ssd-pager --control ENDPOINT [--configure-timeout-ms N]\n"
               "\n"
               "Serves the pager ring pair of a Nebula instance: reads expert blobs of experts.bin and\n"
               "pages of ple.bin (io_uring, O_DIRECT) into the shared staging slots.  Started by the\n"
               "coordinator, which sends the configuration over the control socket (docs/PIPELINE.md).\n"
               "\n"
               "  --control ENDPOINT          the coordinator's ROUTER endpoint (ipc://...)\n"
               "  --configure-timeout-ms N    how long to wait for configure (default 10000)\n"
               "  -h, --help                  this text\n");
}

int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    int timeout_ms = 10000;
    static const struct option opts[] = {
        NB_OPT_ARG("control", 'c'), NB_OPT_ARG("configure-timeout-ms", 't'), NB_OPT_FLAG("help", 'h'), NB_OPT_END};
    for (int o; (o = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        if (o == 'c') endpoint = optarg;
        else if (o == 't') timeout_ms = atoi(optarg);
        else if (o == 'h') return usage(stdout), 0;
        else return usage(stderr), 2;
    }
    if (!endpoint || optind != argc) return usage(stderr), 2;
    nb_log_set_name("ssd-pager");
    struct pager p = {.fd_experts = -1, .fd_ple = -1, .staging.fd = -1, .rings.fd = -1, .gw_rings.fd = -1, .stats_reg.fd = -1};
    static const struct ctl_worker_life life = {.setup = setup, .on_ready = log_ready, .turn = turn, .teardown = teardown};
    return ctl_worker_run(endpoint, "ssd-pager", timeout_ms, &p.conf, &life, &p);
}
