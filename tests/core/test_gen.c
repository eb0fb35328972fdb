/* test_gen.c — core/gen: the session's steps (prefill chunks, then one id
 * per step), the stop rule (budget, stop ids, ignore_stop, cancel), argmax
 * steps, restart giving the same ids, and the logits file. */
#include "core/gen/gen.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define V 16

/* A made-up model: the next id is (last id * 3 + 1) mod V, by a wide margin. */
static void fake_logits(int32_t last, float *logits)
{
    for (int i = 0; i < V; i++) logits[i] = (float)(i % 5) * 0.01f;
    logits[(last * 3 + 1) % V] = 10.0f;
}

struct run {
    int32_t ids[64];
    int n_ids, n_prefill_steps, n_decode_steps;
};

/* Drives g to the end (or to cancel_at tokens); returns the driver's view. */
static struct run drive(gen_session *g, int cancel_at, bool use_argmax)
{
    struct run r = {0};
    struct gen_step st;
    struct gen_event ev;
    float logits[V];
    char err[128];
    while (gen_next(g, &st) == GEN_EVAL) {
        int32_t last = st.ids[st.n_ids - 1];
        cr_assert_eq(st.n_rows, 1);
        fake_logits(last, logits);
        int32_t am = (last * 3 + 1) % V;
        if (st.phase == GEN_PREFILL) {
            r.n_prefill_steps++;
        } else {
            r.n_decode_steps++;
            cr_assert_eq(st.n_ids, 1);
        }
        bool argmax = use_argmax && st.argmax_ok;
        cr_assert_eq(gen_feed(g, argmax ? NULL : logits, argmax ? &am : NULL, &ev, err, sizeof err), 0, "%s", err);
        if (ev.token) {
            cr_assert_eq(ev.index, r.n_ids);
            r.ids[r.n_ids++] = ev.id;
            if (!ev.stop && r.n_ids == cancel_at) gen_cancel(g);
        }
    }
    return r;
}

static struct gen_config config(const int32_t *prompt, size_t n, long long budget)
{
    struct gen_config c = {.prompt = prompt, .n_prompt = n, .budget = budget, .n_vocab = V, .chunk = 2};
    c.sp = sampling_defaults(false);
    c.sp.temperature = 0;
    return c;
}

Test(gen, prefill_in_chunks_then_budget)
{
    const int32_t prompt[5] = {1, 2, 3, 4, 5};
    struct gen_config c = config(prompt, 5, 4);
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    struct run r = drive(g, -1, false);
    cr_assert_eq(r.n_prefill_steps, 3, "5 ids in chunks of 2");
    cr_assert_eq(r.n_decode_steps, 3, "4 tokens: the first from the prefill, no step after the last");
    int32_t want[4] = {0};
    for (int i = 0, last = 5; i < 4; i++) want[i] = last = (last * 3 + 1) % V;
    cr_assert_arr_eq(r.ids, want, sizeof want);
    struct gen_result res;
    cr_assert_eq(gen_finish(g, &res, err, sizeof err), 0);
    cr_assert_eq(res.made, 4);
    cr_assert_str_eq(res.why, "length");
    cr_assert_arr_eq(res.ids, want, sizeof want);
    gen_free(g);
}

Test(gen, stop_ids_ignore_stop_cancel_and_zero_budget)
{
    const int32_t prompt[1] = {5}; /* 5 → 0 → 1 → 4 → 13 → 8 → ... */
    struct gen_config c = config(prompt, 1, 10);
    c.stop_ids[0] = 4, c.n_stop = 1;
    gen_session *g;
    char err[128];
    struct gen_result res;
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    struct run r = drive(g, -1, true);
    gen_finish(g, &res, err, sizeof err);
    cr_assert_eq(res.made, 3, "the stop id is kept in the output");
    cr_assert_eq(res.ids[2], 4);
    cr_assert_str_eq(res.why, "stop token");
    gen_free(g);

    c.ignore_stop = true;
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    r = drive(g, 5, true);
    gen_finish(g, &res, err, sizeof err);
    cr_assert_eq(res.made, 5);
    cr_assert_str_eq(res.why, "hook", "cancelled by the driver");
    (void)r;
    gen_free(g);

    c.budget = 0;
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    r = drive(g, -1, true);
    gen_finish(g, &res, err, sizeof err);
    cr_assert_eq(res.made, 0);
    cr_assert_eq(r.n_prefill_steps, 1);
    cr_assert_str_eq(res.why, "length");
    gen_free(g);
    c.n_prompt = 0;
    cr_assert_neq(gen_new(&c, &g, err, sizeof err), 0, "an empty prompt is refused");
}

