/* test_moe_plan.c — the expert-major plan of a prefill chunk (engine/moe_plan.h):
 * every pair once, sorted by (expert, row); batches contiguous, bounded and
 * inside one ring group; groups of at most `group` streamed experts, ring
 * positions their order in it; per batch and row the pairs in ascending
 * expert id; and accumulating random contributions by the plan gives the
 * ordered sum's floats bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"
#include "tests/lib/rng.h"
#include "engine/moe_plan.h"

/* Routing like the router's: k distinct experts a row, skewed towards low ids. */
static void make_routes(uint64_t seed, int T, int k, int E, int32_t *ids, float *w)
{
    rng_seed(seed);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e;
            bool dup;
            do {
                const double u = rng_uniform();
                e = (int)(E * u * u);
                dup = false;
                for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            } while (dup);
            ids[t * k + j] = e;
            w[t * k + j] = rng_uniform() + 1.0f / 16777216.0f;
        }
}

static void check_plan(int T, int k, int E, int group, int max_pairs, uint64_t seed)
{
    const int P = T * k;
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    float *w = malloc((size_t)P * sizeof *w);
    uint8_t *src = malloc((size_t)E);
    make_routes(seed, T, k, E, ids, w);
    for (int e = 0; e < E; e++) src[e] = (uint8_t)((e * 7 + seed) % 3); /* resident, streamed, remote mixed */
    struct moe_plan p;
    cr_assert_eq(moe_plan_build(&p, T, k, E, ids, w, src, group, max_pairs), 0);
    cr_assert_eq(p.n_pairs, P);
    /* every pair once, sorted by (expert, row), fields consistent */
    uint8_t *seen = calloc((size_t)P, 1);
    for (int i = 0; i < P; i++) {
        const int q = p.pair[i];
        cr_assert(q >= 0 && q < P && !seen[q], "pair %d twice or out of range", q);
        seen[q] = 1;
        cr_assert_eq(p.row[i], q / k);
        cr_assert_eq(p.expert[i], ids[q]);
        cr_assert_eq(p.weight[i], w[q]);
        cr_assert_eq(p.src[i], src[ids[q]]);
        if (i) cr_assert(p.expert[i - 1] < p.expert[i] || (p.expert[i - 1] == p.expert[i] && p.row[i - 1] < p.row[i]));
    }
    /* groups: at most `group` streamed experts each, ascending, ring positions their order */
    cr_assert(p.n_groups >= 1);
    for (int g = 0; g < p.n_groups; g++) cr_assert(p.load_off[g + 1] - p.load_off[g] <= group);
    for (int i = 0; i < P; i++) {
        if (p.src[i] != MOE_SRC_STREAM) {
            cr_assert_eq(p.ring_pos[i], -1);
            continue;
        }
        int at = -1;
        for (int l = 0; l < p.n_load; l++) at = p.load[l] == p.expert[i] ? l : at;
        cr_assert(at >= 0, "streamed expert %d not loaded", p.expert[i]);
        int g = 0;
        while (p.load_off[g + 1] <= at) g++;
        cr_assert_eq(p.ring_pos[i], at - p.load_off[g]);
    }
    /* batches: contiguous, covering, bounded, streamed pairs of their own group only */
    int next = 0;
    for (int b = 0; b < p.n_batches; b++) {
        const struct moe_batch *B = &p.batch[b];
        cr_assert_eq(B->p0, next);
        cr_assert(B->p1 > B->p0 && B->p1 - B->p0 <= max_pairs);
        next = B->p1;
        for (int i = B->p0; i < B->p1; i++)
            if (p.src[i] == MOE_SRC_STREAM) {
                bool in = false;
                for (int l = p.load_off[B->group]; l < p.load_off[B->group + 1]; l++) in |= p.load[l] == p.expert[i];
                cr_assert(in, "batch %d uses expert %d outside its group %d", b, p.expert[i], B->group);
            }
        /* CSR: each of the batch's pairs once, under its row, ascending expert */
        int count = 0;
        for (int r = B->r0; r < B->r1; r++) {
            for (int a = p.acc_off[r]; a < p.acc_off[r + 1]; a++) {
                const int i = B->p0 + p.acc_idx[a];
                cr_assert(i >= B->p0 && i < B->p1);
                cr_assert_eq(p.row[i], p.acc_row[r]);
                if (a > p.acc_off[r]) cr_assert(p.expert[B->p0 + p.acc_idx[a - 1]] < p.expert[i]);
                count++;
            }
        }
        cr_assert_eq(count, B->p1 - B->p0);
    }
    cr_assert_eq(next, P);
    /* the floats: by the plan (y = 0, + each batch's pairs per row in order) vs the ordered sum */
    float *contrib = malloc((size_t)P * sizeof *contrib), *y = calloc((size_t)T, sizeof *y), *ref = malloc((size_t)T * sizeof *ref);
    for (int i = 0; i < P; i++) contrib[i] = rng_normal() * 1e3f;
    for (int b = 0; b < p.n_batches; b++)
        for (int r = p.batch[b].r0; r < p.batch[b].r1; r++)
            for (int a = p.acc_off[r]; a < p.acc_off[r + 1]; a++) y[p.acc_row[r]] += contrib[p.pair[p.batch[b].p0 + p.acc_idx[a]]];
    for (int t = 0; t < T; t++) {
        float acc = 0;
        for (int e = 0; e < E; e++)
            for (int j = 0; j < k; j++)
                if (ids[t * k + j] == e) acc += contrib[t * k + j];
        ref[t] = acc;
    }
    cr_assert(!memcmp(y, ref, (size_t)T * sizeof *y), "the plan's sum differs from the ordered sum");
    free(contrib), free(y), free(ref), free(seen), free(ids), free(w), free(src);
    moe_plan_free(&p);
}

