/* test_spec_levels.c — speculative decoding's acceptance levels and
 * counters (core/gen/spec.h, gen_feed_verify): the rules' numbers; rank and
 * ratio; level 3 giving the plain ids, greedy and sampled, whatever the
 * drafts; levels 2 and 1 accepting more drafts than 3 on drafts built to be
 * near misses, every accepted non-greedy draft within its level's top-k and
 * ratio and within the block's budget (checked one by one against a twin
 * sampler, which gives the token each row would have had); a constrained
 * session staying exact; the counters by position, the trajectory; and
 * `--spec auto`'s choice between lookup and MTP. */
#include "core/gen/gen.h"
#include "core/gen/spec.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#define V 32
#define MAXW 6

/* A made-up model with a flat distribution (near misses are common): the
 * logits of the position after (pos, last). */
static void model(int64_t pos, int32_t last, float *row)
{
    for (int i = 0; i < V; i++) {
        uint64_t z = (uint64_t)(pos * 1315423911u) ^ ((uint64_t)last * 2654435761u) ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
        z ^= z >> 31, z *= 0xbf58476d1ce4e5b9ull, z ^= z >> 29;
        row[i] = (float)(z % 1000) / 400.0f; /* 0 … 2.5 */
    }
}

static int32_t rank_pick(const float *row, int k) /* the id of rank k (1: the argmax; ties: the lower id) */
{
    bool taken[V] = {0};
    int32_t b = -1;
    for (int r = 0; r < k; r++) {
        b = -1;
        for (int32_t i = 0; i < V; i++)
            if (!taken[i] && (b < 0 || row[i] > row[b])) b = i;
        taken[b] = true;
    }
    return b;
}

struct outcome {
    int32_t ids[512];
    int n;
    long long accepted, drafted, nongreedy_seen, windows;
};

/* Drives a session of n_prompt 3 tokens, budget tokens, at level and
 * temperature; drafts of each window: rank (pass + i) % 3 + 1 of the model
 * along the drafted chain (a near miss two times in three), window sizes
 * 1 … MAXW.  Checks every accepted draft against the level's rule with a
 * twin sampler; plain: decode steps only. */
static struct outcome drive(int level, float temp, long long budget, bool plain)
{
    const int32_t prompt[3] = {1, 2, 3};
    struct gen_config c = {.prompt = prompt, .n_prompt = 3, .budget = budget, .n_vocab = V, .accuracy_level = level};
    c.sp = sampling_defaults(false);
    c.sp.temperature = temp, c.sp.top_k = 0, c.sp.top_p = 1, c.sp.min_p = 0, c.sp.presence_penalty = 0, c.sp.seed = 7;
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0, "%s", err);
    sampler *twin = sampling_new(&c.sp, V);
    const struct spec_level *rule = spec_level(level);
    struct outcome o = {0};
    struct gen_step st;
    float rows[(MAXW + 1) * V];
    int32_t drafts[MAXW];
    struct gen_event ev[MAXW + 1];
    int64_t pos = 0;
    while (gen_next(g, &st) == GEN_EVAL) {
        if (st.phase == GEN_PREFILL || plain) {
            pos += st.n_ids;
            model(pos, st.ids[st.n_ids - 1], rows);
            struct gen_event e;
            cr_assert_eq(gen_feed(g, rows, NULL, &e, err, sizeof err), 0, "%s", err);
            if (e.token) o.ids[o.n++] = e.id, sampling_sample(twin, rows), sampling_accept(twin, e.id);
            continue;
        }
        const int n = (int)(o.windows % MAXW) + 1;
        int32_t last = st.ids[0];
        for (int i = 0; i <= n; i++) { /* row i: after t0, d1 … di */
            model(pos + 1 + i, last, rows + i * V);
            if (i < n) last = drafts[i] = rank_pick(rows + i * V, (int)((o.windows + i) % 3) + 1);
        }
        int n_ev, acc;
        cr_assert_eq(gen_feed_verify(g, n, drafts, rows, NULL, ev, &n_ev, &acc, err, sizeof err), 0, "%s", err);
        int ng = 0;
        for (int i = 0; i < n_ev; i++) {
            const int32_t would = sampling_sample(twin, rows + i * V); /* what this row gives a decode step */
            sampling_accept(twin, ev[i].id);
            if (ev[i].id != would) { /* a non-greedy draft: only by the rule */
                cr_assert(rule, "level %d kept %d where the row gives %d", level, ev[i].id, would);
                /* an accepted draft (the budget's last token is one that acc does not count) */
                cr_assert((i < acc || (i == n_ev - 1 && i < n)) && ev[i].id == drafts[i],
                          "a non-greedy token that is not a draft (%d of %d, acc %d)", i, n_ev, acc);
                double ratio;
                int rank;
                cr_assert(spec_level_admits(rule, rows + i * V, V, temp, ev[i].id, &ratio, &rank));
                cr_assert_leq(rank, rule->top_k); cr_assert_geq(ratio, rule->min_ratio);
                ng++;
            }
            o.ids[o.n++] = ev[i].id;
        }
        if (rule) cr_assert_leq(ng, rule->max_per_block, "the block's budget");
        o.nongreedy_seen += ng;
        int kept = acc; /* the drafts that became tokens: the generation's last one too */
        if (acc < n_ev && acc < n && ev[acc].id == drafts[acc]) { /* then the generation ended on it */
            cr_assert_eq(n_ev, acc + 1);
            kept++;
        }
        o.windows++, o.accepted += kept, o.drafted += n;
        pos += acc + 1;
    }
    const struct spec_stats *s = gen_spec_stats(g);
    if (!plain) {
        cr_expect_eq(s->passes, o.windows);
        cr_expect_eq(s->accepted, o.accepted);
        cr_expect_eq(s->drafted, o.drafted);
        cr_expect_eq(s->nongreedy, o.nongreedy_seen, "the counter of non-greedy acceptances");
        cr_expect_eq(s->tokens, o.n - 1, "every token but the prefill's");
        cr_expect_eq(gen_accuracy_level(g), rule ? level : 3);
    }
    sampling_free(twin);
    gen_free(g);
    return o;
}

