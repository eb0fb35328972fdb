/* test_sampling.c — greedy, temperature, top-k, top-p, min-p, presence penalty, seed. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/sampling/sampling.h"

static struct sampling_params params(float t, int k, float p, float minp)
{
    struct sampling_params s = {.temperature = t, .top_k = k, .top_p = p, .min_p = minp, .seed = 42};
    return s;
}

/* Draws n tokens and counts them. */
static void draw(sampler *s, const float *logits, int32_t nv, int n, int *counts)
{
    for (int i = 0; i < n; i++) {
        int32_t id = sampling_sample(s, logits);
        cr_assert(id >= 0 && id < nv);
        counts[id]++;
    }
}

Test(sampling, greedy_is_argmax_and_lowest_on_ties)
{
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    struct sampling_params p = params(0.0f, 0, 1.0f, 0.0f);
    sampler *s = sampling_new(&p, 6);
    cr_assert_eq(sampling_sample(s, l), 1);
    cr_assert_eq(sampling_argmax(l, 6), 1);
    sampling_free(s);
}

Test(sampling, temperature_matches_softmax_frequencies)
{
    float l[4] = {1.0f, 0.0f, -1.0f, 0.5f};
    struct sampling_params p = params(0.8f, 0, 1.0f, 0.0f);
    sampler *s = sampling_new(&p, 4);
    int counts[4] = {0}, n = 200000;
    draw(s, l, 4, n, counts);
    double z = 0, pr[4];
    for (int i = 0; i < 4; i++) z += pr[i] = exp(l[i] / 0.8);
    for (int i = 0; i < 4; i++) {
        double expect = pr[i] / z, got = (double)counts[i] / n;
        double sd = sqrt(expect * (1 - expect) / n);
        cr_assert(fabs(got - expect) < 5 * sd, "token %d: %f vs %f", i, got, expect);
    }
    sampling_free(s);
}

Test(sampling, top_k_keeps_only_k_best)
{
    int32_t nv = 1000;
    float *l = malloc(nv * sizeof *l);
    for (int i = 0; i < nv; i++) l[i] = (float)((i * 7919) % 1000) / 100.0f; /* a permutation of 0..9.99 */
    struct sampling_params p = params(5.0f, 3, 1.0f, 0.0f);                 /* flat: all 3 get drawn */
    sampler *s = sampling_new(&p, nv);
    int *counts = calloc(nv, sizeof *counts);
    draw(s, l, nv, 30000, counts);
    int distinct = 0;
    for (int i = 0; i < nv; i++) {
        if (!counts[i]) continue;
        distinct++;
        cr_assert(l[i] >= 9.97f, "token %d (logit %f) is outside the top 3", i, l[i]);
    }
    cr_assert_eq(distinct, 3);
    free(counts);
    free(l);
    sampling_free(s);
}

Test(sampling, top_p_keeps_smallest_prefix_reaching_p)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 at T=1 */
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct sampling_params p = params(1.0f, 0, 0.79f, 0.0f);
    sampler *s = sampling_new(&p, 4);
    int counts[4] = {0};
    draw(s, l, 4, 50000, counts);
    cr_assert(counts[0] > 0 && counts[1] > 0);
    cr_assert_eq(counts[2], 0);
    cr_assert_eq(counts[3], 0);
    double r = (double)counts[0] / (counts[0] + counts[1]);
    cr_assert(fabs(r - 0.625) < 0.01, "renormalised share %f", r);
    sampling_free(s);
}

Test(sampling, min_p_drops_tokens_below_fraction_of_top)
{
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct sampling_params p = params(1.0f, 0, 1.0f, 0.25f); /* keeps p >= 0.125 */
    sampler *s = sampling_new(&p, 4);
    int counts[4] = {0};
    draw(s, l, 4, 50000, counts);
    cr_assert(counts[2] > 0);
    cr_assert_eq(counts[3], 0);
    sampling_free(s);
}

Test(sampling, presence_penalty_lowers_generated_tokens)
{
    float l[2] = {1.0f, 0.0f};
    struct sampling_params p = params(0.0f, 0, 1.0f, 0.0f);
    p.presence_penalty = 1.5f;
    sampler *s = sampling_new(&p, 2);
    cr_assert_eq(sampling_sample(s, l), 0);
    sampling_accept(s, 0);
    cr_assert_eq(sampling_sample(s, l), 1);
    sampling_reset(s);
    cr_assert_eq(sampling_sample(s, l), 0);
    sampling_free(s);
}

Test(sampling, same_seed_same_tokens_other_seed_differs)
{
    int32_t nv = 50;
    float l[50];
    for (int i = 0; i < nv; i++) l[i] = sinf((float)i);
    struct sampling_params p = params(1.0f, 0, 1.0f, 0.0f);
    sampler *a = sampling_new(&p, nv), *b = sampling_new(&p, nv);
    p.seed = 43;
    sampler *c = sampling_new(&p, nv);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = sampling_sample(a, l), y = sampling_sample(b, l), z = sampling_sample(c, l);
        cr_assert_eq(x, y);
        differ += x != z;
    }
    cr_assert(differ > 50);
    sampling_free(a);
    sampling_free(b);
    sampling_free(c);
}

Test(sampling, validate_names_bad_field)
{
    char err[128];
    struct sampling_params p = params(1.0f, 0, 1.5f, 0.0f);
    cr_assert_lt(sampling_validate(&p, err, sizeof err), 0);
    cr_assert(strstr(err, "top_p"));
    p = sampling_defaults(true);
    cr_assert_eq(sampling_validate(&p, err, sizeof err), 0);
}
