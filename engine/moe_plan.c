/* moe_plan.c — the expert-major plan of a prefill chunk's pairs (moe_plan.h). */
#include "engine/moe_plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

void moe_plan_free(struct moe_plan *p)
{
    free(p->row), free(p->expert), free(p->pair), free(p->weight), free(p->src), free(p->ring_pos);
    free(p->load), free(p->load_off), free(p->batch), free(p->acc_row), free(p->acc_off), free(p->acc_idx);
    memset(p, 0, sizeof *p);
}

/* The rows batch b touches and each one's pairs, in the order they appear (ascending expert). */
static void batch_rows(struct moe_plan *p, struct moe_batch *b, int *mark, int *slot, int *fill, int *n_rows, int *n_idx, int id)
{
    b->r0 = *n_rows;
    for (int i = b->p0; i < b->p1; i++) { /* rows in first-seen order, each one's count */
        const int t = p->row[i];
        if (mark[t] != id) mark[t] = id, slot[t] = (*n_rows)++, p->acc_row[slot[t]] = t, fill[slot[t]] = 0;
        fill[slot[t]]++;
    }
    b->r1 = *n_rows;
    for (int r = b->r0; r < b->r1; r++) { /* offsets, then the indices */
        p->acc_off[r] = *n_idx;
        *n_idx += fill[r];
        fill[r] = p->acc_off[r];
    }
    p->acc_off[b->r1] = *n_idx;
    for (int i = b->p0; i < b->p1; i++) p->acc_idx[fill[slot[p->row[i]]]++] = i - b->p0;
}

int moe_plan_build(struct moe_plan *p, int T, int k, int E, const int32_t *ids, const float *weights,
                   const uint8_t *src, int group, int max_pairs)
{
    memset(p, 0, sizeof *p);
    const int P = T * k;
    if (T < 0 || k < 1 || E < 1 || group < 1 || max_pairs < 1) return NB_EINVAL;
    for (int i = 0; i < P; i++)
        if (ids[i] < 0 || ids[i] >= E) return NB_EINVAL;
    int *start = calloc((size_t)E + 1, sizeof *start), *mark = malloc(((size_t)T + 1) * sizeof *mark);
    int *slot = malloc(((size_t)T + 1) * sizeof *slot), *fill = malloc(((size_t)(P > E ? P : E) + 1) * sizeof *fill);
    p->n_pairs = P;
    p->row = malloc(((size_t)P + 1) * sizeof *p->row), p->expert = malloc(((size_t)P + 1) * sizeof *p->expert);
    p->pair = malloc(((size_t)P + 1) * sizeof *p->pair), p->weight = malloc(((size_t)P + 1) * sizeof *p->weight);
    p->src = malloc((size_t)P + 1), p->ring_pos = malloc(((size_t)P + 1) * sizeof *p->ring_pos);
    p->load = malloc((size_t)E * sizeof *p->load), p->load_off = malloc(((size_t)E + 2) * sizeof *p->load_off);
    /* at most one batch per max_pairs pairs plus one per group change (≤ E) */
    const int max_batches = P / max_pairs + E + 2;
    p->batch = malloc((size_t)max_batches * sizeof *p->batch);
    p->acc_row = malloc(((size_t)P + 1) * sizeof *p->acc_row), p->acc_off = malloc(((size_t)P + max_batches + 1) * sizeof *p->acc_off);
    p->acc_idx = malloc(((size_t)P + 1) * sizeof *p->acc_idx);
    if (!start || !mark || !slot || !fill || !p->row || !p->expert || !p->pair || !p->weight || !p->src || !p->ring_pos ||
        !p->load || !p->load_off || !p->batch || !p->acc_row || !p->acc_off || !p->acc_idx) {
        free(start), free(mark), free(slot), free(fill);
        moe_plan_free(p);
        return NB_ENOMEM;
    }
    /* sort by (expert, row): a counting sort over experts, pairs in row order within one */
    for (int i = 0; i < P; i++) start[ids[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    memcpy(fill, start, (size_t)E * sizeof *fill);
    for (int i = 0; i < P; i++) {
        const int at = fill[ids[i]]++;
        p->row[at] = i / k, p->expert[at] = ids[i], p->pair[at] = i, p->weight[at] = weights[i];
        p->src[at] = src[ids[i]], p->ring_pos[at] = -1;
    }
    /* groups and batches along the sorted order */
    int g = 0, in_group = 0, nb = 0;
    p->load_off[0] = 0;
    struct moe_batch *cur = NULL;
    for (int e = 0; e < E; e++) {
        if (start[e + 1] == start[e]) continue;
        if (src[e] == MOE_SRC_STREAM) {
            if (in_group == group) { /* the half is full: the next group, in a new batch */
                p->load_off[++g] = p->n_load;
                in_group = 0, cur = NULL;
            }
            for (int i = start[e]; i < start[e + 1]; i++) p->ring_pos[i] = in_group;
            p->load[p->n_load++] = e, in_group++;
        }
        for (int i = start[e]; i < start[e + 1]; i++) {
            if (!cur || cur->p1 - cur->p0 == max_pairs) {
                cur = &p->batch[nb++];
                cur->p0 = cur->p1 = i, cur->group = g;
            }
            cur->p1++;
        }
    }
    p->n_groups = g + 1;
    p->load_off[p->n_groups] = p->n_load;
    p->n_batches = nb;
    for (int t = 0; t <= T; t++) mark[t] = -1;
    int n_rows = 0, n_idx = 0;
    for (int b = 0; b < nb; b++) batch_rows(p, &p->batch[b], mark, slot, fill, &n_rows, &n_idx, b);
    free(start), free(mark), free(slot), free(fill);
    return 0;
}