Test(spec_levels, rules)
{
    cr_assert_null(spec_level(3));
    cr_assert_null(spec_level(0));
    const struct spec_level *l2 = spec_level(2), *l1 = spec_level(1);
    cr_expect_eq(l2->max_per_block, 1); cr_expect_eq(l2->top_k, 3); cr_expect_float_eq(l2->min_ratio, 0.80, 1e-12);
    cr_expect_eq(l1->max_per_block, 4); cr_expect_eq(l1->top_k, 10); cr_expect_float_eq(l1->min_ratio, 0.20, 1e-12);
}

Test(spec_levels, rank_and_ratio)
{
    float row[V];
    for (int i = 0; i < V; i++) row[i] = -10;
    row[5] = 0, row[9] = logf(0.85f), row[2] = logf(0.85f), row[11] = logf(0.5f), row[20] = logf(0.3f);
    double q;
    int r;
    cr_expect(spec_level_admits(spec_level(2), row, V, 0, 2, &q, &r));
    cr_expect_eq(r, 2, "a tie goes to the lower id"); cr_expect_float_eq(q, 0.85, 1e-6);
    cr_expect(spec_level_admits(spec_level(2), row, V, 0, 9, &q, &r)); cr_expect_eq(r, 3);
    cr_expect_not(spec_level_admits(spec_level(2), row, V, 0, 11, &q, &r), "ratio 0.5 < 0.8");
    cr_expect(spec_level_admits(spec_level(1), row, V, 0, 11, NULL, NULL));
    cr_expect(spec_level_admits(spec_level(1), row, V, 0, 20, NULL, NULL));
    cr_expect_not(spec_level_admits(spec_level(1), row, V, 0, 0, &q, NULL), "ratio e^-10");
    /* T = 2 flattens: 0.5 → 0.707 */
    cr_expect(spec_level_admits(spec_level(1), row, V, 2.0f, 11, &q, NULL)); cr_expect_float_eq(q, sqrt(0.5), 1e-6);
    row[3] = -0.01f, row[4] = -0.02f; /* now 9 ranks 5th: out of level 2's top 3 though its ratio passes */
    cr_expect_not(spec_level_admits(spec_level(2), row, V, 0, 9, NULL, &r)); cr_expect_eq(r, 5);
    cr_expect_not(spec_level_admits(NULL, row, V, 0, 5, NULL, NULL), "exact: no rule");
    cr_expect_not(spec_level_admits(spec_level(1), row, V, 0, V, NULL, NULL), "out of the vocabulary");
}

