/* test_slot_policy.c — the adaptive slot cache's rule (engine/slot_policy.c):
 * free slots fill first, bounded rounds, the hysteresis, the can_in/can_out
 * maps, bad parameters refused; and on a recorded route trace with topic
 * drift, the same hits per layer as tools/bench/cache-sim.py's "adaptive"
 * policy (the one rule in two languages: the simulator predicts what the
 * gpu-worker does).  Run from the repository root (make's test targets do). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "engine/slot_policy.h"

static const struct gw_slot_params P0 = {.every = 1, .decay = 1.0, .swaps = 4, .hysteresis = 0};

static void init(struct gw_slot_policy *sp, int L, int E, const uint8_t *res, const int *cap, const struct gw_slot_params *p)
{
    char err[256] = "";
    cr_assert_eq(gw_slot_policy_init(sp, L, E, res, cap, p, err, sizeof err), 0, "%s", err);
}

static void feed(struct gw_slot_policy *sp, int layer, int e, int times)
{
    const int32_t id = e;
    for (int i = 0; i < times; i++) gw_slot_policy_observe(sp, layer, &id, 1);
}

Test(slot_policy, params_refused)
{
    char err[256];
    struct gw_slot_params p = P0;
    p.every = 0;
    cr_assert_eq(gw_slot_params_check(&p, err, sizeof err), NB_EINVAL);
    cr_assert(strstr(err, "adapt_every"), "%s", err);
    p = P0, p.decay = 0;
    cr_assert_eq(gw_slot_params_check(&p, err, sizeof err), NB_EINVAL);
    p = P0, p.decay = 1.5;
    cr_assert_eq(gw_slot_params_check(&p, err, sizeof err), NB_EINVAL);
    p = P0, p.swaps = 0;
    cr_assert_eq(gw_slot_params_check(&p, err, sizeof err), NB_EINVAL);
    p = P0, p.hysteresis = -1;
    cr_assert_eq(gw_slot_params_check(&p, err, sizeof err), NB_EINVAL);
    cr_assert_eq(gw_slot_params_check(&P0, err, sizeof err), 0);
    /* more residents than slots */
    struct gw_slot_policy sp;
    uint8_t res[4] = {1, 1, 1, 0};
    int cap[1] = {2};
    cr_assert_eq(gw_slot_policy_init(&sp, 1, 4, res, cap, &P0, err, sizeof err), NB_EINVAL);
}

Test(slot_policy, hottest_miss_replaces_coldest)
{
    struct gw_slot_policy sp;
    uint8_t res[8] = {1, 1, 1, 0, 0, 0, 0, 0};
    init(&sp, 1, 8, res, NULL, &P0);
    feed(&sp, 0, 0, 5), feed(&sp, 0, 1, 1), feed(&sp, 0, 2, 3), feed(&sp, 0, 5, 4), feed(&sp, 0, 6, 1);
    struct gw_slot_swap sw[8];
    int n = gw_slot_policy_round(&sp, 0, sw, 8);
    /* candidates 5 (4) and 6 (1) against the coldest 1 (1) then 2 (3): 5 > 1 swaps, 6 > 3 does not */
    cr_assert_eq(n, 1);
    cr_assert_eq(sw[0].out, 1);
    cr_assert_eq(sw[0].in, 5);
    cr_assert(gw_slot_resident(&sp, 0, 5) && !gw_slot_resident(&sp, 0, 1));
    cr_assert_eq(sp.n_res[0], 3);
    /* nothing hotter left outside: a second round changes nothing */
    cr_assert_eq(gw_slot_policy_round(&sp, 0, sw, 8), 0);
    gw_slot_policy_free(&sp);
}