Test(gen, restart_gives_the_same_sampled_ids)
{
    const int32_t prompt[3] = {7, 8, 9};
    struct gen_config c = config(prompt, 3, 12);
    c.sp = sampling_defaults(true);
    c.sp.seed = 42, c.sp.presence_penalty = 0.5f;
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    struct gen_step st;
    cr_assert_eq(gen_next(g, &st), GEN_EVAL);
    cr_assert_not(st.argmax_ok, "sampling needs the logits");
    struct run a = drive(g, -1, true);
    cr_assert_eq(gen_restart(g, err, sizeof err), 0);
    struct run b = drive(g, -1, true);
    cr_assert_eq(a.n_ids, b.n_ids);
    cr_assert_arr_eq(a.ids, b.ids, (size_t)a.n_ids * sizeof a.ids[0]);
    gen_free(g);
}

Test(gen, logits_file)
{
    char path[] = "/tmp/nebula-test-gen-XXXXXX", file[64], tmp[70];
    cr_assert_not_null(mkdtemp(path));
    snprintf(file, sizeof file, "%s/rows.f32", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    const int32_t prompt[2] = {1, 2};
    struct gen_config c = config(prompt, 2, 3);
    c.logits_path = file;
    gen_session *g;
    char err[128];
    struct gen_result res;
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    struct gen_step st;
    cr_assert_eq(gen_next(g, &st), GEN_EVAL);
    cr_assert_not(st.argmax_ok, "a logits file needs the rows");
    drive(g, -1, false);
    cr_assert_eq(gen_finish(g, &res, err, sizeof err), 0, "%s", err);
    gen_free(g);
    struct stat sb;
    cr_assert_eq(stat(file, &sb), 0);
    cr_assert_eq(sb.st_size, 3 * V * 4, "one row per token");
    cr_assert_eq(sb.st_mode & 0777, 0600);
    cr_assert_neq(access(tmp, F_OK), 0);
    unlink(file);
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    drive(g, 1, false);
    gen_free(g); /* not finished: nothing left under either name */
    cr_assert_neq(access(tmp, F_OK), 0);
    cr_assert_neq(access(file, F_OK), 0);
    rmdir(path);
}

/* gen_resume (the prompt cache): the prefill starts after the loaded ids and its steps keep the
 * uncached grid (ends at multiples of chunk), split once more at each cut; the ids are the same. */
Test(gen, resume_keeps_the_grid_and_cuts)
{
    int32_t prompt[30];
    for (int i = 0; i < 30; i++) prompt[i] = i % V;
    struct gen_config c = config(prompt, 30, 3);
    c.chunk = 8;
    gen_session *g;
    char err[128];
    cr_assert_eq(gen_new(&c, &g, err, sizeof err), 0);
    struct run plain = drive(g, -1, false);
    cr_assert_eq(gen_restart(g, err, sizeof err), 0);
    gen_resume(g, 10, 20, 27);
    struct gen_step st;
    struct gen_event ev;
    float logits[V];
    /* [from, n]: to 16 (the grid), to the cut, to 24, to the second cut; then 27 … 30 */
    const int want[][2] = {{10, 6}, {16, 4}, {20, 4}, {24, 3}};
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(gen_next(g, &st), GEN_EVAL);
        cr_assert_eq(st.phase, GEN_PREFILL);
        cr_expect_eq(st.ids[0], prompt[want[k][0]], "step %d starts at %d", k, want[k][0]);
        cr_expect_eq(st.n_ids, want[k][1], "step %d: %d ids, want %d", k, st.n_ids, want[k][1]);
        cr_expect_eq(gen_prefilled(g), (size_t)want[k][0]);
        fake_logits(st.ids[st.n_ids - 1], logits);
        cr_assert_eq(gen_feed(g, logits, NULL, &ev, err, sizeof err), 0, "%s", err);
    }
    cr_expect_eq(gen_prefilled(g), 27);
    struct run rest = drive(g, -1, false);
    cr_expect_eq(rest.n_prefill_steps, 1, "the last step: 27 to the end");
    cr_expect(rest.n_ids == plain.n_ids && !memcmp(rest.ids, plain.ids, sizeof plain.ids), "the same tokens after a resume");
    gen_free(g);
}
