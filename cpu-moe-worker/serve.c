/* serve.c — one `moe` request: find every remote pair's expert bytes, run
 * gw_expert_ffn on each pair, publish the response (moe_proto.h).
 *
 * The key idea: the output of a pair depends only on its expert's bytes, its
 * row and its weight — pairs are grouped by expert, each group is one job of
 * gw_expert_ffn_many on its rows (the backend batches an expert's rows the
 * same way), and each result goes to its own (r, j) place in the response —
 * so the work can be split over OpenMP threads any way (by weight rows, not
 * by expert: a decode token's ten or twenty experts must keep every core
 * busy) and, with the ref kernels, the bytes are still the single-process
 * engine's.
 * RAM-tier experts are read in place from the arena; the others are paged
 * into this worker's staging slots through the `pager` ring pair, at most
 * staging_count at a time, and their pairs computed before the next batch.
 * A pager that is gone or late makes the request fail (RING_FLAG_ERROR with
 * a message), never hang; pager responses are matched by tag, so answers to
 * requests given up on earlier are skipped.
 * Nothing is allocated per request: every table a request needs is sized
 * once from the ring's geometry and the placement (moe_serve_init), and the
 * gathered rows and gw_expert_ffn_many's scratch grow to the largest request
 * seen and stay — a decode token's request per layer is all compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util/err.h"
#include "core/util/log.h"
#include "cpu-moe-worker/moe.h"
#include "cpu-moe-worker/moe_proto.h"
#include "engine/ffn.h"
#include "ssd-pager/pager_proto.h"

struct pair {
    int32_t row, slot, expert; /* slot = r·k + j */
    float weight;
};

/* The per-request working memory, kept between requests.  P = max_tokens ×
 * max_experts of the moe ring (the most pairs a request can name); E = the
 * placement's stride (the most experts of a layer). */
struct moe_scratch {
    struct pair *pairs;          /* [P] */
    int *group;                  /* [P + 1] */
    uint8_t *done;               /* [P]: group computed */
    struct gw_expert_job *jobs;  /* [P]: at most one per group */
    int *job_group;              /* [P]: the group of each job */
    float *weights;              /* [P]: the pairs' weights, in pair order */
    const uint8_t **blob;        /* [E] */
    int32_t *cold;               /* [E]: experts to page */
    uint8_t *seen;               /* [E] */
    float *xs, *ys;              /* gathered rows and their results, rows_floats each, grown */
    size_t rows_floats;
    struct gw_expert_scratch ffn;
};

