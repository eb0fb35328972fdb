/* spec.h — what speculative decoding keeps beside a generation (issue 16):
 * the acceptance levels' rule, a request's counters (the faces: timings,
 * /metrics, nebulactl stats, the web UI), and `--spec auto`'s choice of
 * drafter.  Pure arithmetic, no backend.
 *
 * Acceptance levels (a request's accuracy_level).  A *block* is one verify
 * window: the drafts of one pass.  Row i of the window is sampled exactly
 * as a decode step would sample it (core/gen's gen_feed_verify); when the
 * token it gives is draft i, the draft is accepted as at level 3.  When it
 * is not:
 *   - level 3 (the default, and 0): the draft is rejected — the output is
 *     the non-speculative one, greedy or sampled;
 *   - level 2: the draft is accepted instead when the block has accepted no
 *     such draft yet, the draft is within the target's top 3 at that row and
 *     p(draft) / p(top) ≥ 0.80;
 *   - level 1: the same with at most 4 such drafts a block, top 10, ratio
 *     ≥ 0.20.
 * p is the target's distribution at the row: softmax(logits / T) with the
 * request's temperature T (greedy: T = 1, the raw softmax), before the
 * presence penalty and the top-k/top-p/min-p cuts.  The rank counts the ids
 * with a larger logit, or an equal one and a lower id (the argmax's rule),
 * so the top token has rank 1.  Such a draft is *non-greedy*: at T = 0 it
 * is not the argmax, at T > 0 not the token sampled.  Levels 1 and 2 are
 * approximate (docs/SPECULATIVE.md measures their divergence); a
 * constrained (structured output) generation always runs at level 3. */
#ifndef NB_GEN_SPEC_H
#define NB_GEN_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct spec_level {
    int max_per_block; /* non-greedy drafts a verify window may accept */
    int top_k;         /* the draft's rank at most */
    double min_ratio;  /* p(draft) / p(top) at least */
};
/* The rule of level 1 or 2; NULL for an exact level (3, 0, anything else). */
const struct spec_level *spec_level(int level);
/* Whether l admits draft at this row of n_vocab logits (rank and ratio; the
 * block's budget is the caller's).  *ratio and *rank (either may be NULL)
 * get the draft's values. */
bool spec_level_admits(const struct spec_level *l, const float *row, int32_t n_vocab, float temperature, int32_t draft,
                       double *ratio, int *rank);

#define SPEC_MAX_POS 16      /* draft positions counted (core/gen/window.h's WINDOW_MAX) */
#define SPEC_TRAJ_MAX 1024   /* windows of the trajectory kept (the first ones) */
enum spec_src { SPEC_SRC_MTP, SPEC_SRC_LOOKUP, SPEC_SRC_OTHER, SPEC_SRC_N };

/* A request's speculative passes (gen_feed_verify keeps them; the driver
 * adds each pass's drafter to by_src). */
struct spec_stats {
    long long passes, tokens;          /* verify windows, tokens they gave */
    long long drafted, accepted;       /* drafts proposed, accepted */
    long long nongreedy;               /* accepted by a level's rule, not the exact match */
    long long rejections;              /* passes that ended at a rejected draft (accepted / (accepted + rejections):
                                        * the acceptance of a draft whose predecessors were accepted) */
    long long drafted_at[SPEC_MAX_POS], accepted_at[SPEC_MAX_POS]; /* by the draft's position in its window */
    long long by_src[SPEC_SRC_N];      /* passes by drafter */
    /* Coverage mode (gw_eval_args.coverage; all 0 in exact mode): passes by
     * case (spec_case), and the rows computed with all their experts */
    long long cases[3];
    long long handoff_rows;
    long long n_traj;                  /* windows seen (all of them) */
    unsigned char traj[SPEC_TRAJ_MAX]; /* drafts of the first SPEC_TRAJ_MAX windows */
};
void spec_stats_add(struct spec_stats *s, int drafted, int accepted, int tokens, int nongreedy);
/* into += s; the trajectory goes on with s's (a job of several legs). */
void spec_stats_merge(struct spec_stats *into, const struct spec_stats *s);
/* The trajectory as "4 4 5 6 …" into buf (n bytes; a cut-off tail ends in
 * " …").  Returns buf. */
char *spec_stats_trajectory(const struct spec_stats *s, char *buf, size_t n);
/* Coverage mode's cases (issue 16 item 4, the seed's A/B/C) of a pass that
 * drafted n > 0 and accepted acc of them, by the row that gave its last
 * token (row acc of the window): A — every draft accepted (row n: the
 * bonus token); B — a rejection at a row computed with all its experts
 * (handoff[row]: its resident ones covered < τ of its weight somewhere;
 * the token is the full model's, the window is kept); C — a rejection at a
 * row verified with its resident experts only.  -1 for n = 0. */
enum spec_case { SPEC_CASE_A, SPEC_CASE_B, SPEC_CASE_C };
#define SPEC_COVERAGE_ON 0.9f /* the seed's τ: "enough experts to cover 90 % of the normalized weights" */
/* A coverage setting (--spec-coverage, engine.spec_coverage): "off" (0),
 * "on" (SPEC_COVERAGE_ON) or a fraction in (0, 1].  0, or -1 for anything else. */
int spec_coverage_parse(const char *s, float *tau);
int spec_case(int n, int acc, const uint8_t *handoff);
/* Counts the pass's case and its handoff rows (n + 1 flags) into s; returns the case (-1: none). */
int spec_stats_case(struct spec_stats *s, int n, int acc, const uint8_t *handoff);
/* The drafter's name ("mtp", "lookup", "oracle"). */
const char *spec_src_name(int src);

/* `--spec auto`: prompt lookup instead of the MTP block when its expected
 * tokens a millisecond is higher — (1 + acceptance × window) / ms a pass,
 * each measured on the request's own passes with that drafter.  A drafter
 * measured on fewer than 2 passes is tried first (lookup, then MTP), and
 * one unused for SPEC_AUTO_PROBE passes is tried once again (the text
 * changes). */
#define SPEC_AUTO_PROBE 32
struct spec_auto {
    long long passes[2], drafted[2], accepted[2], last[2]; /* last: the pass it was used at */
    double seconds[2];
    long long pass;
};
/* The drafter of the next pass: lookup has n_lookup drafts now (0: MTP),
 * the MTP block would draft n_mtp. */
int spec_auto_pick(const struct spec_auto *a, int n_lookup, int n_mtp);
/* Expected tokens a millisecond of src drafting n, or -1 while unmeasured. */
double spec_auto_rate(const struct spec_auto *a, int src, int n);
void spec_auto_update(struct spec_auto *a, int src, int drafted, int accepted, double seconds);

#endif