Test(slot_policy, free_slots_then_bounded)
{
    struct gw_slot_policy sp;
    uint8_t res[8] = {0};
    int cap[1] = {2};
    struct gw_slot_params p = P0;
    p.swaps = 3;
    init(&sp, 1, 8, res, cap, &p);
    for (int e = 0; e < 8; e++) feed(&sp, 0, e, 1 + e);
    struct gw_slot_swap sw[8];
    int n = gw_slot_policy_round(&sp, 0, sw, 8);
    /* the 3 hottest are 7, 6, 5: two fill the free slots, then 5 (6) against the coldest of {6, 7} (7): no */
    cr_assert_eq(n, 2);
    cr_assert_eq(sw[0].out, -1);
    cr_assert_eq(sw[0].in, 7);
    cr_assert_eq(sw[1].out, -1);
    cr_assert_eq(sw[1].in, 6);
    cr_assert_eq(sp.n_res[0], 2);
    /* max bounds what one call returns */
    feed(&sp, 0, 0, 101), feed(&sp, 0, 1, 100); /* 0 and 1 both at 102 */
    cr_assert_eq(gw_slot_policy_round(&sp, 0, sw, 1), 1);
    cr_assert_eq(sw[0].in, 0); /* ties go to the lower id */
    cr_assert_eq(sw[0].out, 6); /* the colder resident (7 > 6) */
    gw_slot_policy_free(&sp);
}

Test(slot_policy, hysteresis_and_decay)
{
    struct gw_slot_policy sp;
    uint8_t res[4] = {1, 0, 0, 0};
    struct gw_slot_params p = P0;
    p.hysteresis = 2;
    init(&sp, 1, 4, res, NULL, &p);
    feed(&sp, 0, 0, 3), feed(&sp, 0, 1, 5);
    struct gw_slot_swap sw[4];
    cr_assert_eq(gw_slot_policy_round(&sp, 0, sw, 4), 0); /* 5 is not more than 3 + 2 */
    feed(&sp, 0, 1, 1);
    cr_assert_eq(gw_slot_policy_round(&sp, 0, sw, 4), 1); /* 6 is */
    gw_slot_policy_free(&sp);
    /* decay: each observation first multiplies the layer's scores */
    p = P0, p.decay = 0.5;
    init(&sp, 1, 4, res, NULL, &p);
    feed(&sp, 0, 0, 2); /* 0 → 1 → 1.5 */
    cr_assert_float_eq(sp.score[0], 1.5, 1e-12);
    const int32_t other = 3;
    gw_slot_policy_observe(&sp, 0, &other, 1);
    cr_assert_float_eq(sp.score[0], 0.75, 1e-12);
    cr_assert_float_eq(sp.score[3], 1.0, 1e-12);
    gw_slot_policy_free(&sp);
}

Test(slot_policy, can_in_can_out_and_tick)
{
    struct gw_slot_policy sp;
    uint8_t res[4] = {1, 1, 0, 0}, can_in[4] = {1, 1, 0, 1}, can_out[4] = {0, 1, 1, 1};
    struct gw_slot_params p = P0;
    p.every = 3;
    init(&sp, 1, 4, res, NULL, &p);
    sp.can_in = can_in, sp.can_out = can_out;
    feed(&sp, 0, 2, 9), feed(&sp, 0, 3, 8); /* 2 may not come in; 0 (score 0) may not leave */
    struct gw_slot_swap sw[4];
    cr_assert_eq(gw_slot_policy_round(&sp, 0, sw, 4), 1);
    cr_assert_eq(sw[0].out, 1);
    cr_assert_eq(sw[0].in, 3);
    cr_assert(gw_slot_resident(&sp, 0, 0));
    cr_assert(!gw_slot_policy_tick(&sp));
    cr_assert(!gw_slot_policy_tick(&sp));
    cr_assert(gw_slot_policy_tick(&sp));
    gw_slot_policy_free(&sp);
}

/* ---- the same hits as tools/bench/cache-sim.py on one trace ---- */

#define TL 3
#define TE 64
#define TK 6
#define TT 900

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Routes with topic drift: a topic per 150 tokens; a selection is one of the topic's 10 experts with
 * probability 0.7 (weaker in deeper layers), else any expert; k distinct per token. */
static void make_trace(int32_t routes[TL][TT][TK])
{
    for (int t = 0; t < TT; t++) {
        const int topic = (t / 150 * 7) % 6;
        for (int l = 0; l < TL; l++)
            for (int j = 0; j < TK; j++) {
                int e, dup;
                do {
                    e = (int)(next_u32() % 100) < 70 - 10 * l ? (topic * 10 + (int)(next_u32() % 10)) % TE : (int)(next_u32() % TE);
                    dup = 0;
                    for (int i = 0; i < j; i++) dup |= routes[l][t][i] == e;
                } while (dup);
                routes[l][t][j] = e;
            }
    }
}

