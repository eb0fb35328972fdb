/* window.h — the speculative loop's draft window controller (issue 16 item 6).
 *
 * How many tokens to draft next, from how the last chains went:
 *   - N stays in [min, max] (4 and 16 by default) and starts at min;
 *   - a chain whose every draft was accepted grows N, by 0, 1, 1, 2, 3, 5 for
 *     the 1st, 2nd, … consecutive full acceptance (5 from the 6th on);
 *   - a chain with a rejection after its first draft shrinks N by 2, 4, 6 for
 *     the 1st, 2nd, 3rd+ consecutive one;
 *   - a chain whose first draft was rejected resets N to min;
 *   - from the 8th chain on, each chain also weighs the measured history:
 *     per window size, the tokens a pass and the seconds a pass; if N − 2 or
 *     N + 2 (both measured at least twice) predicts more tokens a second
 *     than N does, N moves by that ±2.
 * Pure arithmetic, no backend; every decision is kept in the trajectory
 * (the N of each chain) for the request's timings. */
#ifndef NB_GEN_WINDOW_H
#define NB_GEN_WINDOW_H

#include <stdbool.h>
#include <stddef.h>

#define WINDOW_MAX 16

struct window_ctl {
    int min, max, n;          /* bounds and the next window */
    int full_run, reject_run; /* consecutive full acceptances, rejections after the first draft */
    long long chains;
    /* measured per window size: passes, tokens, seconds */
    long long passes[WINDOW_MAX + 1], tokens[WINDOW_MAX + 1];
    double seconds[WINDOW_MAX + 1];
    int *trajectory;          /* the N of each chain (window_trajectory) */
    size_t n_traj, cap_traj;
};

/* min ≥ 1, max ≤ WINDOW_MAX, min ≤ max; 0 or NB_EINVAL. */
int window_init(struct window_ctl *w, int min, int max);
void window_free(struct window_ctl *w);
/* The chain just verified: drafted n (the window's drafts), accepted of them,
 * tokens made by the pass (accepted + the bonus token, fewer at the budget's
 * end), seconds the pass took.  Returns the next N.  0 allocation failures
 * only lose the trajectory's tail. */
int window_update(struct window_ctl *w, int drafted, int accepted, int tokens, double seconds);
/* The same for a chain whose window is kept whatever it accepted (coverage
 * mode's case B, core/gen/spec.h: the rejection came from a row computed
 * with all its experts): measured and recorded, N unchanged, the runs of
 * full acceptances and rejections reset. */
int window_keep(struct window_ctl *w, int drafted, int tokens, double seconds);

#endif