struct request {
    int li;                  /* idx layer */
    int64_t C;
    const float *x;
    float *out;
    struct pair *pairs;      /* grouped by expert (ascending), rows ascending within one */
    int n_pairs;
    int *group;              /* [n_groups + 1]: pairs group[g] … group[g+1]-1 share an expert */
    int n_groups;
    const uint8_t **blob;    /* [E]: expert bytes once known */
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int moe_serve_init(struct moe_worker *m, char *err, size_t errlen)
{
    struct ring_geometry g = ring_get_geometry(m->moe.req);
    size_t P = (size_t)g.max_tokens * g.max_experts + 1, E = (size_t)m->plc.stride + 1;
    struct moe_scratch *sc = calloc(1, sizeof *sc);
    if (!sc) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    m->scratch = sc;
    sc->pairs = malloc(P * sizeof *sc->pairs);
    sc->group = malloc((P + 1) * sizeof *sc->group);
    sc->done = malloc(P);
    sc->jobs = malloc(P * sizeof *sc->jobs);
    sc->job_group = malloc(P * sizeof *sc->job_group);
    sc->weights = malloc(P * sizeof *sc->weights);
    sc->blob = malloc(E * sizeof *sc->blob);
    sc->cold = malloc(E * sizeof *sc->cold);
    sc->seen = malloc(E);
    if (!sc->pairs || !sc->group || !sc->done || !sc->jobs || !sc->job_group || !sc->weights || !sc->blob || !sc->cold ||
        !sc->seen)
        return nb_errf(err, errlen, NB_ENOMEM, "out of memory for the tables of %zu pairs", P - 1);
    return 0;
}

void moe_serve_free(struct moe_worker *m)
{
    struct moe_scratch *sc = m->scratch;
    if (!sc) return;
    free(sc->pairs), free(sc->group), free(sc->done), free(sc->jobs), free(sc->job_group), free(sc->weights);
    free(sc->blob), free(sc->cold), free(sc->seen), free(sc->xs), free(sc->ys);
    gw_expert_scratch_free(&sc->ffn);
    free(sc);
    m->scratch = NULL;
}

/* Grows the gather/scatter buffers to `floats` each (n rows of C). */
static int reserve_rows(struct moe_scratch *sc, size_t floats)
{
    if (floats <= sc->rows_floats) return 0;
    float *xs = realloc(sc->xs, floats * sizeof *xs);
    if (xs) sc->xs = xs;
    float *ys = xs ? realloc(sc->ys, floats * sizeof *ys) : NULL;
    if (ys) sc->ys = ys;
    if (!xs || !ys) return NB_ENOMEM;
    sc->rows_floats = floats;
    return 0;
}

/* Computes every expert group whose bytes are known and not yet done, all in
 * one gw_expert_ffn_many call (its threads split each expert's rows, so a
 * request of a few experts still uses every core); *n_computed += the pairs
 * run.  A group's rows are gathered into xs, its results scattered from ys
 * to their (r, j) places. */
static int compute(struct moe_worker *m, const struct request *q, uint64_t *n_computed)
{
    const struct prepared_layer *L = &m->idx.layers[q->li];
    struct moe_scratch *S = m->scratch;
    int rc = reserve_rows(S, (size_t)q->n_pairs * (size_t)q->C);
    struct gw_expert_job *jobs = S->jobs;
    float *sc = S->weights;
    int *of = S->job_group, n_jobs = 0;
    uint8_t *done = S->done;
    for (int g = 0; !rc && g < q->n_groups; g++) {
        const struct pair *p = &q->pairs[q->group[g]];
        const int n = q->group[g + 1] - q->group[g];
        const uint8_t *b = q->blob[p->expert];
        if (done[g] || !b) continue;
        for (int i = 0; i < n; i++) {
            memcpy(S->xs + (int64_t)(q->group[g] + i) * q->C, q->x + (int64_t)p[i].row * q->C,
                   (size_t)q->C * sizeof *S->xs);
            sc[q->group[g] + i] = p[i].weight;
        }
        struct gw_expert w = {b + L->part[PREPARED_GATE].offset, b + L->part[PREPARED_UP].offset,
                              b + L->part[PREPARED_DOWN].offset, (int)L->part[PREPARED_GATE].type,
                              (int)L->part[PREPARED_UP].type, (int)L->part[PREPARED_DOWN].type, q->C,
                              L->part[PREPARED_GATE].n_rows};
        of[n_jobs] = g;
        jobs[n_jobs++] = (struct gw_expert_job){w, S->xs + (int64_t)q->group[g] * q->C, n, sc + q->group[g],
                                                S->ys + (int64_t)q->group[g] * q->C};
    }
    if (!rc) rc = gw_expert_ffn_many(jobs, n_jobs, m->kernels, &S->ffn);
    for (int j = 0; !rc && j < n_jobs; j++) {
        const int g = of[j];
        for (int i = q->group[g]; i < q->group[g + 1]; i++)
            memcpy(q->out + (int64_t)q->pairs[i].slot * q->C, S->ys + (int64_t)i * q->C, (size_t)q->C * sizeof *S->ys);
        done[g] = 1;
        *n_computed += (uint64_t)(q->group[g + 1] - q->group[g]);
    }
    return rc;
}

/* Waits for the pager's answer to request `tag`, skipping stale answers. */
static int pager_wait(struct moe_worker *m, uint64_t tag, char *err, size_t errlen)
{
    for (;;) {
        struct ring_slot a;
        int rc = ring_wait(m->pager.resp, &a, m->pager_timeout_ns, err, errlen);
        if (rc) return rc;
        uint64_t got = a.hdr->tag;
        bool failed = a.hdr->flags & RING_FLAG_ERROR;
        if (got == tag && failed) nb_errf(err, errlen, NB_EIO, "pager: %.200s", (const char *)a.payload);
        rc = ring_release(m->pager.resp, err, errlen);
        if (rc) return rc;
        if (got == tag) return failed ? NB_EIO : 0;
    }
}

/* Pages experts ids[0..n) into this worker's staging slots 0..n). */
static int page_batch(struct moe_worker *m, const struct request *q, const int32_t *ids, int n, char *err,
                      size_t errlen)
{
    uint64_t first_tag = m->pager_tag;
    for (int i = 0; i < n; i++) {
        struct ring_slot s;
        int rc = ring_reserve(m->pager.req, &s, m->pager_timeout_ns, err, errlen);
        if (rc) return rc;
        s.hdr->flags = PAGER_EXPERT;
        s.hdr->layer = (uint32_t)q->li;
        s.hdr->n_tokens = 1;
        s.hdr->n_experts = 2;
        s.hdr->tag = m->pager_tag++;
        s.expert_ids[0] = ids[i];
        s.expert_ids[1] = (int32_t)(m->conf.staging_first + (uint32_t)i);
        if ((rc = ring_publish(m->pager.req, err, errlen))) return rc;
    }
    int first_rc = 0;
    for (int i = 0; i < n; i++) { /* collect every answer, even after a failure: the ring stays in step */
        int rc = pager_wait(m, first_tag + (uint64_t)i, err, errlen);
        if (rc && rc != NB_EIO) return rc;
        if (rc && !first_rc) first_rc = rc;
        q->blob[ids[i]] = m->staging.base + (m->conf.staging_first + (uint64_t)i) * m->conf.staging_slot_bytes;
    }
    return first_rc;
}

/* RAM-tier pairs first, then the others in batches of staging_count experts.
 * blob[] is kept between requests: every expert of this request's pairs is
 * set here (NULL until paged), so no other request's entry is ever read. */
static int run_request(struct moe_worker *m, struct request *q, char *err, size_t errlen)
{
    const struct prepared_layer *L = &m->idx.layers[q->li];
    int32_t *cold = m->scratch->cold;
    uint8_t *seen = m->scratch->seen;
    int n_cold = 0, rc = 0;
    uint64_t hits = 0, misses = 0, computed = 0;
    memset(seen, 0, L->n_expert);
    memset(m->scratch->done, 0, (size_t)q->n_groups);
    for (int i = 0; i < q->n_pairs; i++) {
        int e = q->pairs[i].expert;
        uint64_t at = m->plc.arena_off[(size_t)q->li * m->plc.stride + e];
        hits += at != UINT64_MAX, misses += at == UINT64_MAX;
        q->blob[e] = at != UINT64_MAX ? m->arena.base + at : NULL;
        if (at == UINT64_MAX && !seen[e]) seen[e] = 1, cold[n_cold++] = e;
    }
    if ((rc = compute(m, q, &computed)))
        nb_errf(err, errlen, rc, rc == NB_ENOMEM ? "out of memory" : "gw_expert_ffn refused a type");
    if (!rc && n_cold && (!m->conf.staging_count || !m->pager.req))
        rc = nb_errf(err, errlen, NB_EINVAL, "expert %d of layer %u is not in the arena and this worker has no pager",
                     cold[0], L->block);
    for (int at = 0; at < n_cold && !rc; at += (int)m->conf.staging_count) {
        int n = n_cold - at < (int)m->conf.staging_count ? n_cold - at : (int)m->conf.staging_count;
        rc = page_batch(m, q, cold + at, n, err, errlen);
        if (!rc && (rc = compute(m, q, &computed)))
            nb_errf(err, errlen, rc, rc == NB_ENOMEM ? "out of memory" : "gw_expert_ffn refused a type");
        for (int i = 0; i < n; i++) q->blob[cold[at + i]] = NULL; /* the slot is reused by the next batch */
    }
    shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_EXPERT_HITS, hits);
    shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_EXPERT_MISSES, misses);
    if (!L->mtp) shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_EXPERTS_COMPUTED, computed);
    return rc;
}