static void expect_same(const struct outcome *a, const struct outcome *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: %d vs %d tokens", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) cr_assert_eq(a->ids[i], b->ids[i], "%s: token %d", what, i);
}

Test(spec_levels, level3_is_plain_greedy_and_sampled)
{
    for (int t = 0; t < 2; t++) {
        const float temp = t ? 0.8f : 0;
        struct outcome plain = drive(3, temp, 300, true), spec = drive(3, temp, 300, false);
        expect_same(&plain, &spec, t ? "sampled" : "greedy");
        cr_expect_gt(spec.accepted, 0, "some drafts were the row's own token");
        cr_expect_eq(spec.nongreedy_seen, 0);
        struct outcome zero = drive(0, temp, 300, false);
        expect_same(&plain, &zero, "level 0 is exact too");
    }
}

Test(spec_levels, levels_2_and_1_accept_more_within_the_rule)
{
    for (int t = 0; t < 2; t++) {
        const float temp = t ? 0.8f : 0;
        struct outcome l3 = drive(3, temp, 400, false), l2 = drive(2, temp, 400, false), l1 = drive(1, temp, 400, false);
        const double a3 = (double)l3.accepted / (double)l3.drafted, a2 = (double)l2.accepted / (double)l2.drafted,
                     a1 = (double)l1.accepted / (double)l1.drafted;
        cr_expect_gt(a2, a3, "T %.1f: level 2 accepts more (%.3f vs %.3f)", temp, a2, a3);
        cr_expect_gt(a1, a2, "T %.1f: level 1 more still (%.3f vs %.3f)", temp, a1, a2);
        cr_expect_gt(l2.nongreedy_seen, 0); cr_expect_gt(l1.nongreedy_seen, l2.nongreedy_seen);
    }
}

Test(spec_levels, constrained_is_exact_and_levels_need_logits)
{
    const int32_t prompt[2] = {1, 2};
    struct gen_config c = {.prompt = prompt, .n_prompt = 2, .budget = 8, .n_vocab = V, .accuracy_level = 1};
    c.sp = sampling_defaults(false);
    c.sp.temperature = 0, c.sp.presence_penalty = 0;
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0, "%s", err);
    struct gen_step st;
    cr_assert_eq(gen_next(g, &st), GEN_EVAL);
    cr_expect_not(st.argmax_ok, "level 1 needs the rows");
    float row[V];
    model(2, 2, row);
    struct gen_event e;
    cr_assert_eq(gen_feed(g, row, NULL, &e, err, sizeof err), 0, "%s", err);
    cr_assert_eq(gen_next(g, &st), GEN_EVAL);
    int32_t am = 0, d = 0;
    int n_ev, acc;
    struct gen_event ev[2];
    cr_expect_neq(gen_feed_verify(g, 0, &d, NULL, &am, ev, &n_ev, &acc, err, sizeof err), 0, "an argmax-only window refused");
    cr_expect(strstr(err, "logits"), "%s", err);
    gen_free(g);
}

Test(spec_levels, counters_by_position_and_trajectory)
{
    struct spec_stats s = {0};
    spec_stats_add(&s, 4, 2, 3, 1);
    spec_stats_add(&s, 5, 5, 6, 0);
    cr_expect_eq(s.passes, 2); cr_expect_eq(s.tokens, 9); cr_expect_eq(s.drafted, 9); cr_expect_eq(s.accepted, 7);
    cr_expect_eq(s.nongreedy, 1);
    cr_expect_eq(s.drafted_at[0], 2); cr_expect_eq(s.accepted_at[0], 2);
    cr_expect_eq(s.drafted_at[2], 2); cr_expect_eq(s.accepted_at[2], 1);
    cr_expect_eq(s.drafted_at[4], 1); cr_expect_eq(s.accepted_at[4], 1);
    char buf[64];
    cr_expect_str_eq(spec_stats_trajectory(&s, buf, sizeof buf), "4 5");
    struct spec_stats t = {0};
    spec_stats_merge(&t, &s), spec_stats_merge(&t, &s);
    cr_expect_eq(t.passes, 4); cr_expect_eq(t.accepted_at[4], 2);
    cr_expect_str_eq(spec_stats_trajectory(&t, buf, sizeof buf), "4 5 4 5");
    for (int i = 0; i < 40; i++) spec_stats_add(&t, 16, 0, 1, 0);
    spec_stats_trajectory(&t, buf, 32);
    cr_expect(strlen(buf) < 32 && strstr(buf, " …"), "cut off: '%s'", buf);
}