/* The replay: cache-sim's cold start (the first round's top n by count, ties to the lower id), then the policy. */
static long replay(int32_t routes[TL][TT][TK], int layer, int n, const struct gw_slot_params *p)
{
    int count[TE] = {0};
    for (int t = 0; t < p->every && t < TT; t++)
        for (int j = 0; j < TK; j++) count[routes[layer][t][j]]++;
    uint8_t res[TE] = {0};
    for (int i = 0; i < n; i++) {
        int best = -1;
        for (int e = 0; e < TE; e++)
            if (count[e] > 0 && !res[e] && (best < 0 || count[e] > count[best])) best = e;
        if (best < 0) break;
        res[best] = 1;
    }
    int cap[1] = {n};
    struct gw_slot_policy sp;
    init(&sp, 1, TE, res, cap, p);
    long hits = 0;
    struct gw_slot_swap sw[TE];
    for (int t = 0; t < TT; t++) {
        for (int j = 0; j < TK; j++) hits += gw_slot_resident(&sp, 0, routes[layer][t][j]);
        gw_slot_policy_observe(&sp, 0, routes[layer][t], TK);
        if (gw_slot_policy_tick(&sp)) gw_slot_policy_round(&sp, 0, sw, TE);
    }
    gw_slot_policy_free(&sp);
    return hits;
}

static void same_as_sim(const struct gw_slot_params *p, int n)
{
    static int32_t routes[TL][TT][TK];
    make_trace(routes);
    char path[] = "/tmp/nebula-slot-routes-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int l = 0; l < TL; l++)
        for (int t = 0; t < TT; t++) {
            fprintf(f, "%d %d", l, t);
            for (int j = 0; j < TK; j++) fprintf(f, " %d", routes[l][t][j]);
            fputc('\n', f);
        }
    fclose(f);
    cr_assert_eq(access("tools/bench/cache-sim.py", R_OK), 0, "run from the repository root: tools/bench/cache-sim.py");
    char cmd[512], buf[1 << 16];
    snprintf(cmd, sizeof cmd, "python3 tools/bench/cache-sim.py %s --slots %d --decay %.17g --every %d --swaps %d --hysteresis %.17g --json",
             path, n, p->decay, p->every, p->swaps, p->hysteresis);
    FILE *pp = popen(cmd, "r");
    cr_assert(pp);
    size_t got = fread(buf, 1, sizeof buf - 1, pp);
    buf[got] = 0;
    cr_assert_eq(pclose(pp), 0, "%s failed: %s", cmd, buf);
    unlink(path);
    cJSON *j = cJSON_Parse(buf);
    cr_assert(j, "not JSON: %s", buf);
    const cJSON *hl = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hits_per_layer"), "adaptive");
    const cJSON *st = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "hits_per_layer"), "static");
    cr_assert_eq(cJSON_GetArraySize(hl), TL);
    for (int l = 0; l < TL; l++) {
        const long want = (long)cJSON_GetArrayItem(hl, l)->valuedouble, have = replay(routes, l, n, p);
        cr_assert_eq(have, want, "layer %d: the policy %ld hits, cache-sim.py %ld", l, have, want);
        /* the trace drifts: adaptation must beat the campaign's own static top n (else this test shows nothing) */
        cr_assert_gt(have, (long)cJSON_GetArrayItem(st, l)->valuedouble, "layer %d", l);
    }
    cJSON_Delete(j);
}

Test(slot_policy, same_hits_as_cache_sim)
{
    const struct gw_slot_params p = {.every = 4, .decay = 0.98, .swaps = 16, .hysteresis = 0};
    same_as_sim(&p, 12);
}

Test(slot_policy, same_hits_as_cache_sim_hysteresis)
{
    const struct gw_slot_params p = {.every = 8, .decay = 0.95, .swaps = 4, .hysteresis = 0.5};
    same_as_sim(&p, 16);
}