static int by_expert(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    return x->expert != y->expert ? (x->expert > y->expert) - (x->expert < y->expert)
                                  : (x->slot > y->slot) - (x->slot < y->slot);
}

/* Sorts the pairs by expert and marks where each expert's group starts. */
static void group_pairs(struct request *q)
{
    qsort(q->pairs, (size_t)q->n_pairs, sizeof *q->pairs, by_expert);
    q->n_groups = 0;
    for (int i = 0; i < q->n_pairs; i++)
        if (i == 0 || q->pairs[i].expert != q->pairs[i - 1].expert) q->group[q->n_groups++] = i;
    q->group[q->n_groups] = q->n_pairs;
}

/* Checks the request and lists its remote pairs. */
static int parse_request(const struct moe_worker *m, const struct ring_slot *s, uint64_t resp_capacity,
                         struct request *q, char *err, size_t errlen)
{
    const struct ring_slot_header *h = s->hdr;
    uint32_t max_experts = ring_get_geometry(m->moe.req).max_experts;
    q->li = prepared_idx_layer_of_block(&m->idx, h->layer);
    if (q->li < 0) return nb_errf(err, errlen, NB_EINVAL, "layer %u has no routed experts", h->layer);
    const struct prepared_layer *L = &m->idx.layers[q->li];
    q->C = L->part[PREPARED_GATE].row_len;
    if ((uint64_t)h->payload_bytes < (uint64_t)h->n_tokens * q->C * sizeof(float) ||
        moe_payload_bytes(h->n_tokens, h->n_experts, (uint64_t)q->C) > resp_capacity)
        return nb_errf(err, errlen, NB_EINVAL, "layer %u: %u rows × %u experts do not fit the payloads", h->layer,
                       h->n_tokens, h->n_experts);
    q->n_pairs = 0;
    for (uint32_t r = 0; r < h->n_tokens; r++)
        for (uint32_t j = 0; j < h->n_experts; j++) {
            int32_t e = s->expert_ids[r * max_experts + j];
            if (e == MOE_LOCAL) continue;
            if (e < 0 || (uint32_t)e >= L->n_expert)
                return nb_errf(err, errlen, NB_EINVAL, "layer %u row %u: expert %d out of range", h->layer, r, e);
            q->pairs[q->n_pairs++] = (struct pair){(int32_t)r, (int32_t)(r * h->n_experts + j), e,
                                                   s->expert_weights[r * max_experts + j]};
        }
    group_pairs(q);
    return 0;
}

