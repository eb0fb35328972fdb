/* window.c — the draft window controller (window.h). */
#include "core/gen/window.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

int window_init(struct window_ctl *w, int min, int max)
{
    memset(w, 0, sizeof *w);
    if (min < 1 || max > WINDOW_MAX || min > max) return NB_EINVAL;
    w->min = min, w->max = max, w->n = min;
    return 0;
}

void window_free(struct window_ctl *w)
{
    free(w->trajectory);
    memset(w, 0, sizeof *w);
}

static int clamp(const struct window_ctl *w, int n) { return n < w->min ? w->min : n > w->max ? w->max : n; }

/* tokens a second the history predicts for window n, or -1 below two passes */
static double rate(const struct window_ctl *w, int n)
{
    if (n < 1 || n > WINDOW_MAX || w->passes[n] < 2 || w->seconds[n] <= 0) return -1;
    return (double)w->tokens[n] / w->seconds[n];
}

/* The chain into the trajectory and the measured history. */
static void record(struct window_ctl *w, int drafted, int tokens, double seconds)
{
    if (w->n_traj == w->cap_traj) {
        size_t cap = w->cap_traj ? 2 * w->cap_traj : 64;
        int *t = realloc(w->trajectory, cap * sizeof *t);
        if (t) w->trajectory = t, w->cap_traj = cap;
    }
    if (w->n_traj < w->cap_traj) w->trajectory[w->n_traj++] = drafted;
    if (drafted >= 1 && drafted <= WINDOW_MAX) {
        w->passes[drafted]++, w->tokens[drafted] += tokens;
        w->seconds[drafted] += seconds;
    }
    w->chains++;
}

int window_keep(struct window_ctl *w, int drafted, int tokens, double seconds)
{
    record(w, drafted, tokens, seconds);
    w->full_run = w->reject_run = 0;
    return w->n;
}

int window_update(struct window_ctl *w, int drafted, int accepted, int tokens, double seconds)
{
    record(w, drafted, tokens, seconds);
    static const int grow[] = {0, 1, 1, 2, 3, 5}, shrink[] = {2, 4, 6};
    int n = w->n;
    if (drafted > 0 && accepted == drafted) { /* every draft accepted */
        w->reject_run = 0;
        n += grow[w->full_run < 5 ? w->full_run : 5];
        w->full_run++;
    } else if (accepted == 0) { /* the first draft rejected */
        w->full_run = w->reject_run = 0;
        n = w->min;
    } else {
        w->full_run = 0;
        n -= shrink[w->reject_run < 2 ? w->reject_run : 2];
        w->reject_run++;
    }
    n = clamp(w, n);
    if (w->chains >= 8) { /* the measured history's ±2 */
        const double here = rate(w, n), lo = rate(w, n - 2), hi = rate(w, n + 2);
        if (here >= 0) {
            if (hi > here && hi >= lo && n + 2 <= w->max) n += 2;
            else if (lo > here && n - 2 >= w->min) n -= 2;
        }
    }
    return w->n = n;
}
