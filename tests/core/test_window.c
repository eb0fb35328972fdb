/* test_window.c — the draft window controller (core/gen/window.h): growth
 * on full acceptances, shrinking on rejections, the reset on a rejected first
 * draft, the bounds, the measured history's ±2 from the 8th chain, the
 * trajectory. */
#include <criterion/criterion.h>

#include "core/gen/window.h"
#include "core/util/err.h"

Test(window, grows_shrinks_resets)
{
    struct window_ctl w;
    cr_assert_eq(window_init(&w, 4, 16), 0);
    cr_expect_eq(w.n, 4, "starts at the minimum");
    /* full acceptances: +0, +1, +1, +2, +3, +5 (seconds equal per token: no history preference) */
    const int want_up[] = {4, 5, 6, 8, 11, 16, 16};
    for (int i = 0; i < 7; i++) {
        int n = w.n;
        cr_expect_eq(window_update(&w, n, n, n + 1, 0.0), want_up[i], "full acceptance %d", i + 1);
    }
    /* rejections after the first draft: -2, -4, -6, -6 */
    const int want_down[] = {14, 10, 4, 4};
    for (int i = 0; i < 4; i++) {
        int n = w.n;
        cr_expect_eq(window_update(&w, n, 1, 2, 0.0), want_down[i], "partial rejection %d", i + 1);
    }
    for (int i = 0; i < 3; i++) window_update(&w, w.n, w.n, w.n + 1, 0.0); /* back up to 6 */
    cr_expect_eq(w.n, 6);
    cr_expect_eq(window_update(&w, 6, 0, 1, 0.0), 4, "a rejected first draft: back to the minimum");
    cr_expect_eq(window_update(&w, 4, 4, 5, 0.0), 4, "and the growth starts over (+0)");
    cr_expect_eq((int)w.n_traj, 7 + 4 + 3 + 2, "one trajectory entry a chain");
    cr_expect_eq(w.trajectory[0], 4);
    cr_expect_eq(w.trajectory[6], 16, "the N each chain drafted");
    window_free(&w);
}

Test(window, history_moves_by_two)
{
    struct window_ctl w;
    cr_assert_eq(window_init(&w, 4, 16), 0);
    /* partial acceptances at N = 4 stay at 4 (shrink clamps); N = 6 measured faster */
    w.passes[6] = 3, w.tokens[6] = 30, w.seconds[6] = 1.0; /* 30 tokens/s */
    for (int i = 0; i < 7; i++) window_update(&w, 4, 2, 3, 1.0); /* 3 tokens/s at 4 */
    cr_expect_eq(w.n, 4, "before the 8th chain the history is not used");
    cr_expect_eq(window_update(&w, 4, 2, 3, 1.0), 6, "8th chain: N + 2 predicts more tokens a second");
    struct window_ctl v;
    cr_assert_eq(window_init(&v, 4, 16), 0);
    v.n = 10;
    v.passes[8] = 5, v.tokens[8] = 50, v.seconds[8] = 1.0;
    for (int i = 0; i < 8; i++) v.passes[10]++, v.tokens[10] += 1, v.seconds[10] += 1.0, v.chains++;
    v.full_run = 1; /* the next full acceptance adds 1: 10 → 11, then 11's history is unmeasured */
    cr_expect_eq(window_update(&v, 10, 10, 11, 1.0), 11, "no history at the new N: no correction");
    window_free(&w), window_free(&v);
}

Test(window, bounds)
{
    struct window_ctl w;
    cr_expect_eq(window_init(&w, 0, 16), NB_EINVAL);
    cr_expect_eq(window_init(&w, 5, 4), NB_EINVAL);
    cr_expect_eq(window_init(&w, 4, WINDOW_MAX + 1), NB_EINVAL);
    cr_assert_eq(window_init(&w, 2, 3), 0);
    for (int i = 0; i < 10; i++) window_update(&w, w.n, w.n, w.n + 1, 0.0);
    cr_expect_eq(w.n, 3, "never above the maximum");
    window_free(&w);
}

Test(window, keep_holds_n_and_resets_the_runs)
{
    struct window_ctl w;
    cr_assert_eq(window_init(&w, 4, 16), 0);
    window_update(&w, 4, 4, 5, 1.0), window_update(&w, 4, 4, 5, 1.0); /* two full acceptances: 4 → 4 → 5 */
    cr_assert_eq(w.n, 5);
    cr_expect_eq(window_keep(&w, 5, 2, 1.0), 5, "case B keeps the window");
    cr_expect_eq(w.full_run, 0, "and ends the run of full acceptances");
    cr_expect_eq(window_update(&w, 5, 5, 6, 1.0), 5, "the next full acceptance is the run's first again (+0)");
    cr_expect_eq(w.chains, 4);
    cr_expect_eq(w.n_traj, 4);
    cr_expect_eq(w.trajectory[2], 5, "the kept chain is in the trajectory");
    cr_expect_eq(w.passes[5], 2, "and measured");
    window_free(&w);
}