Test(moe_plan, small_and_wide)
{
    check_plan(1, 1, 8, 1, 1, 1);
    check_plan(5, 4, 8, 2, 3, 2);
    check_plan(64, 4, 64, 4, 17, 3);
    check_plan(512, 10, 512, 16, 1024, 4);
    check_plan(300, 10, 512, 16, 64, 5);
}

Test(moe_plan, every_pair_one_expert)
{
    /* all rows on the same k experts: one expert's pairs span several batches */
    const int T = 100, k = 2, E = 4;
    int32_t ids[200];
    float w[200];
    uint8_t src[4] = {MOE_SRC_STREAM, MOE_SRC_STREAM, MOE_SRC_RESIDENT, MOE_SRC_REMOTE};
    for (int t = 0; t < T; t++) ids[2 * t] = 1, ids[2 * t + 1] = 0, w[2 * t] = w[2 * t + 1] = 0.5f;
    struct moe_plan p;
    cr_assert_eq(moe_plan_build(&p, T, k, E, ids, w, src, 1, 30), 0);
    cr_assert_eq(p.n_groups, 2); /* experts 0 and 1 in their own halves */
    cr_assert_eq(p.n_batches, 8); /* 100 pairs of expert 0 in 4 batches (30, 30, 30, 10), then expert 1's */
    cr_assert_eq(p.batch[3].p1 - p.batch[3].p0, 10);
    cr_assert_eq(p.batch[4].group, 1);
    moe_plan_free(&p);
}

Test(moe_plan, bad_input)
{
    int32_t ids[2] = {0, 9};
    float w[2] = {1, 1};
    uint8_t src[4] = {0};
    struct moe_plan p;
    cr_assert_eq(moe_plan_build(&p, 1, 2, 4, ids, w, src, 1, 4), NB_EINVAL);
    ids[1] = 1;
    cr_assert_eq(moe_plan_build(&p, 1, 2, 4, ids, w, src, 0, 4), NB_EINVAL);
}