static int answer(struct moe_worker *m, const struct ring_slot *s, struct ring_slot *a, char *err, size_t errlen)
{
    struct ring_geometry g = ring_get_geometry(m->moe.req);
    struct request q = {.x = s->payload, .out = a->payload, .pairs = m->scratch->pairs, .group = m->scratch->group,
                        .blob = m->scratch->blob};
    int rc = parse_request(m, s, g.payload_bytes, &q, err, errlen);
    if (!rc) rc = run_request(m, &q, err, errlen);
    if (!rc) a->hdr->payload_bytes = (uint32_t)moe_payload_bytes(s->hdr->n_tokens, s->hdr->n_experts, (uint64_t)q.C);
    return rc;
}

int moe_serve_one(struct moe_worker *m, uint64_t timeout_ns, char *err, size_t errlen)
{
    struct ring_slot s, a;
    if (m->conf.ring_spin_us) {
        /* While requests flow — the last one answered less than ring_spin_us
         * ago: a token's next layer is on its way — spin until ring_spin_us
         * after it, so the request is seen in microseconds, not after a
         * futex wake-up; idle, the ring's short spin, then sleep. */
        uint64_t hot = (uint64_t)m->conf.ring_spin_us * 1000ull, since = now_ns() - m->last_request_ns;
        uint64_t left = since < hot ? hot - since : 0;
        ring_set_spin_ns(m->moe.req, left > RING_DEFAULT_SPIN_NS ? left : RING_DEFAULT_SPIN_NS);
    }
    int rc = ring_wait(m->moe.req, &s, timeout_ns, err, errlen);
    if (rc) return rc;
    uint64_t t0 = now_ns();
    if ((rc = ring_reserve(m->moe.resp, &a, RING_FOREVER, err, errlen))) return rc;
    a.hdr->tag = s.hdr->tag;
    a.hdr->layer = s.hdr->layer;
    a.hdr->n_tokens = s.hdr->n_tokens;
    a.hdr->n_experts = s.hdr->n_experts;
    char msg[256];
    if (answer(m, &s, &a, msg, sizeof msg)) {
        a.hdr->flags = RING_FLAG_ERROR;
        a.hdr->payload_bytes = (uint32_t)snprintf(a.payload, 256, "%s", msg) + 1;
        shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_ERRORS, 1);
        nb_log("request %lu (layer %u) failed: %s", (unsigned long)s.hdr->tag, s.hdr->layer, msg);
    }
    uint64_t dt = now_ns() - t0;
    shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_STEPS, 1);
    shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_TOKENS, s.hdr->n_tokens);
    shm_stats_add(m->stats, m->conf.stats_worker, SHM_STAT_BUSY_NS, dt);
    shm_stats_add_layer(m->stats, m->conf.stats_worker, s.hdr->layer, dt);
    if ((rc = ring_publish(m->moe.resp, err, errlen))) return rc;
    m->last_request_ns = now_ns();
    return ring_release(m->moe.req, err, errlen);
}