Test(spec_levels, auto_picks_the_faster_drafter)
{
    struct spec_auto a = {0};
    cr_expect_eq(spec_auto_pick(&a, 0, 4), SPEC_SRC_MTP, "no lookup drafts: MTP");
    cr_expect_eq(spec_auto_pick(&a, 3, 4), SPEC_SRC_LOOKUP, "lookup unmeasured: tried first");
    spec_auto_update(&a, SPEC_SRC_LOOKUP, 3, 3, 0.010), spec_auto_update(&a, SPEC_SRC_LOOKUP, 3, 3, 0.010);
    cr_expect_eq(spec_auto_pick(&a, 3, 4), SPEC_SRC_MTP, "then MTP");
    spec_auto_update(&a, SPEC_SRC_MTP, 4, 0, 0.012), spec_auto_update(&a, SPEC_SRC_MTP, 4, 0, 0.012);
    /* lookup: (1 + 1.0 × 3) / 10 ms = 0.4 a ms; MTP: (1 + 0 × 4) / 12 ms */
    cr_expect_float_eq(spec_auto_rate(&a, SPEC_SRC_LOOKUP, 3), 0.4, 1e-9);
    cr_expect_eq(spec_auto_pick(&a, 3, 4), SPEC_SRC_LOOKUP, "lookup's drafts are all accepted");
    struct spec_auto b = {0};
    spec_auto_update(&b, SPEC_SRC_LOOKUP, 3, 0, 0.010), spec_auto_update(&b, SPEC_SRC_LOOKUP, 3, 0, 0.010);
    spec_auto_update(&b, SPEC_SRC_MTP, 4, 4, 0.012), spec_auto_update(&b, SPEC_SRC_MTP, 4, 4, 0.012);
    cr_expect_eq(spec_auto_pick(&b, 3, 4), SPEC_SRC_MTP, "MTP's drafts are accepted, lookup's not");
    for (int i = 0; i < SPEC_AUTO_PROBE; i++) spec_auto_update(&b, SPEC_SRC_MTP, 4, 4, 0.012);
    cr_expect_eq(spec_auto_pick(&b, 3, 4), SPEC_SRC_LOOKUP, "lookup unused for %d passes: probed once", SPEC_AUTO_PROBE);
}

Test(spec_levels, coverage_cases)
{
    const uint8_t none[5] = {0}, at2[5] = {0, 0, 1, 0, 0}, all[5] = {1, 1, 1, 1, 1};
    cr_expect_eq(spec_case(4, 4, none), SPEC_CASE_A, "every draft accepted");
    cr_expect_eq(spec_case(4, 4, all), SPEC_CASE_A, "every draft accepted, rows handed off or not");
    cr_expect_eq(spec_case(4, 2, at2), SPEC_CASE_B, "rejected at a handoff row");
    cr_expect_eq(spec_case(4, 1, at2), SPEC_CASE_C, "rejected at a covered row before it");
    cr_expect_eq(spec_case(4, 0, NULL), SPEC_CASE_C, "no flags: every row covered");
    cr_expect_eq(spec_case(0, 0, all), -1, "no drafts, no case");
    struct spec_stats s = {0}, t = {0};
    spec_stats_case(&s, 4, 2, at2), spec_stats_case(&s, 4, 4, all), spec_stats_case(&s, 0, 0, all);
    cr_expect(s.cases[SPEC_CASE_A] == 1 && s.cases[SPEC_CASE_B] == 1 && s.cases[SPEC_CASE_C] == 0);
    cr_expect_eq(s.handoff_rows, 1 + 5 + 1, "rows 0 … n of each window");
    spec_stats_merge(&t, &s), spec_stats_merge(&t, &s);
    cr_expect(t.cases[SPEC_CASE_A] == 2 && t.cases[SPEC_CASE_B] == 2 && t.handoff_rows == 14, "merged");
}
